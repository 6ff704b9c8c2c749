"""Version 32, a diagnostic: do the one-token GEMVs wait for their weights? Every layer's decode matrices are
pointed at layer 0's (one set of 14.2 MB in bf16, which the L2 can hold from layer to layer), all four or one
kind at a time; the same kernels, launches and plans. One process, decode_rate.rate, gpt2 b1, tok/s; then
the GPU's timeline (timeline_decode.run_case) of the plain and the all-aliased step. A diagnostic only: the
aliased model's outputs are not gpt2's."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402
from scripts.timeline_decode import run_case  # noqa: E402

MATS = ("w_qkv", "w_attn", "w_fc", "w_proj")
for prec in sys.argv[1:] or ["bf16"]:
    r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", prec)
    orig = list(r.dec_mats)

    def alias(names):
        return [{k: (orig[0][k] if k in names else v) for k, v in m.items()} for m in orig]

    cases = [("plain", ()), ("all aliased", MATS)] + [(f"{n} aliased", (n,)) for n in MATS]
    for rnd in range(3):
        for label, names in cases:
            r.dec_mats = alias(names)
            print(f"round {rnd} gpt2 {prec} b1 {label}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    for label, names in cases[:2]:
        r.dec_mats = alias(names)
        print(f"\n== timeline gpt2 {prec} b1 {label}")
        print("\n".join(run_case(r, 1, 64)), flush=True)
    r.dec_mats = orig

"""Version 32: one process, decode_rate.rate, tok/s: the one-token LayerNorm GEMVs (ln_1 + QKV, ln_2 + FC)
normalizing each piece of x in their product loop (GEMV_LN_INLOOP_M1=1, no normalization pass and no second
block barrier) against the row normalized in shared memory first (=0, version 31's path); the same bits.
gpt2 bf16 and fp32 b1 three rounds; gpt2 fp32 b8 (the m8 build, unchanged: a control), gpt2-medium bf16 b1
and gpt2-xl fp32 b1 once; then the GPU's timeline of gpt2 bf16 b1 under each.
GEMV_LN_INLOOP_M1 is in ln_inloop_dropped.patch (beside this script; git apply it first): measured slower, dropped."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402
from scripts.timeline_decode import run_case  # noqa: E402


def mode(v):
    cuda_linear.NT_DEFINES = (("GEMV_LN_INLOOP_M1", v),)


runners = {(s, p): make_runner(ModelWeights.random(SIZES[s], seed=0), "cuda", p)
           for s, p in (("gpt2", "bf16"), ("gpt2", "fp32"))}
for rnd in range(3):
    for (s, p), r in runners.items():
        for v in (0, 1):
            mode(v)
            print(f"round {rnd} {s} {p} b1 inloop {v}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
for v in (0, 1):
    mode(v)
    print(f"gpt2 fp32 b8 inloop {v}: {rate(runners['gpt2', 'fp32'], 8, 128):,.0f} tok/s", flush=True)
del runners
for s, p in (("gpt2-medium", "bf16"), ("gpt2-xl", "fp32")):
    r = make_runner(ModelWeights.random(SIZES[s], seed=0), "cuda", p)
    for v in (0, 1):
        mode(v)
        print(f"{s} {p} b1 inloop {v}: {rate(r, 1, 64):,.0f} tok/s", flush=True)
    del r
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
for v in (0, 1):
    mode(v)
    print(f"\n== timeline gpt2 bf16 b1 inloop {v}")
    print("\n".join(run_case(r, 1, 64)), flush=True)

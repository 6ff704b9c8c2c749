"""Version 33: the one-token GEMVs' weights through shared memory (cp.async into per-lane slots before the wait,
read back in the product loop; GEMV_W_SMEM_M1, cuda_linear.GEMV_W_SMEM_M1 by product kind) instead of held in
registers, so that the blocks take fewer registers (ptxas: bf16 QKV / FC 96 -> 92, projections 80 -> 72; with
GEMV_NT_MIN_BLOCKS_ROWS4 4, 62-64 with no spill) and more blocks of the next kernels fit beside the running ones.
gpt2 b1 tok/s (decode_rate.rate, 128 steps), one process, three rounds; first each variant's decode logits
against the kept build's (the same bits expected: max |diff| 0)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

ALL = {"qkv", "proj", "fc", "mlp_proj"}
VARIANTS = {  # name: (GEMV_W_SMEM_M1, NT_DEFINES)
    "registers (kept)": ({}, ()),
    "smem": ({"bf16": ALL, "f32": ALL}, ()),
    "smem, 4 blocks/SM": ({"bf16": ALL, "f32": ALL}, (("GEMV_NT_MIN_BLOCKS_ROWS4", 4), ("GEMV_NT_MIN_BLOCKS_M1_F32", 4))),
    "smem, 3 blocks/SM": ({"bf16": ALL, "f32": ALL}, (("GEMV_NT_MIN_BLOCKS_ROWS4", 3),)),
    "registers, 3 blocks/SM": ({}, (("GEMV_NT_MIN_BLOCKS_ROWS4", 3),)),
}
size = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
precs = sys.argv[2].split(",") if len(sys.argv) > 2 else ["bf16", "fp32"]
ids = np.random.default_rng(1).integers(0, 50257, 20)


def use(name):
    cuda_linear.GEMV_W_SMEM_M1, cuda_linear.NT_DEFINES = VARIANTS[name]


for prec in precs:
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)

    def logits():
        cache = r.new_cache(1)
        r.prefill(cache, 0, ids[:16])
        return np.stack([r.decode(cache, np.array([t])) for t in ids[16:]])

    ref = None
    for name in VARIANTS:
        use(name)
        lg = logits()
        ref = lg if ref is None else ref
        print(f"{size} {prec} {name}: logits max |diff| vs kept {float(np.abs(lg - ref).max()):.3g}", flush=True)
    for rnd in range(3):
        for name in VARIANTS:
            use(name)
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
use("registers (kept)")

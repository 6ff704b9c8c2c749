"""Version 33: the one-token bf16 GEMVs in blocks of 128 threads instead of 256 (the same warps per row group
and rows a warp, so the same split of the work; twice the blocks), by product kind
(cuda_linear.GEMV_NT_M1_BF16_THREADS). gpt2 bf16 b1 tok/s (decode_rate.rate, 128 steps), one process, every
variant beside the 256-thread build, three rounds. Also a decode step's logits of each variant against the
256-thread build's (max |diff|), so that a variant that breaks the product shows."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

VARIANTS = {
    "256 (kept)": {},
    "qkv+proj+fc 128": {"qkv": 128, "proj": 128, "fc": 128},
    "qkv 128": {"qkv": 128},
    "fc 128": {"fc": 128},
    "proj 128": {"proj": 128},
    "all four 128": {"qkv": 128, "proj": 128, "fc": 128, "mlp_proj": 128},
}
size = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", "bf16")
ids = np.random.default_rng(1).integers(0, 50257, 20)


def logits():
    cache = r.new_cache(1)
    r.prefill(cache, 0, ids[:16])
    out = None
    for t in ids[16:]:
        out = r.decode(cache, np.array([t]))
    return out


ref = None
for name, table in VARIANTS.items():
    cuda_linear.GEMV_NT_M1_BF16_THREADS = dict(table)
    lg = logits()
    ref = lg if ref is None else ref
    print(f"{size} {name}: logits max |diff| vs 256 {float(np.abs(lg - ref).max()):.3g}", flush=True)
for rnd in range(3):
    for name, table in VARIANTS.items():
        cuda_linear.GEMV_NT_M1_BF16_THREADS = dict(table)
        print(f"round {rnd} {size} bf16 b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
cuda_linear.GEMV_NT_M1_BF16_THREADS = {}

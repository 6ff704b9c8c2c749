"""Version 33: the one-token LayerNorm GEMVs built for their K (cuda_linear.GEMV_LN_K_BY_WIDTH, kernels/gemv.cu
GEMV_LN_K: no loop over the row's pieces on the path from x's arrival to the products) against version 31's
general loops. Decode logits of both first (the same bits expected), then gpt2 b1 tok/s (decode_rate.rate, 128
steps), one process, three rounds, bf16 and fp32, and gpt2-medium bf16 two rounds."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

ids = np.random.default_rng(1).integers(0, 50257, 20)
for size, prec, rounds in (("gpt2", "bf16", 3), ("gpt2", "fp32", 3), ("gpt2-medium", "bf16", 2)):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    out = {}
    for spec in (False, True):
        cuda_linear.GEMV_LN_K_BY_WIDTH = spec
        cache = r.new_cache(1)
        r.prefill(cache, 0, ids[:16])
        out[spec] = np.stack([r.decode(cache, np.array([t])) for t in ids[16:]])
    print(f"{size} {prec}: logits built-for-K vs general, max |diff| {float(np.abs(out[True] - out[False]).max()):.3g}",
          flush=True)
    for rnd in range(rounds):
        for spec in (False, True):
            cuda_linear.GEMV_LN_K_BY_WIDTH = spec
            name = "LayerNorm built for K" if spec else "general loops (v31)"
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda_linear.GEMV_LN_K_BY_WIDTH = True

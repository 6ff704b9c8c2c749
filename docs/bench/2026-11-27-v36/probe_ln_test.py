"""Version 36: how often tests/gpu/test_model_cuda.py::test_layernorm_kernel's limit (error vs float64 <= 2x torch's +
one float32 ulp of the output's scale) fails on its own data (rows of N(0, 1), the first 3 columns x3000, row 0 +2000),
with the statistics in two float64 warp sums (layernorm.cu LN_STATS_TWO_SUMS 1, version 34's) and in three (0):
TRIALS fresh draws per width at each of ROWS (arguments: TRIALS ROWS, default 200 1,30); prints failures, the worst
ratio err / limit and the worst error in float32 ulps of the output's scale (max |ref|, the test's slack)."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_ops  # noqa: E402

TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
ROWS = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 30]
rng = np.random.default_rng()
for rows in ROWS:
    for d in (768, 1024, 1280, 1600):
        stats = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0]}
        for _ in range(TRIALS):
            x = rng.normal(0, 1, (rows, d)).astype(np.float32)
            x[:, :3] *= 3000.0
            x[0] += 2000.0
            g = rng.uniform(0.8, 1.2, d).astype(np.float32)
            b = rng.normal(0, 0.1, d).astype(np.float32)
            xd = x.astype(np.float64)
            ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + b
            peer = torch.nn.functional.layer_norm(torch.tensor(x).cuda(), (d,), torch.tensor(g).cuda(),
                                                  torch.tensor(b).cuda(), 1e-5).double().cpu().numpy()
            slack = max(1e-6, float(np.spacing(np.float32(np.abs(ref).max()))))
            limit = 2 * np.abs(peer - ref).max() + slack
            for two in (0, 1):
                cuda_ops.LN_DEFINES = (("LN_STATS_TWO_SUMS", two),)
                y = cp.full((rows, d), cp.nan, cp.float32)
                cuda_ops.layernorm(cp.asarray(x), cp.asarray(g), cp.asarray(b), y, 1e-5, blocks=1)
                err = np.abs(cp.asnumpy(y).astype(np.float64) - ref)
                s = stats[two]
                s[0] += int(err.max() > limit)
                s[1] = max(s[1], float(err.max() / limit))
                s[2] = max(s[2], float(err.max() / slack))
        for two in (0, 1):
            f, ratio, ulps = stats[two]
            print(f"rows {rows:2d} d {d}: {'two' if two else 'three'} sums: {f} of {TRIALS} over the limit, "
                  f"worst err / limit {ratio:.2f}, worst {ulps:.2f} ulp", flush=True)
cuda_ops.LN_DEFINES = ()

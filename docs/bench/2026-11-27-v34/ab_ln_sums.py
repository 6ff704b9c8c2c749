"""Version 34: the LayerNorm kernel's statistics in two float64 warp sums, the deviations and their squares
side by side (layernorm.cu LN_STATS_TWO_SUMS 1), against three in a row (0, version 33's). 8192 x 768 in the
benchmark's bursts (gpt2block.bench.bench_layernorm, 20 reps a figure, its max error against torch's float64
layer_norm), three rounds each, beside the device copy ceiling of the same process; then the error of both on
rows offset by 1e3 and 1e4 with unit spread against float64 NumPy."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block import bench  # noqa: E402
from gpt2block.backends import cuda_ops  # noqa: E402

ceil = bench.measure_ceilings(torch, 20)
print(f"ceilings: copy {ceil['copy_TBps']:.3f} TB/s", flush=True)
for rnd in range(3):
    for two in (0, 1):
        cuda_ops.LN_DEFINES = (("LN_STATS_TWO_SUMS", two),)
        r = bench.bench_layernorm(torch, 20)
        print(f"round {rnd} LayerNorm 8192x768 two sums {two}: {r['ours_ms'] * 1e3:.2f} us, {r['ours_TBps']:.3f} TB/s "
              f"({r['ours_TBps'] / ceil['copy_TBps']:.1%} of copy), plain {r['ours_plain_TBps']:.3f}, same-size copy "
              f"{r['copy_same_size_TBps']:.3f} ({r['copy_same_size_TBps'] / ceil['copy_TBps']:.1%}), max err {r['max_err']:.2g}",
              flush=True)
rng = np.random.default_rng(0)
for offset in (0.0, 1e3, 1e4):
    x = (rng.standard_normal((4096, 768)) + offset).astype(np.float32)
    x[:, 7] += 3000.0  # one outlier column, as trained GPT-2's residual stream has
    g = rng.uniform(0.8, 1.2, 768).astype(np.float32)
    b = (rng.standard_normal(768) * 0.1).astype(np.float32)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + b
    errs = []
    for two in (0, 1):
        cuda_ops.LN_DEFINES = (("LN_STATS_TWO_SUMS", two),)
        y = cp.empty((4096, 768), cp.float32)
        cuda_ops.layernorm(cp.asarray(x), cp.asarray(g), cp.asarray(b), y, 1e-5)
        errs.append(float(np.abs(cp.asnumpy(y) - ref).max()))
    t = torch.nn.functional.layer_norm(torch.tensor(x, device="cuda"), (768,), torch.tensor(g, device="cuda"),
                                       torch.tensor(b, device="cuda"), 1e-5).cpu().numpy()
    print(f"offset {offset:g}: max |err| vs float64: three sums {errs[0]:.3g}, two sums {errs[1]:.3g}, "
          f"torch fp32 {float(np.abs(t - ref).max()):.3g}", flush=True)
cuda_ops.LN_DEFINES = ()

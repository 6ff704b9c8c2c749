"""LayerNorm 8192 x 768 under programmatic launch: the benchmark's own function (default stream), then
grids (blocks per SM) and depths in bursts, programmatic and plain, bits checked against the default."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cupy as cp, torch  # noqa: E401
from gpt2block import bench
from gpt2block.backends import cuda_ops
from gpt2block.backends.cuda_modules import programmatic_launches

ceil = bench.measure_ceilings(torch, 20)["copy_TBps"]
print(f"copy ceiling {ceil:.3f} TB/s; 80% needs {50.33e-6 / (0.8 * ceil * 1e12) * 1e6:.2f} us")
for rnd in range(2):
    r = bench.bench_layernorm(torch, 40)
    print(f"bench_layernorm round {rnd}: programmatic {r['ours_ms'] * 1e3:.2f} us ({r['ours_TBps'] / ceil:.1%}), plain "
          f"{r['ours_plain_ms'] * 1e3:.2f} us ({r['ours_plain_TBps'] / ceil:.1%}), torch {r['torch_ms'] * 1e3:.2f}, copy "
          f"{r['copy_same_size_ms'] * 1e3:.2f} us ({r['copy_same_size_TBps'] / ceil:.1%}); max err {r['max_err']:.2e}", flush=True)
rows, d, sets = 8192, 768, 4
xs, ys, g, b, xc, yc, gc, bc = bench.layernorm_sets(torch, rows, d, sets)
ref = cp.empty_like(yc[0]); cuda_ops.layernorm(xc[0], gc, bc, ref, 1e-5)
nbytes = 2 * rows * d * 4
fn = lambda i: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5)  # noqa: E731
base = (cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC)
for rnd in range(2):
    for per_sm in (2, 3, 4, 5, 6, 8):
        for depth3 in ((4, 5, 6), ()):
            cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC = per_sm, depth3
            yc[0][:] = cp.nan
            fn(0)
            same = bool((yc[0].view(cp.uint32) == ref.view(cp.uint32)).all())
            with programmatic_launches():
                tp = bench._burst_median(torch, fn, 40) * 1e3
            tpl = bench._burst_median(torch, fn, 40) * 1e3
            print(f"round {rnd} {per_sm} blocks/SM depth {3 if depth3 else 2}: programmatic {tp:.2f} us ({nbytes / tp / 1e6 / ceil:.1%}), "
                  f"plain {tpl:.2f} us; bits {'equal' if same else 'DIFFER'}", flush=True)
cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC = base

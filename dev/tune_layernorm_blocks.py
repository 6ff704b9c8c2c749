#!/usr/bin/env python3
"""LayerNorm sweeps on the GPU: python scripts/tune_layernorm.py [--rows 8192] [--widths 768,1600] [--hints]

For each width: a torch copy of the same bytes, torch's layer_norm, then layernorm_f32 with
1 to 12 blocks per SM and with one row per warp (device time behind a spin kernel, median of
30), in TB/s of bytes read + written, and the device copy ceiling of gpt2block.bench.
--hints: instead, the cache hints of layernorm.cu (LN_LOAD_HINT x LN_STORE_HINT, each pair two
rounds) at 8192 x 768, then the best two at 2 to 8 blocks per SM with two and three rows a warp,
timed as the benchmark times the LayerNorm row (bench._burst_median over four input / output
sets), each run's outputs checked bit for bit against the first's.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy as cp  # noqa: E402
import torch  # noqa: E402

from gpt2block.backends import cuda_ops  # noqa: E402
from gpt2block.backends.cuda_modules import sm_count  # noqa: E402
from gpt2block.bench import _device_median, measure_ceilings  # noqa: E402

def sweep_hints(rows: int, d: int, sets: int = 4) -> None:
    import numpy as np

    from gpt2block import bench

    xs, ys, g, b, xc, yc, gc, bc = bench.layernorm_sets(torch, rows, d, sets)
    nbytes = 2 * rows * d * 4
    first = []
    defaults = (cuda_ops.LN_DEFINES, cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC)

    def run(lh, sh, per_sm=cuda_ops.LN_BLOCKS_PER_SM, depth3=cuda_ops.LN_DEPTH3_VEC):
        cuda_ops.LN_DEFINES = (("LN_LOAD_HINT", lh), ("LN_STORE_HINT", sh))
        cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC = per_sm, depth3
        for i in range(sets):
            yc[i][:] = cp.nan
            cuda_ops.layernorm(xc[i], gc, bc, yc[i], 1e-5)
        out = cp.stack(yc)
        if not first:
            first.append(out)
        if not bool((out.view(cp.uint32) == first[0].view(cp.uint32)).all()):
            raise SystemExit(f"hints {lh}, {sh}: the outputs differ from the first run's")
        return bench._burst_median(torch, lambda i: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5), 40)

    print(f"{rows} x {d}, us per call in bursts (bits equal to the first run's throughout)")
    pairs = [(lh, sh) for lh in range(4) for sh in range(4)]
    times = {p: [] for p in pairs}
    for rnd in range(2):
        copy = bench._burst_median(torch, lambda i: ys[i % sets].copy_(xs[i % sets]), 40)
        print(f"round {rnd}: torch copy {copy * 1e3:.2f} us ({nbytes / copy / 1e9:.3f} TB/s)")
        for p in pairs:
            times[p].append(run(*p))
    for p in pairs:
        t = times[p]
        print(f"  load hint {p[0]} store hint {p[1]}: {min(t) * 1e3:.2f}-{max(t) * 1e3:.2f} us, "
              f"{nbytes / max(t) / 1e9:.3f}-{nbytes / min(t) / 1e9:.3f} TB/s")
    for p in sorted(pairs, key=lambda p: np.median(times[p]))[:2]:
        for per_sm in (2, 3, 4, 6, 8):
            for depth3 in ((4, 5, 6), ()):
                t = [run(*p, per_sm, depth3) for _ in range(2)]
                print(f"  hints {p}, {per_sm} blocks per SM, {'three' if depth3 else 'two'} rows a warp: "
                      f"{min(t) * 1e3:.2f}-{max(t) * 1e3:.2f} us")
    cuda_ops.LN_DEFINES, cuda_ops.LN_BLOCKS_PER_SM, cuda_ops.LN_DEPTH3_VEC = defaults


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--widths", default="768,1600")
    ap.add_argument("--hints", action="store_true")
    a = ap.parse_args()
    if a.hints:
        sweep_hints(a.rows, 768)
        sys.exit(0)
    print(f"copy ceiling {measure_ceilings(torch, 20)['copy_TBps']:.2f} TB/s")
    sms = sm_count()
    rows = a.rows
    for d in map(int, a.widths.split(",")):
        x = torch.randn(rows, d, device="cuda")
        g, b = torch.rand(d, device="cuda") + 0.5, torch.randn(d, device="cuda")
        y = torch.empty_like(x)
        xc, gc, bc, yc = (cp.asarray(t) for t in (x, g, b, y))
        nbytes = 2 * rows * d * 4
        copy = _device_median(torch, lambda: y.copy_(x), 30)
        peer = _device_median(torch, lambda: torch.nn.functional.layer_norm(x, (d,), g, b, 1e-5), 30)
        print(f"{rows} x {d}: same-size copy {copy * 1e3:.1f} us ({nbytes / copy / 1e9:.2f} TB/s), "
              f"torch layer_norm {peer * 1e3:.1f} us")
        most = -(-rows // cuda_ops.LN_WARPS)
        for per_sm in (1, 2, 3, 4, 6, 8, 12, None):
            blocks = most if per_sm is None else min(most, per_sm * sms)
            ms = _device_median(torch, lambda: cuda_ops.layernorm(xc, gc, bc, yc, 1e-5, blocks=blocks), 30)
            label = "one row per warp" if per_sm is None else f"{per_sm} per SM"
            print(f"  {blocks:5d} blocks ({label}): {ms * 1e3:.1f} us = {nbytes / ms / 1e9:.2f} TB/s")

#!/usr/bin/env python3
"""How many blocks per SM the LayerNorm kernel wants: python dev/tune_layernorm_blocks.py [--rows 8192] [--widths 768,1600]

For each width: a torch copy of the same bytes, torch's layer_norm, then layernorm_f32 with
1 to 12 blocks per SM and with one row per warp (device time behind a spin kernel, median of
30), in TB/s of bytes read + written, and the device copy ceiling of gpt2block.bench.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy as cp  # noqa: E402
import torch  # noqa: E402

from gpt2block.backends.cuda import ops as cuda_ops  # noqa: E402
from gpt2block.backends.cuda.modules import sm_count  # noqa: E402
from gpt2block.bench import _device_median, measure_ceilings  # noqa: E402


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--widths", default="768,1600")
    a = ap.parse_args()
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

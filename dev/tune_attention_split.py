#!/usr/bin/env python3
"""Sweep the split-key prefill's chunk (key tiles per block) on the GPU:

    python dev/tune_attention_split.py [--seqs 1024,2048] [--heads 12,25] [--impl auto|mma]

For each case (causal and not, both tensor-core variants): device time of attention_prefill with
chunk 0 (the plain kernel) and a range of chunks (gpt2block.bench._device_median: behind a spin
kernel, median of 20); the chunk the plan picks is marked * (prefill_split_plan for attention.cu's
mma.sync kernels, --impl mma; wg_split_plan for attention_wgmma.cu's, chunk = key tiles per
128-query block, the default impl on a wgmma GPU). (The sweep of
docs/PERFORMANCE.md's version 7 timed bursts of 5 launches with events.)
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy as cp  # noqa: E402
import torch  # noqa: E402

from gpt2block.backends.cuda import attention as A  # noqa: E402
from gpt2block.bench import _device_median  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="1024,2048")
    ap.add_argument("--heads", default="12,25")
    ap.add_argument("--impl", default="auto", choices=["auto", "mma"])
    a = ap.parse_args()
    for s in map(int, a.seqs.split(",")):
        for h in map(int, a.heads.split(",")):
            d = 64 * h
            qkv = cp.random.standard_normal((s, 3 * d), dtype=cp.float32)
            out = cp.empty((s, d), cp.float32)
            for causal in (True, False):
                for variant in ("tf32x3f", "tf32"):
                    wg = a.impl == "auto" and A.wgmma_available()
                    picked = (A.wg_split_plan(s, s, 0, causal, h, A.sm_count()) if wg
                              else A.prefill_split_plan(s, s, 0, causal, variant))[0]
                    cells = []
                    for chunk in (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16):
                        if chunk >= -(-s // 64):
                            continue
                        us = 1e3 * _device_median(torch, lambda c=chunk: A.attention_prefill(
                            qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], out, n_head=h, s_q=s, s_kv=s,
                            causal=causal, q_stride=3 * d, kv_stride=3 * d, variant=variant, chunk=c,
                            impl=a.impl), 20)
                        cells.append(f"{chunk}{'*' if chunk == picked else ''}: {us:6.1f}")
                    print(f"S={s} H={h} {'causal' if causal else 'full  '} {variant:7s} | " + " | ".join(cells),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

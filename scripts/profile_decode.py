#!/usr/bin/env python3
"""Where a decode step's time goes: kernel time per step, per kernel, from the CUDA profiler.

    python scripts/profile_decode.py [SIZE] [--steps N] [--cases fp32:1,fp32:8,bf16:1]

Random weights of SIZE; after a 16-token prefill per row and 5 warm-up steps, N greedy steps
run under torch.profiler (CUPTI sees CuPy's kernels too, graph replays included). Prints, per
precision and batch, the kernels by total time per step and the step's kernel time in all.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402


def profile_case(runner, batch: int, steps: int) -> list[str]:
    import cupy as cp
    from torch.profiler import ProfilerActivity, profile

    cache = runner.new_cache(batch)
    tok = np.stack([runner.prefill(cache, r, np.arange(16) + r) for r in range(batch)]).argmax(-1)
    for _ in range(5):
        tok = runner.decode_greedy(cache, tok)
    cp.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            tok = runner.decode_greedy(cache, tok)
    rows, total = [], 0.0
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        us = e.cuda_time_total if us is None else us
        if us > 0:
            total += us
            rows.append((us / steps, e.count / steps, e.key[:60]))
    out = [f"  {us:8.1f} us  x{n:5.1f}  {name}" for us, n, name in sorted(rows, reverse=True)]
    return out + [f"  {total / steps:8.1f} us  kernel time per step in all"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--cases", default="fp32:1,fp32:8,bf16:1", help="precision:batch, comma-separated")
    a = ap.parse_args()
    w = ModelWeights.random(SIZES[a.size], seed=0)
    runners = {}
    for case in a.cases.split(","):
        prec, batch = case.split(":")
        runner = runners.get(prec) or runners.setdefault(prec, make_runner(w, "cuda", prec))
        print(f"== {a.size} {prec} batch {batch}: kernel time per decode step", flush=True)
        print("\n".join(profile_case(runner, int(batch), a.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

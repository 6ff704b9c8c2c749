#!/usr/bin/env python3
"""Where a decode step's time goes: kernel time per step, per kernel, from the CUDA profiler.

    python dev/profile_decode.py [SIZE] [--steps N] [--cases fp32:1,fp32:8,bf16:1]

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
    out = kernel_table(prof, steps)
    out.append(out.pop()[:-1] + " per step in all (overlapping kernels count twice)")
    return out + [f"  {graph_step_us(runner, cache):8.1f} us  graph replay per step, no host in between"]


def kernel_table(prof, calls: int) -> list[str]:
    """A torch.profiler run's CUDA kernels by device time per call, longest first, then their sum
    (a line ending in ' kernel time:')."""
    rows, total = [], 0.0
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        us = e.cuda_time_total if us is None else us
        if us > 0:
            total += us
            rows.append((us / calls, e.count / calls, e.key[:70]))
    out = [f"  {us:8.1f} us  x{n:5.1f}  {name}" for us, n, name in sorted(rows, reverse=True)]
    return out + [f"  {total / calls:8.1f} us  kernel time:"]


def graph_step_us(runner, cache, reps: int = 200) -> float:
    """Device time of one decode step: the captured graph replayed back to back (the same
    step's inputs each time), timed with events; the host's part of a step is not in it."""
    import cupy as cp

    s = runner.stream
    for _ in range(10):
        cache.graph.launch(s)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(s)
    for _ in range(reps):
        cache.graph.launch(s)
    b.record(s)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e3 / reps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--cases", default="fp32:1,fp32:8,bf16:1", help="precision:batch, comma-separated")
    ap.add_argument("--programmatic", default="on", choices=["on", "off"],
                    help="programmatic dependent launch (off: kernel durations do not overlap)")
    ap.add_argument("--graph-only", action="store_true", help="only the graph replay time, no profiler")
    a = ap.parse_args()
    w = ModelWeights.random(SIZES[a.size], seed=0)
    runners = {}
    for case in a.cases.split(","):
        prec, batch = case.split(":")
        runner = runners.get(prec) or runners.setdefault(prec, make_runner(w, "cuda", prec))
        runner.programmatic = a.programmatic == "on"
        print(f"== {a.size} {prec} batch {batch}, programmatic {a.programmatic}", flush=True)
        if a.graph_only:
            cache = runner.new_cache(int(batch))
            tok = np.zeros(int(batch), np.int64)
            for r in range(int(batch)):
                runner.prefill(cache, r, np.arange(16) + r)
            for _ in range(3):
                tok = runner.decode_greedy(cache, tok)
            print(f"  {graph_step_us(runner, cache):8.1f} us  graph replay per step", flush=True)
        else:
            print("\n".join(profile_case(runner, int(batch), a.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

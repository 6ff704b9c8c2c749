#!/usr/bin/env python3
"""The GPU's timeline of greedy decode steps: when each kernel of a step starts and ends, and the
gaps between them and between steps, from the CUDA profiler's records of the kernels.

    python dev/timeline_decode.py [SIZE] [--steps N] [--cases fp32:1,bf16:1] [--cluster on|off]
                                      [--cluster on|off]

Random weights of SIZE; after a 16-token prefill per row, runs N steps of runner.greedy_steps (as
generate() and decode_rate.py run them) under torch.profiler (CUPTI records each kernel of a graph
replay). A step starts with its embedding kernel. Prints, per case, the median over the steps of: each kernel's
start relative to the step's start and its duration; the gap from each kernel's end to the next
kernel's start (negative where programmatic launch overlaps them); the step's span from its first
kernel's start to its last kernel's end, and the step period (start to next start); and each kernel's end
after the end of the kernel before it ("end - end before"; the first kernel's from the step's start): the step's
time kernel by kernel, unstamped. Under programmatic launch a kernel starts early, so its duration includes its
wait; the end after the end before is what it adds to the step (docs/PERFORMANCE.md, version 31).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402


def kernel_records(prof) -> list[tuple[float, float, str]]:
    """(start us, duration us, name) of every kernel the profiler saw, in start order."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    out = [(float(e["ts"]), float(e.get("dur", 0.0)), e["name"]) for e in events
           if e.get("cat") == "kernel" and "ts" in e]
    return sorted(out)


def split_steps(recs, first_kernel: str):
    """The records cut into steps: a step starts with a kernel whose name contains first_kernel
    (records before the first such kernel and the last, possibly cut, step are dropped)."""
    steps, cur = [], None
    for r in recs:
        if first_kernel in r[2]:
            if cur:
                steps.append(cur)
            cur = []
        if cur is not None:
            cur.append(r)
    return steps


def summarize(steps) -> list[str]:
    """Median table over the steps of the most common kernel sequence."""
    if len(steps) < 2:
        raise SystemExit(f"only {len(steps)} whole steps were recorded; run more --steps")
    seqs = [tuple(r[2] for r in s) for s in steps]
    common = max(set(seqs), key=seqs.count)
    idx = [j for j, q in enumerate(seqs) if q == common]
    same = [steps[j] for j in idx]
    lines = [f"  {len(same)} of {len(steps)} steps with the kernel sequence below (medians, us)",
             f"  {'kernel':44s} {'start':>8s} {'dur':>8s} {'gap to next':>12s} {'end - end before':>17s}"]
    for i, name in enumerate(common):
        start = statistics.median(s[i][0] - s[0][0] for s in same)
        dur = statistics.median(s[i][1] for s in same)
        step_end = statistics.median(s[i][0] + s[i][1] - (s[i - 1][0] + s[i - 1][1] if i else s[0][0]) for s in same)
        if i + 1 < len(common):
            gaps = [s[i + 1][0] - (s[i][0] + s[i][1]) for s in same]
        else:  # to the next step's first kernel
            gaps = [steps[j + 1][0][0] - (steps[j][i][0] + steps[j][i][1]) for j in idx if j + 1 < len(steps)]
        gap = statistics.median(gaps) if gaps else float("nan")
        lines.append(f"  {name[:44]:44s} {start:8.1f} {dur:8.1f} {gap:12.1f} {step_end:17.2f}")
    span = statistics.median(s[-1][0] + s[-1][1] - s[0][0] for s in same)
    periods = [b[0][0] - a[0][0] for a, b in zip(steps, steps[1:])]
    lines.append(f"  step span {span:.1f} us (first kernel's start to last kernel's end), "
                 f"period {statistics.median(periods):.1f} us (start to next start)")
    return lines


def run_case(runner, batch: int, steps: int) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    cache = runner.new_cache(batch)
    rng = np.random.default_rng()
    for _ in range(2):  # warm: graphs captured, kernels compiled
        cache.reset()
        tok = np.stack([runner.prefill(cache, r, rng.integers(0, 50257, 16)) for r in range(batch)]).argmax(-1)
        for _ in runner.greedy_steps(cache, tok, max_steps=steps):
            pass
    cache.reset()
    tok = np.stack([runner.prefill(cache, r, rng.integers(0, 50257, 16)) for r in range(batch)]).argmax(-1)
    runner.stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in runner.greedy_steps(cache, tok, max_steps=steps):
            pass
        runner.stream.synchronize()
    return summarize(split_steps(kernel_records(prof), "embedding")[2:])  # not step 0 (decode_greedy's) nor the ring's first


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--cases", default="fp32:1,bf16:1", help="precision:batch pairs")
    ap.add_argument("--cluster", default="on", choices=["on", "off"],
                    help="batch-1 bf16 steps of gpt2's width in the one decode_cluster kernel (the default) or not")
    a = ap.parse_args()
    w = ModelWeights.random(SIZES[a.size], seed=0)
    runners = {}
    for case in a.cases.split(","):
        prec, b = case.split(":")
        if prec not in runners:
            runners[prec] = make_runner(w, "cuda", prec)
        r = runners[prec]
        r.cluster_decode = a.cluster == "on"
        print(f"== {a.size} {prec} batch {b}, cluster {a.cluster}", flush=True)
        print("\n".join(run_case(r, int(b), a.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

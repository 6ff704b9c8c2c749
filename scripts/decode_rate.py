#!/usr/bin/env python3
"""Quick greedy-decode rate of gpt2block on random weights: python scripts/decode_rate.py [SIZE] [--steps N].

Prints tokens/s per batch size and precision (median of 5 generations, prefill excluded),
with programmatic dependent launch on, off or both (--programmatic), batch-1 bf16
steps of gpt2's width in the decode_cluster kernel or not (--cluster on, off or both), and the
steps run ahead by greedy_steps or waited for one by one (--ahead on, off or both).
The full comparison with transformers is scripts/bench.py.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402


def rate(runner, batch, steps, reps=5, ahead=True):
    """ahead: runner.greedy_steps (the next step queued before the current one is read, as
    generate() runs); else decode_greedy step by step (the host waits for every step)."""
    rng = np.random.default_rng()
    cache = runner.new_cache(batch)
    times = []
    for _ in range(reps + 1):
        cache.reset()
        tok = np.stack([runner.prefill(cache, r, rng.integers(0, 50257, 16)) for r in range(batch)]).argmax(-1)
        t0 = time.perf_counter()
        if ahead:
            for _ in runner.greedy_steps(cache, tok, max_steps=steps):
                pass
        else:
            for _ in range(steps):
                tok = runner.decode_greedy(cache, tok)
        times.append(time.perf_counter() - t0)
    return batch * steps / float(np.median(times[1:]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--programmatic", default="on", choices=["on", "off", "both"],
                    help="programmatic dependent launch of the decode kernels (both: A/B in one run)")
    ap.add_argument("--cluster", default="on", choices=["on", "off", "both"],
                    help="batch-1 steps in the decode_cluster kernel where it runs (bf16, gpt2's width; on: the "
                         "runner's default; off: as the other sizes run)")
    ap.add_argument("--ahead", default="on", choices=["on", "off", "both"],
                    help="greedy_steps, one step queued ahead (on, as generate runs), or decode_greedy "
                         "step by step (off)")
    a = ap.parse_args()
    w = ModelWeights.random(SIZES[a.size], seed=0)
    modes = {"on": [True], "off": [False], "both": [True, False]}
    for prec in a.precisions.split(","):
        runner = make_runner(w, "cuda", prec)
        for b in map(int, a.batches.split(",")):
            for cluster in modes[a.cluster]:
                for pdl in modes[a.programmatic]:
                    for ahead in modes[a.ahead]:
                        runner.programmatic, runner.cluster_decode = pdl, cluster
                        print(f"{a.size} {prec} batch {b} cluster {'on ' if cluster else 'off'} "
                              f"(runs: {'yes' if runner._path(b).blocks == 'cluster' else 'no '}) programmatic "
                              f"{'on ' if pdl else 'off'} ahead {'on ' if ahead else 'off'}: "
                              f"{rate(runner, b, a.steps, ahead=ahead):,.0f} tok/s", flush=True)

#!/usr/bin/env python3
"""The GPU's timeline of one solve() call: when each kernel starts and ends, on both streams.

    python dev/timeline_solve.py [--seq 1024] [--calls 20] [--precisions fp32,tf32]

The challenge's random block (as bench.py makes it); after warm-up (eager call, capture, replays),
times `--calls` calls under torch.profiler, each alone (synchronized, then a 2 ms pause), and prints
per precision the median over the calls of each kernel's start relative to the call's first kernel,
its duration and the gap to the next kernel in start order (negative where kernels overlap: the
weight planes run on a second stream; the last kernel's gap runs to the next call, after the pause),
then the call's span from its first kernel's start to its last kernel's end.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpt2block  # noqa: E402
from gpt2block.bench import _challenge_weights  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402
from timeline_decode import kernel_records, summarize  # noqa: E402


def calls_of(recs, pause_us: float = 500.0):
    """The records cut into calls at gaps longer than pause_us."""
    calls, cur, end = [], [], None
    for r in recs:
        if cur and r[0] - end > pause_us:
            calls.append(cur)
            cur = []
        cur.append(r)
        end = r[0] + r[1] if end is None else max(end, r[0] + r[1])
    if cur:
        calls.append(cur)
    return calls


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--precisions", default="fp32,tf32")
    a = ap.parse_args()
    if a.calls < 2:
        ap.error("--calls must be at least 2 (medians over calls)")
    gen = torch.Generator(device="cuda").manual_seed(a.seq)
    x = torch.rand(a.seq, 768, device="cuda", generator=gen) * 2 - 1
    w = _challenge_weights(torch, block_layout(768), gen)
    out = torch.empty_like(x)
    for prec in a.precisions.split(","):
        for _ in range(4):
            gpt2block.solve(x, out, w, a.seq, precision=prec)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.calls):
                gpt2block.solve(x, out, w, a.seq, precision=prec)
                torch.cuda.synchronize()
                time.sleep(0.002)
        print(f"== solve seq_len {a.seq}, {prec}", flush=True)
        lines = summarize(calls_of(kernel_records(prof)))
        lines[-1] = lines[-1].split(", period")[0].replace("step span", "call span")  # (the period is the pause's)
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

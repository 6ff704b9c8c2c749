#!/usr/bin/env python3
"""Run the gpt2block benchmark on a GPU: python scripts/bench.py [--out DIR] [--reps N] [--quick].

Writes DIR/bench.json, DIR/bench.md and DIR/bench.png and prints the Markdown table.
The same runs as `gpt2block bench`.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.bench import SECTIONS, run_bench  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and steps")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    a = ap.parse_args()
    if a.reps < 20 and not a.quick:
        ap.error("--reps must be at least 20 (medians of at least 20 runs)")
    r, rows = run_bench(a.out, a.reps, a.quick, tuple(a.sections.split(",")),
                        log=lambda m: print(m, file=sys.stderr, flush=True))
    print((Path(a.out) / "bench.md").read_text())

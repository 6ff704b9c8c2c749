#!/usr/bin/env python3
"""A/B of where solve() makes its weight planes, and of the planes kernel's block width, in one process.

    python dev/tune_solve_planes.py [--seq 1024] [--rounds 2] [--reps 50]
        [--schedules start,side_first,main_first] [--planes-n 64]

For each round, schedule (cuda.SOLVE_PLANES_SCHEDULE) and width (cuda/build.py's GW_PLANES_N): the solve
graphs are dropped (so the call is captured anew), then solve() at seq_len in fp32 and tf32 is
timed as bench.bench_solve times it (median ms between CUDA events, `--reps` calls after warm-up),
on the challenge's random block; the torch peers (fp32 reference block, TF32 + SDPA) are timed once
per round. The output, of the eager call and of the last replay, is checked against the first
variant's (bit-equal: only the order of independent work moves; DIFFERS marks a mismatch).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpt2block  # noqa: E402
from gpt2block import bench  # noqa: E402
from gpt2block.backends.cuda import solve as cuda  # noqa: E402
from gpt2block.backends.cuda import build  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--schedules", default="start,side_first,main_first")
    ap.add_argument("--planes-n", default="64")
    a = ap.parse_args()
    for sched in a.schedules.split(","):
        if sched not in cuda.SOLVE_PLANES_SCHEDULES:
            ap.error(f"--schedules: {sched!r} is not one of {', '.join(cuda.SOLVE_PLANES_SCHEDULES)}")
    gen = torch.Generator(device="cuda").manual_seed(a.seq)
    x = torch.rand(a.seq, 768, device="cuda", generator=gen) * 2 - 1
    w = bench._challenge_weights(torch, block_layout(768), gen)
    out = torch.full_like(x, float("nan"))
    fns = bench._torch_block_fns(torch)
    first = {}
    for r in range(a.rounds):
        torch.backends.cuda.matmul.allow_tf32 = False
        t32 = bench._torch_median(torch, lambda: fns["ref"](x, w), a.reps)
        torch.backends.cuda.matmul.allow_tf32 = True
        ttf = bench._torch_median(torch, lambda: fns["sdpa"](x, w), a.reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"round {r + 1}: torch fp32 {t32:.4f} ms, TF32 + SDPA {ttf:.4f} ms", flush=True)
        for sched in a.schedules.split(","):
            for pn in map(int, a.planes_n.split(",")):
                cuda.SOLVE_PLANES_SCHEDULE, build.GW_PLANES_N = sched, pn
                cuda._solve_graphs.clear()
                line = f"  {sched:11s} planes_n {pn:3d}:"
                for prec, peer in (("fp32", t32), ("tf32", ttf)):
                    out.fill_(float("nan"))
                    gpt2block.solve(x, out, w, a.seq, precision=prec)
                    torch.cuda.synchronize()
                    ref = first.setdefault(prec, out.clone())
                    same = bool(torch.equal(out, ref))
                    ms = bench._torch_median(torch, lambda p=prec: gpt2block.solve(x, out, w, a.seq, precision=p),
                                             a.reps)
                    torch.cuda.synchronize()
                    same = same and bool(torch.equal(out, ref))  # the captured graph's replays too
                    line += f"  {prec} {ms:.4f} ms ({ms / peer:.3f}x){'' if same else ' DIFFERS'}"
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

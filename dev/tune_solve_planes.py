#!/usr/bin/env python3
"""A/B of where solve() makes its weight planes, and of the planes kernel's block width, in one process.

    python dev/tune_solve_planes.py [--seq 1024] [--rounds 2] [--reps 50]
        [--schedules 1,2,3] [--planes-n 64]

Schedules (numbered variants of backends/cuda/solve._queue_block, installed in its place for the run):
  1 start       (version 17) all four matrices' planes on the side stream at the call's start; the
                LayerNorm, which does not need them, started only as the last began (25 us in)
  2 main_first  W_qkv's planes on the main stream before the LayerNorm, the other three on the side
                stream once the QKV GEMM is queued
  3 side_first  the product's: W_qkv's on the side stream at the start, beside the first LayerNorm, the
                other three once the QKV GEMM is queued, beside attention. Measured fastest
                (docs/PERFORMANCE.md, version 18): in a graph the root queued second starts 12-19 us after
                the first in a lone call (dev/timeline_solve.py); back to back it costs nothing.
For each round, schedule and width (cuda/build.py's GW_PLANES_N): solve()'s cache is cleared (so the
call is captured anew), then solve() at seq_len in fp32 and tf32 is timed as bench.bench_solve times
it (median ms between CUDA events, `--reps` calls after warm-up), on the challenge's random block; the
torch peers (fp32 reference block, TF32 + SDPA) are timed once per round. The output, of the eager
call and of the last replay, is checked against the first variant's (bit-equal: only the order of
independent work moves; DIFFERS marks a mismatch).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy as cp  # noqa: E402

import gpt2block  # noqa: E402
from gpt2block import bench  # noqa: E402
from gpt2block.backends.cuda import attention, build, linear  # noqa: E402
from gpt2block.backends.cuda import solve as cuda  # noqa: E402
from gpt2block.backends.cuda.runner import MATRICES, run_block  # noqa: E402
from gpt2block.config import HEAD_DIM  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402


def _schedule(name: str):
    """A stand-in for cuda._queue_block (same arguments) making the planes as schedule ``name`` does."""
    if name == "side_first":
        return cuda._queue_block

    def queue(st, w, xa, out, ws, seq_len, d, gemm_variant, attn_variant, planes):
        n_head = d // HEAD_DIM

        def attend(qkv, att):
            attention.attention_prefill(
                qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], att, n_head=n_head, s_q=seq_len, s_kv=seq_len,
                causal=False, q_start=0, q_stride=3 * d, kv_stride=3 * d, variant=attn_variant)

        side_last = []

        def make_planes(names, fork):  # on the side stream after `fork`, or on this stream (fork None)
            if fork is not None:
                fork.record()
                st.side.wait_event(fork)
            with st.side if fork is not None else cp.cuda.get_current_stream():
                for n in names:
                    linear.prepare_planes(w[n], gemm_variant, out=planes[n])
                    st.planes_ready[n].record()
            if fork is not None:
                side_last[:] = [st.planes_ready[names[-1]]]

        ready, after_qkv = None, None
        if planes is not None:
            if name == "start":
                make_planes(MATRICES, st.fork)
            else:  # main_first
                make_planes(MATRICES[:1], None)
                after_qkv = lambda qkv: make_planes(MATRICES[1:], st.fork2)  # noqa: E731
            ready = st.planes_ready
        try:
            run_block(w, xa, ws, seq_len, eps=1e-5, gemm_variant=gemm_variant, attend=attend, out=out,
                      planes=planes, planes_ready=ready, after_qkv=after_qkv)
        finally:
            if side_last:
                cp.cuda.get_current_stream().wait_event(side_last[0])

    return queue


SCHEDULES = {"1": "start", "2": "main_first", "3": "side_first"}


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--schedules", default="1,3,2", help="numbers of SCHEDULES, comma-separated")
    ap.add_argument("--planes-n", default="64")
    a = ap.parse_args()
    for num in a.schedules.split(","):
        if num not in SCHEDULES:
            ap.error(f"--schedules: {num!r} is not one of {', '.join(SCHEDULES)}")
    gen = torch.Generator(device="cuda").manual_seed(a.seq)
    x = torch.rand(a.seq, 768, device="cuda", generator=gen) * 2 - 1
    w = bench._challenge_weights(torch, block_layout(768), gen)
    out = torch.full_like(x, float("nan"))
    fns = bench._torch_block_fns(torch)
    first = {}
    schedules = {num: _schedule(name) for num, name in SCHEDULES.items()}
    product, planes_n = cuda._queue_block, build.GW_PLANES_N
    try:
        run_rounds(a, torch, x, w, out, fns, first, schedules)
    finally:
        cuda._queue_block, build.GW_PLANES_N = product, planes_n
        torch.cuda.synchronize()
        cuda.clear_solve_cache()
    return 0


def run_rounds(a, torch, x, w, out, fns, first, schedules) -> None:
    for r in range(a.rounds):
        torch.backends.cuda.matmul.allow_tf32 = False
        t32 = bench._torch_median(torch, lambda: fns["ref"](x, w), a.reps)
        torch.backends.cuda.matmul.allow_tf32 = True
        ttf = bench._torch_median(torch, lambda: fns["sdpa"](x, w), a.reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"round {r + 1}: torch fp32 {t32:.4f} ms, TF32 + SDPA {ttf:.4f} ms", flush=True)
        for num in a.schedules.split(","):
            for pn in map(int, a.planes_n.split(",")):
                cuda._queue_block, build.GW_PLANES_N = schedules[num], pn
                torch.cuda.synchronize()
                cuda.clear_solve_cache()
                line = f"  {num} {SCHEDULES[num]:11s} planes_n {pn:3d}:"
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


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where solve() and prefill time goes: kernel time per call, per kernel, from the CUDA profiler.

    python dev/profile_prefill.py [--seq 1024] [--calls 10] [--host 30]

solve() at seq_len (fp32 and tf32, the challenge's random block; a graph replay after two calls)
and gpt2 forward_device (random weights, fp32) under torch.profiler (CUPTI sees CuPy's kernels,
graph replays included). Prints, per case, the kernels by device time per call, their sum, and
the wall time per call (host included) for comparison.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpt2block  # noqa: E402
from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from profile_decode import kernel_table  # noqa: E402


def profile(fn, calls: int) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / calls * 1e6
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = kernel_table(prof, calls)
    out.append(out.pop()[:-1] + " per call in all")
    out.append(f"  {wall:8.1f} us  wall time per call (host included, back to back)")
    return out


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--host", type=int, default=0, metavar="N",
                    help="also print the N Python functions with the most host time in forward_device (cProfile)")
    a = ap.parse_args()
    s = a.seq
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(s, 768, device="cuda", generator=gen) * 2 - 1
    w = torch.randn(block_layout(768).numel, device="cuda", generator=gen) * 0.02
    out = torch.empty_like(x)
    for prec in ("fp32", "tf32"):
        print(f"== solve seq_len {s}, {prec}", flush=True)
        print("\n".join(profile(lambda p=prec: gpt2block.solve(x, out, w, s, precision=p), a.calls)), flush=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):  # the host's own time per call: the GPU queue absorbs the 50 graph launches
            gpt2block.solve(x, out, w, s, precision=prec)
        host = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        print(f"  {host:8.1f} us  host time per call (solve() returns before the GPU is done)", flush=True)
    runner = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "fp32")
    ids = np.random.default_rng(0).integers(0, 50257, s)
    print(f"== gpt2 forward_device, {s} tokens, fp32", flush=True)
    print("\n".join(profile(lambda: runner.forward_device(ids), a.calls)), flush=True)
    if a.host:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            runner.forward_device(ids)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(a.host)
        print(f"== host time of forward_device ({a.calls} calls), by own time", flush=True)
        print(buf.getvalue(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

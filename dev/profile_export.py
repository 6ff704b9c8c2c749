#!/usr/bin/env python3
"""Where the exported solve()'s time goes: each kernel's time per call at one seq_len, per build.

    python dev/profile_export.py [--precisions fp32,tf32] [--archs sm_90,sm_90a] [--seq-len 1024]
                                 [--builds DIR] [--calls 20] [--libs A.so,B.so]

Exports solution.cu for each precision, builds it for each arch as a participant would (a build made before
in --builds is reused: gpt2block.export.build_shared), loads it with ctypes (scripts/check_export.py's
Solution), and runs `--calls` back-to-back calls at --seq-len on the challenge's data under torch.profiler
(CUPTI sees the library's kernels). Prints, per build, each kernel's launches per call and microseconds per
call, largest first, and the sum next to the wall time per call (CUDA events, outside the profiler).
--libs profiles libraries built before (from any version of the file) instead, labelled by file name.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))

from check_export import Solution, challenge_data, time_ms  # noqa: E402

from gpt2block.export import build_shared, export_cuda  # noqa: E402


def short(name: str, width: int = 70) -> str:
    """A kernel's demangled name without its namespace and argument list."""
    name = name.replace("gpt2block_solve::", "")
    cut = name.find("(")
    name = name[:cut] if cut > 0 else name
    return name if len(name) <= width else name[: width - 3] + "..."


def profile(torch, sol, seq_len: int, calls: int) -> tuple[list[tuple[str, float, float]], float]:
    x, w = challenge_data(torch, seq_len, seed=7)
    out = torch.empty_like(x)
    wall = time_ms(torch, lambda: sol(x, out, w, seq_len), per_batch=calls)
    from torch.profiler import ProfilerActivity, profile as tprofile

    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            sol(x, out, w, seq_len)
        torch.cuda.synchronize()
    us = defaultdict(float)
    n = defaultdict(int)
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.name.startswith(("Memcpy", "Memset")):
            continue
        us[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        n[ev.name] += 1
    rows = sorted(((short(k), n[k] / calls, us[k] / calls) for k in us), key=lambda r: -r[2])
    return rows, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precisions", default="fp32,tf32")
    ap.add_argument("--archs", default="sm_90,sm_90a")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--builds", default=str(Path.home() / ".cache" / "gpt2block" / "export"))
    ap.add_argument("--libs", default="")
    a = ap.parse_args()
    import torch

    if a.libs:
        jobs = [(Path(lib).name, Path(lib)) for lib in a.libs.split(",")]
    else:
        folder = Path(a.builds)
        folder.mkdir(parents=True, exist_ok=True)
        jobs = []
        for p in a.precisions.split(","):
            src = export_cuda(folder / f"solution-{p}.cu", precision=p)
            jobs += [(f"{p} {arch}", build_shared(src, arch, folder)) for arch in a.archs.split(",")]
    for label, lib in jobs:
        rows, wall = profile(torch, Solution(lib), a.seq_len, a.calls)
        total = sum(r[2] for r in rows)
        print(f"\n{label} seq_len {a.seq_len}: {wall * 1e3:.1f} us a call (events), kernels {total:.1f} us")
        print("| kernel | launches a call | us a call | share |")
        print("| --- | --- | --- | --- |")
        for name, k, t in rows:
            print(f"| {name} | {k:.0f} | {t:.1f} | {t / max(total, 1e-9):.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

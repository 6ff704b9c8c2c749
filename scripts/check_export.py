#!/usr/bin/env python3
"""Check the one-file export (gpt2block export-cuda) the LeetGPU challenge's way, on this GPU.

    python scripts/check_export.py [--precisions fp32,tf32] [--archs sm_90,sm_90a,compute_75,compute_80]
                                   [--builds DIR] [--reps N] [--json FILE]

For each precision it writes solution.cu, builds it with nvcc for each arch as a participant would
(gpt2block.export.NVCC_FLAGS and -arch=sm_XX; compute_XX: PTX alone, which the driver JIT-compiles for this
GPU, so an H200 runs every code path of the file), loads the library with ctypes and calls
solve(x, output, weights, seq_len) on torch-allocated buffers, as the challenge's harness does:

- the functional cases in the challenge's order in one process (seq_len 1, 4 with x = 0, 2, 4, 16, 64, 30, 100,
  128, 256), the example (4) and the performance case (1024): x uniform in [-1, 1], LayerNorm gains in
  [0.8, 1.2] and biases in [-0.1, 0.1], matrices N(0, 0.02), linear biases zero; each must pass
  allclose(atol = rtol = 1e-3) against the torch float32 reference block (TF32 off), and its error against
  float64 is reported as a multiple of the torch float32 block's own;
- the time at seq_len 1024 (median over batches of back-to-back calls, CUDA events) against the torch
  float32 reference block and the same with TF32 on, and gpt2block.solve() (CuPy), in the same process.

Prints one table row per build; exit status 1 if any case failed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "gpu"))

from gpt2block.export import PRECISIONS, build_shared, export_cuda  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402

FUNCTIONAL = (1, 4, 2, 4, 16, 64, 30, 100, 128, 256)  # the challenge's order; the second (4) has x = 0
ZERO_CASE = 1  # index of the all-zeros x
EXAMPLE = 4
PERF = 1024
ATOL = RTOL = 1e-3
D = 768
DEFAULT_ARCHS = ("sm_90", "sm_90a", "compute_75", "compute_80")


def challenge_data(torch, seq_len: int, seed: int, zero_x: bool = False, biases: bool = False,
                   outliers: bool = False):
    """(x, weights) on the GPU as the challenge draws them (module docstring); ``biases``: linear biases
    N(0, 0.02) too; ``outliers``: four columns of x in the thousands (the trained GPT-2's residual stream)."""
    gen = torch.Generator().manual_seed(seed)
    lay = block_layout(D)
    flat = torch.zeros(lay.numel, dtype=torch.float32)
    for slot in lay.slots:
        view = flat[slot.offset:slot.end]
        if slot.name in ("ln1_g", "ln2_g"):
            view.uniform_(0.8, 1.2, generator=gen)
        elif slot.name in ("ln1_b", "ln2_b"):
            view.uniform_(-0.1, 0.1, generator=gen)
        elif len(slot.shape) == 2:
            view.normal_(0.0, 0.02, generator=gen)
        elif biases:
            view.normal_(0.0, 0.02, generator=gen)
    x = torch.zeros(seq_len, D) if zero_x else torch.rand(seq_len, D, generator=gen) * 2 - 1
    if outliers:
        x[:, [7, 138, 447, 700]] *= 3000.0
    return x.cuda(), flat.cuda()


class Solution:
    """One built library, its solve() through ctypes."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.solve.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.lib.solve.restype = None

    def __call__(self, x, out, w, seq_len: int) -> None:
        self.lib.solve(x.data_ptr(), out.data_ptr(), w.data_ptr(), seq_len)


def check_case(torch, sol, x, w, seq_len: int) -> dict:
    """Run one case (output poisoned with NaN first); its pass / fail and errors."""
    from torch_ref import torch_block

    out = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    sol(x, out, w, seq_len)
    torch.cuda.synchronize()
    ref32 = torch_block(x, w)
    ref64 = torch_block(x.double(), w.double())
    ours = (out.double() - ref64).abs().max().item()
    peer = (ref32.double() - ref64).abs().max().item()
    passed = bool(torch.isfinite(out).all().item()) and torch.allclose(out, ref32, atol=ATOL, rtol=RTOL)
    return {"seq_len": seq_len, "passed": passed, "err_vs_ref32": (out - ref32).abs().max().item(),
            "err_vs_f64": ours, "torch_err_vs_f64": peer}


def time_ms(torch, fn, batches: int = 7, per_batch: int = 20) -> float:
    """Median over batches of the mean time of back-to-back calls, in ms (CUDA events)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    got = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per_batch):
            fn()
        b.record()
        b.synchronize()
        got.append(a.elapsed_time(b) / per_batch)
    return statistics.median(got)


def run_build(torch, sol, precision: str, arch: str, reps: int) -> dict:
    cases = []
    for i, s in enumerate(FUNCTIONAL + (EXAMPLE, PERF)):
        x, w = challenge_data(torch, s, seed=100 + i, zero_x=(i == ZERO_CASE))
        cases.append(check_case(torch, sol, x, w, s))
    x, w = challenge_data(torch, PERF, seed=7)
    out = torch.empty_like(x)
    ms = time_ms(torch, lambda: sol(x, out, w, PERF), per_batch=reps)
    worst = max(c["err_vs_ref32"] for c in cases)
    ratio = max(c["err_vs_f64"] / max(c["torch_err_vs_f64"], 1e-30) for c in cases if c["torch_err_vs_f64"] > 0)
    return {"precision": precision, "arch": arch, "library": sol.path.name, "cases": cases,
            "passed": sum(c["passed"] for c in cases), "n_cases": len(cases), "worst_err_vs_ref32": worst,
            "worst_err_ratio_vs_torch_fp32": ratio, "ms_1024": ms}


def reference_times(torch, reps: int) -> dict:
    from torch_ref import torch_block

    x, w = challenge_data(torch, PERF, seed=7)
    got = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    got["torch fp32"] = time_ms(torch, lambda: torch_block(x, w), per_batch=reps)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    got["torch tf32"] = time_ms(torch, lambda: torch_block(x, w), per_batch=reps)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        import gpt2block

        out = torch.empty_like(x)
        for p in PRECISIONS:
            got[f"gpt2block.solve {p}"] = time_ms(torch, lambda p=p: gpt2block.solve(x, out, w, PERF, precision=p),
                                                  per_batch=reps)
    except Exception as e:  # no CuPy here: the row is left out, and said so
        print(f"gpt2block.solve() not timed: {type(e).__name__}: {e}", file=sys.stderr)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--archs", default=",".join(DEFAULT_ARCHS))
    ap.add_argument("--builds", default=str(Path.home() / ".cache" / "gpt2block" / "export"),
                    help="folder of the exported files and libraries (a build made before is reused)")
    ap.add_argument("--reps", type=int, default=20, help="back-to-back calls per timed batch")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--build-only", action="store_true", help="export and build, run nothing (no GPU needed)")
    a = ap.parse_args()
    precisions, archs = a.precisions.split(","), a.archs.split(",")
    folder = Path(a.builds)
    folder.mkdir(parents=True, exist_ok=True)
    jobs = []
    for p in precisions:
        src = export_cuda(folder / f"solution-{p}.cu", p)
        jobs += [(p, arch, src) for arch in archs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        libs = list(pool.map(lambda j: build_shared(j[2], j[1], folder), jobs))
    for (p, arch, _), lib in zip(jobs, libs):
        print(f"built {p} {arch}: {lib}", file=sys.stderr, flush=True)
    if a.build_only:
        return 0

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    refs = reference_times(torch, a.reps)
    rows = []
    for (p, arch, _), lib in zip(jobs, libs):
        print(f"running {p} {arch} ...", file=sys.stderr, flush=True)
        rows.append(run_build(torch, Solution(lib), p, arch, a.reps))
    name = torch.cuda.get_device_name()
    print(f"\n{name}, seq_len {PERF}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in refs.items()))
    print("| precision | build | cases passed | worst abs err vs torch fp32 | err vs f64 / torch fp32's (worst) "
          "| ms at 1024 | / torch fp32 | / torch tf32 | / gpt2block.solve same precision |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        own = refs.get(f"gpt2block.solve {r['precision']}")
        vs_own = "" if own is None else f"{r['ms_1024'] / own:.3f}"
        print(f"| {r['precision']} | {r['arch']} | {r['passed']}/{r['n_cases']} | {r['worst_err_vs_ref32']:.2e} "
              f"| {r['worst_err_ratio_vs_torch_fp32']:.2f} | {r['ms_1024']:.3f} "
              f"| {r['ms_1024'] / refs['torch fp32']:.3f} | {r['ms_1024'] / refs['torch tf32']:.3f} | {vs_own} |")
    for r in rows:
        for c in r["cases"]:
            if not c["passed"]:
                print(f"FAILED {r['precision']} {r['arch']} seq_len {c['seq_len']}: max |err| {c['err_vs_ref32']:.3g}")
    if a.json:
        Path(a.json).write_text(json.dumps({"device": name, "references_ms": refs, "builds": rows}, indent=1))
    return 0 if all(r["passed"] == r["n_cases"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

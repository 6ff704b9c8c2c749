#!/usr/bin/env python3
"""The mma.sync GEMM (the export's path on sm_80 and later, sm_90a included) on the block's four
products at seq_len M: each kernel variant x tile x precision, its error and TFLOP/s, next to torch.

    python dev/tune_gemm_mma.py [--m 1024] [--variants 01,03] [--precisions tf32x3,tf32] [--quick]

Variants:
  01  kernels/gemm_mma.cuh, the general body (gemm.cu built with the tile's defines)
  03  kernels/gemm_mma_f16.cuh: fp16 tensor cores on fp16 planes of A and B (made before the timing, by the
      file's gemm_f16_planes; not timed), tf32x3 meaning its fp32 mode (two planes, three products), tf32 its
      one-plane mode
Dropped (in git): 02, kernels/gemm_mma_vec.cuh (TF32 mma.sync, k and n permuted for 16-byte LDS, at commit
6a87239; the four products 383 us in tf32x3 and 177 in tf32 against 03's 183 and 92 in the same run);
dev/gemm_mma/03_direct_acc.cuh (at commit 002c0ba: 02 with tf32x3's products accumulated straight in the
tensor core, 10.6-41.8x torch fp32's error); 04, 03 with the lo products of each k16 step summed from zero
and added by an FFMA (no second accumulator, so that a 64 x 64 warp tile fits): 221 us against 183, the
64 x 64 warp tiles slowest.
Results: docs/PERFORMANCE.md, version 41.
Each product C = A @ B + bias (A [M, K] uniform in [-1, 1], B [K, N] N(0, 0.02), bias N(0, 0.02)) is checked
against float64: tf32x3 as a multiple of torch fp32's own error, tf32 as the max abs error. Times: median
of 5 batches of 20 back-to-back launches (CUDA events). The last table: per product the best tile of each
variant and precision, and the block's four products summed, next to torch fp32 and TF32.
Needs CuPy, torch with CUDA, a GPU of sm_80 or later (NVRTC compiles for the device's own arch, so an
H200 runs the plain sm_90 code, the export's `-arch=sm_90` path).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {"qkv": (2304, 768), "attn_proj": (768, 768), "fc": (3072, 768), "mlp_proj": (768, 3072)}  # N, K

# (BM, BN, WARPS_M, WARPS_N, STAGES)
TILES = {
    "01": [(128, 128, 2, 4, 3), (128, 64, 4, 2, 3), (64, 64, 2, 2, 3)],
    "03": [(128, 128, 2, 4, 3), (128, 128, 2, 4, 4), (128, 64, 2, 2, 4), (64, 128, 1, 4, 4), (64, 128, 2, 2, 4),
           (128, 192, 2, 4, 3), (64, 64, 1, 2, 4), (128, 128, 2, 2, 3), (256, 128, 4, 2, 3), (128, 256, 2, 4, 3),
           (64, 128, 2, 4, 4), (64, 128, 2, 4, 3), (64, 64, 2, 2, 4), (128, 128, 4, 4, 3), (128, 64, 4, 2, 4)],
}
QUICK = {"01": TILES["01"][:1], "03": TILES["03"][:3]}


def source(variant: str, tile: tuple) -> tuple[str, tuple, int, str]:
    """(code, NVRTC options, dynamic shared bytes, kernel name prefix) of one variant and tile."""
    from gpt2block.kernel_source import read_source

    bm, bn, wm, wn, stages = tile
    if variant == "01":
        head = "".join(f"#define {k} {v}\n" for k, v in (("GEMM_BM", bm), ("GEMM_BN", bn), ("GEMM_WARPS_M", wm),
                                                         ("GEMM_WARPS_N", wn), ("GEMM_BK", 32), ("GEMM_STAGES", stages),
                                                         ("GEMM_WITH_TF32", 1), ("GEMM_WITH_TF32X3", 1)))
        lds = 36
        ldn = bn + 8
        smem = stages * (bm * lds + max(32 * ldn, bn * lds)) * 4
        return head + read_source("gemm.cu"), ("--std=c++17",), smem, "gemm"
    if variant == "03":
        code = "#define GEMM_WITH_TF32 1\n#define GEMM_WITH_TF32X3 1\n" + read_source("gemm_mma_f16.cuh")
        body = "gemm_f16_body"
        params = ("const unsigned short* Ah, const unsigned short* Al, const unsigned short* Wh, "
                  "const unsigned short* Wl, const float* sa, const float* sw, const float* bias, float* C, "
                  "int M, int N, int K")
        for prec, planes in (("tf32x3", 2), ("tf32", 1)):
            code += (f"typedef GemmF16Tile<{bm}, {bn}, {wm}, {wn}, {stages}, {planes}> T{planes};\n"
                     f'extern "C" __global__ void __launch_bounds__(T{planes}::THREADS) h_{prec}_bias({params}) '
                     f"{{ {body}<T{planes}>(Ah, Al, Wh, Wl, sa, sw, bias, nullptr, C, nullptr, nullptr, "
                     "nullptr, M, N, K, GEMM_EPI_BIAS, 0, 1, nullptr); }\n")
        code += ('extern "C" __global__ void h_planes(const float* X, int ld, unsigned short* hi, unsigned short* lo, '
                 "long long rows, int cols, const float* s, int planes) "
                 "{ gemm_f16_planes(X, ld, hi, lo, rows, cols, *s, planes); }\n")
        smem = {prec: stages * planes * (bm * 32 + 32 * bn) * 2 for prec, planes in (("tf32x3", 2), ("tf32", 1))}
        return code, ("--std=c++17",), smem, "h"
    raise ValueError(f"unknown variant {variant!r}")


def time_us(cp, fn) -> float:
    for _ in range(3):
        fn()
    got = []
    for _ in range(5):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(20):
            fn()
        b.record()
        b.synchronize()
        got.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / 20)
    return statistics.median(got)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--variants", default="01,03")
    ap.add_argument("--precisions", default="tf32x3,tf32")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    import cupy as cp
    import torch

    M = a.m
    data = {}
    torch_us = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (N, K) in SHAPES.items():
        A = torch.rand(M, K, device="cuda", generator=gen) * 2 - 1
        B = torch.randn(K, N, device="cuda", generator=gen) * 0.02
        bias = torch.randn(N, device="cuda", generator=gen) * 0.02
        ref = (A.double() @ B.double() + bias.double())
        torch.backends.cuda.matmul.allow_tf32 = False
        t32 = A @ B + bias
        peer = (t32.double() - ref).abs().max().item()
        ev = lambda: torch.addmm(bias, A, B)  # noqa: E731
        torch_us[(name, "fp32")] = time_us(cp, ev)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch_us[(name, "tf32")] = time_us(cp, ev)
        torch.backends.cuda.matmul.allow_tf32 = False
        data[name] = (A, B, bias, ref, peer)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(f"M = {M}, {sms} SMs; torch fp32 / TF32 us: "
          + ", ".join(f"{n} {torch_us[(n, 'fp32')]:.1f} / {torch_us[(n, 'tf32')]:.1f}" for n in SHAPES))
    print("| variant | tile BMxBN/warps/stages | precision | product | blocks | us | TFLOP/s | error |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    best = {}
    failed = 0
    planes_of = {}  # (product, planes) -> (Ah, Al, Wh, Wl, scales): variant 03's operands

    def make_planes(mod, name, planes):
        import math

        if (name, planes) not in planes_of:
            A, B = data[name][0], data[name][1]
            f = mod.get_function("h_planes")
            out = []
            scales = []
            for X in (A, B):
                amax = X.abs().max().item()
                scales.append(2.0 ** (14 - math.ceil(math.log2(amax))) if amax > 0 else 1.0)
                out += [torch.zeros(X.shape, dtype=torch.int16, device="cuda") for _ in range(2)]
            sc = torch.tensor(scales, dtype=torch.float32, device="cuda")
            for X, hi, lo, i in ((A, out[0], out[1], 0), (B, out[2], out[3], 1)):
                f((1024,), (256,), (cp.uint64(X.data_ptr()), cp.int32(X.shape[1]), cp.uint64(hi.data_ptr()),
                                    cp.uint64(lo.data_ptr()), cp.int64(X.shape[0]), cp.int32(X.shape[1]),
                                    cp.uint64(sc.data_ptr() + 4 * i), cp.int32(planes)))
            planes_of[(name, planes)] = (*out, sc)
        return planes_of[(name, planes)]
    jobs = [(v, tile) for v in a.variants.split(",") for tile in (QUICK if a.quick else TILES)[v]]

    def build(job):
        code, opts, smem, prefix = source(*job)
        try:
            mod = cp.RawModule(code=code, options=opts)
            mod.compile()
            return mod, smem, prefix, None
        except Exception as e:  # a tile this variant cannot build: said, and the next one
            return None, smem, prefix, str(e).splitlines()[0][:80]

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(build, jobs))
    for (variant, tile), (mod, smem, prefix, why) in zip(jobs, built):
        if True:
            label = f"{tile[0]}x{tile[1]}/{tile[2] * tile[3]}w/{tile[4]}s"
            if mod is None:
                print(f"| {variant} | {label} | - | - | - | - | - | compile failed: {why} |")
                failed += 1
                continue
            for prec in a.precisions.split(","):
                k = mod.get_function(f"{prefix}_{prec}_bias")
                shm = smem[prec] if isinstance(smem, dict) else smem
                k.max_dynamic_shared_size_bytes = shm
                threads = tile[2] * tile[3] * 32
                for name, (N, K) in SHAPES.items():
                    A, B, bias, ref, peer = data[name]
                    C = torch.full((M, N), float("nan"), device="cuda")
                    grid = ((M + tile[0] - 1) // tile[0], (N + tile[1] - 1) // tile[1], 1)
                    if variant == "03":  # one tile a block on a 1-D grid
                        grid = (grid[0] * grid[1], 1, 1)
                    if variant == "03":
                        ah, al, wh, wl, sc = make_planes(mod, name, 2 if prec == "tf32x3" else 1)
                        args = (ah.data_ptr(), al.data_ptr(), wh.data_ptr(), wl.data_ptr(), sc.data_ptr(),
                                sc.data_ptr() + 4, bias.data_ptr(), C.data_ptr(), cp.int32(M), cp.int32(N),
                                cp.int32(K))
                    else:
                        args = (A.data_ptr(), B.data_ptr(), bias.data_ptr(), 0, C.data_ptr(),
                                cp.int32(M), cp.int32(N), cp.int32(K))
                    args = tuple(cp.uint64(x) if isinstance(x, int) else x for x in args)
                    run = lambda: k(grid, (threads,), args, shared_mem=shm)  # noqa: E731
                    run()
                    torch.cuda.synchronize()
                    err = (C.double() - ref).abs().max().item()
                    if prec == "tf32x3":
                        ok = err <= 2 * peer + 5e-7
                        err_s = f"{err / peer:.2f}x torch"
                    else:
                        ok = err <= 1e-3
                        err_s = f"{err:.1e} abs"
                    if not (ok and torch.isfinite(C).all().item()):
                        failed += 1
                        err_s += " FAIL"
                    us = time_us(cp, run)
                    tf = 2 * M * N * K / us / 1e6
                    print(f"| {variant} | {label} | {prec} | {name} | {grid[0] * grid[1]} | {us:.1f} | {tf:.0f} | {err_s} |")
                    key = (variant, prec, name)
                    if ok and (key not in best or us < best[key][0]):
                        best[key] = (us, label)
    print("\nbest tile per product (us), and the four summed")
    print("| variant | precision | " + " | ".join(SHAPES) + " | sum | torch fp32 sum | torch TF32 sum |")
    print("| --- | --- | " + " | ".join("---" for _ in SHAPES) + " | --- | --- | --- |")
    t32 = sum(torch_us[(n, "fp32")] for n in SHAPES)
    ttf = sum(torch_us[(n, "tf32")] for n in SHAPES)
    for variant in a.variants.split(","):
        for prec in a.precisions.split(","):
            cells = [best.get((variant, prec, n)) for n in SHAPES]
            if any(c is None for c in cells):
                continue
            total = sum(c[0] for c in cells)
            print(f"| {variant} | {prec} | " + " | ".join(f"{c[0]:.1f} ({c[1]})" for c in cells)
                  + f" | {total:.1f} | {t32:.1f} | {ttf:.1f} |")
    print(f"\n{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The ceiling of the mma.sync path: how many TFLOP/s do mma.sync m16n8k8 TF32 and m16n8k16 FP16 (fp32
accumulation) reach on this GPU, with operands in registers (no memory traffic), by warps per SM and
independent accumulators per warp.

    python dev/micro_mma_peak.py [--iters 4096]

Each warp runs `iters` rounds of ACC independent mma.sync.m16n8k8.tf32 (2 * 16 * 8 * 8 flops each) or
m16n8k16.f16 (2 * 16 * 8 * 16 flops each); the grid is 4 blocks per SM of W warps. The export's mma.sync GEMM (kernels/gemm_mma.cuh) can reach at most
this rate; its fp32 mode (tf32x3) does three of these per product. Needs CuPy and a GPU of sm_80 or later.
"""

from __future__ import annotations

import argparse
import itertools
import sys

SRC = r"""
template <int ACC, bool F16>
__device__ void run(float* out, int iters) {
    unsigned a[4], b[2];
    float c[ACC][4];
    const unsigned s = threadIdx.x * 2654435761u;
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] = (s >> e) & 0x3f800000u;
    b[0] = a[1]; b[1] = a[2];
#pragma unroll
    for (int i = 0; i < ACC; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[i][e] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < ACC; ++i)
            if (F16)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            else
                asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < ACC; ++i) sum += c[i][0] + c[i][1] + c[i][2] + c[i][3];
    if (sum == 12345.0f) out[threadIdx.x] = sum;  // keeps the loop alive
}
extern "C" __global__ void mma_acc2(float* out, int iters) { run<2, false>(out, iters); }
extern "C" __global__ void mma_acc4(float* out, int iters) { run<4, false>(out, iters); }
extern "C" __global__ void mma_acc8(float* out, int iters) { run<8, false>(out, iters); }
extern "C" __global__ void mma_f16_acc2(float* out, int iters) { run<2, true>(out, iters); }
extern "C" __global__ void mma_f16_acc4(float* out, int iters) { run<4, true>(out, iters); }
extern "C" __global__ void mma_f16_acc8(float* out, int iters) { run<8, true>(out, iters); }
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=4096)
    a = ap.parse_args()
    import cupy as cp

    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    out = cp.zeros(1024, dtype=cp.float32)
    print(f"{cp.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}, {sms} SMs")
    print("| MMA | warps a block (4 blocks an SM) | accumulators a warp | TFLOP/s |")
    print("| --- | --- | --- | --- |")
    kinds = (("m16n8k8 TF32", "mma_acc", 8), ("m16n8k16 FP16", "mma_f16_acc", 16))
    for (kind, prefix, kdepth), acc in itertools.product(kinds, (2, 4, 8)):
        k = mod.get_function(f"{prefix}{acc}")
        for warps in (2, 4, 8):
            grid = 4 * sms
            k((grid,), (32 * warps,), (out, a.iters))
            cp.cuda.Device().synchronize()
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            k((grid,), (32 * warps,), (out, a.iters))
            e.record()
            e.synchronize()
            ms = cp.cuda.get_elapsed_time(s, e)
            flops = grid * warps * a.iters * acc * 2 * 16 * 8 * kdepth
            print(f"| {kind} | {warps} | {acc} | {flops / ms / 1e9:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

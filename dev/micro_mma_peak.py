#!/usr/bin/env python3
"""The ceiling of the mma.sync path: how many TFLOP/s does mma.sync m16n8k8 TF32 reach on this GPU, with
operands in registers (no memory traffic), by warps per SM and independent accumulators per warp.

    python dev/micro_mma_peak.py [--iters 4096]

Each warp runs `iters` rounds of ACC independent mma.sync.m16n8k8.tf32 (2 * 16 * 8 * 8 flops each); the
grid is 4 blocks per SM of W warps. The export's mma.sync GEMM (kernels/gemm_mma.cuh) can reach at most
this rate; its fp32 mode (tf32x3) does three of these per product. Needs CuPy and a GPU of sm_80 or later.
"""

from __future__ import annotations

import argparse
import sys

SRC = r"""
template <int ACC>
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
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                         : "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < ACC; ++i) sum += c[i][0] + c[i][1] + c[i][2] + c[i][3];
    if (sum == 12345.0f) out[threadIdx.x] = sum;  // keeps the loop alive
}
extern "C" __global__ void mma_acc2(float* out, int iters) { run<2>(out, iters); }
extern "C" __global__ void mma_acc4(float* out, int iters) { run<4>(out, iters); }
extern "C" __global__ void mma_acc8(float* out, int iters) { run<8>(out, iters); }
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
    print("| warps a block (4 blocks an SM) | accumulators a warp | TF32 TFLOP/s |")
    print("| --- | --- | --- |")
    for acc in (2, 4, 8):
        k = mod.get_function(f"mma_acc{acc}")
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
            flops = grid * warps * a.iters * acc * 2 * 16 * 8 * 8
            print(f"| {warps} | {acc} | {flops / ms / 1e9:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

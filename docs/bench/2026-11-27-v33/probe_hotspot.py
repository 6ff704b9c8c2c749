"""Version 33: is a decode kernel's read of the row the kernel before wrote slow because every block reads the
same 3 KB (the same 24 L2 lines, 192 blocks at once)? Chains of 60 kernels of 192 x 256 in one CUDA graph,
programmatic launch, 20 replays; us a kernel. Each kernel reads a 768-float row written by the kernel before,
sums it (warp shuffles, one block barrier) and writes its 4 floats into each of C copies of the row; block b
reads copy b % C. C = 1 is version 32's "row" (every block the same lines). The row is read three ways: plain
ld.global (L1), ld.global.cg (L2 only), and cp.async.cg 16 bytes a thread into shared memory then the sum (as
the one-token LayerNorm GEMVs stage x). "+w": 24 KB a block of weights loaded into registers before the wait,
the same 4.7 MB every kernel (L2)."""
import time

import cupy as cp
import numpy as np

from gpt2block.backends import cuda_modules

SRC = r'''
__device__ __forceinline__ void trig() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_prev() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
template <int MODE, bool W>  // MODE 0 ld.global, 1 ld.global.cg, 2 cp.async.cg into shared memory
__device__ __forceinline__ void row(const float* x, float* y, const uint4* w, int n, int C) {
    trig();
    uint4 wv[6];
    if (W) {
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            const uint4* p = w + ((size_t)blockIdx.x * 6 + j) * 256 + threadIdx.x;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(wv[j].x), "=r"(wv[j].y), "=r"(wv[j].z), "=r"(wv[j].w) : "l"(p) : "memory");
        }
    }
    wait_prev();
    const float* xc = x + (size_t)(blockIdx.x % C) * n;
    __shared__ __align__(16) float xs[1024];
    __shared__ float red[8];
    float s = 0.0f;
    if (MODE == 2) {
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(xs + 4 * i)), "l"(xc + 4 * i));
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
            s += (xs[4 * i] + xs[4 * i + 1]) + (xs[4 * i + 2] + xs[4 * i + 3]);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) s += MODE == 1 ? __ldcg(xc + i) : xc[i];
    }
    if (W) {
#pragma unroll
        for (int j = 0; j < 6; ++j) s += __uint_as_float(wv[j].x & 0x3f800000u) * 1e-9f;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    float t = 0.0f;
    for (int q = 0; q < 8; ++q) t += red[q];
    for (int j = threadIdx.x; j < 4 * C; j += blockDim.x) {  // copy j / 4, element j % 4 of the block's 4
        const int i = blockIdx.x * 4 + (j & 3);
        y[(size_t)(j >> 2) * n + i] = t * 1e-4f + xc[i] * 0.5f;
    }
}
extern "C" __global__ void k_ld(const float* x, float* y, const uint4* w, int n, int C) { row<0, false>(x, y, w, n, C); }
extern "C" __global__ void k_cg(const float* x, float* y, const uint4* w, int n, int C) { row<1, false>(x, y, w, n, C); }
extern "C" __global__ void k_cpa(const float* x, float* y, const uint4* w, int n, int C) { row<2, false>(x, y, w, n, C); }
extern "C" __global__ void k_cpa_w(const float* x, float* y, const uint4* w, int n, int C) { row<2, true>(x, y, w, n, C); }
extern "C" __global__ void k_ld_w(const float* x, float* y, const uint4* w, int n, int C) { row<0, true>(x, y, w, n, C); }
'''
mod = cp.RawModule(code=SRC, options=("-std=c++17",))
CMAX = 192
a, b = cp.ones(768 * CMAX, cp.float32), cp.zeros(768 * CMAX, cp.float32)
w = cp.zeros(192 * 6 * 256 * 4, cp.uint32)  # 4.7 MB, the same for every kernel
stream = cp.cuda.Stream(non_blocking=True)
CASES = [(fn, c) for fn in ("k_ld", "k_cg", "k_cpa", "k_ld_w", "k_cpa_w") for c in (1, 4, 16, 192)]
N, R = 60, 20
graphs = {}
for fn, c in CASES:
    k = mod.get_function(fn)
    with stream:
        stream.begin_capture()
        try:
            with cuda_modules.programmatic_launches(True):
                for i in range(N):
                    src, dst = (a, b) if i % 2 == 0 else (b, a)
                    cuda_modules.launch(k, (192,), (256,), (src, dst, w, np.int32(768), np.int32(c)), programmatic=True)
        finally:
            graphs[fn, c] = stream.end_capture()
for rnd in range(3):
    for fn, c in CASES:
        g = graphs[fn, c]
        with stream:
            g.launch(stream)
        stream.synchronize()
        t0 = time.perf_counter()
        with stream:
            for _ in range(R):
                g.launch(stream)
        stream.synchronize()
        dt = (time.perf_counter() - t0) / (R * N)
        print(f"round {rnd} {fn:8s} C={c:3d}: {dt * 1e6:5.2f} us a kernel", flush=True)

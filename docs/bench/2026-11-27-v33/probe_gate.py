"""Version 33: do the next kernel's weight loads slow this kernel's read of its row (the SM's inbound traffic
shared)? Chains of 60 kernels of 192 x 256, programmatic launch, 20 replays; us a kernel. Each kernel reads the
768-float row the kernel before wrote, sums it and writes its 4 floats (version 32's "row"), with 24 KB a block
of weights into registers before its wait ("row+w"). "gated": a block issues its weight loads only once every
block of the kernel before has its row (a counter per kernel of the chain, incremented by each block after its
row landed, reset two kernels later), or after GATE_NS of waiting (a timeout: never a deadlock). L2: the same
4.7 MB every kernel; HBM: each kernel its own."""
import sys
import time

import cupy as cp
import numpy as np

from gpt2block.backends import cuda_modules

SRC = r'''
__device__ __forceinline__ void trig() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_prev() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ unsigned long long gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
template <int MODE>  // 0 no weights; 1 weights before the wait; 2 gated weights before the wait
__device__ __forceinline__ void row(const float* x, float* y, const uint4* w, int n, int* cnt, int i, int nk,
                                    int gate_ns) {
    trig();
    if (MODE == 2) {
        if (threadIdx.x == 0) {
            const int* c = cnt + (i + nk - 1) % nk;
            const unsigned long long t0 = gt();
            while (*(volatile const int*)c < (int)gridDim.x && gt() - t0 < (unsigned long long)gate_ns) __nanosleep(32);
        }
        __syncthreads();
    }
    uint4 wv[6];
    if (MODE) {
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            const uint4* p = w + ((size_t)blockIdx.x * 6 + j) * 256 + threadIdx.x;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(wv[j].x), "=r"(wv[j].y), "=r"(wv[j].z), "=r"(wv[j].w) : "l"(p) : "memory");
        }
    }
    wait_prev();
    if (MODE == 2 && blockIdx.x == 0 && threadIdx.x == 0) cnt[(i + nk - 2) % nk] = 0;  // its readers have all passed
    __shared__ float red[8];
    float s = 0.0f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) s += x[k];
    if (MODE == 2) {
        __syncthreads();  // (s is in registers: every thread's row loads have landed)
        if (threadIdx.x == 0) atomicAdd(cnt + i, 1);
    }
    if (MODE) {
#pragma unroll
        for (int j = 0; j < 6; ++j) s += __uint_as_float(wv[j].x & 0x3f800000u) * 1e-9f;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (int q = 0; q < 8; ++q) t += red[q];
        const int k = blockIdx.x * 4 + threadIdx.x;
        y[k] = t * 1e-4f + x[k] * 0.5f;
    }
}
#define K(name, mode) extern "C" __global__ void name(const float* x, float* y, const uint4* w, int n, int* cnt, \
    int i, int nk, int gate_ns) { row<mode>(x, y, w, n, cnt, i, nk, gate_ns); }
K(k_row, 0)
K(k_row_w, 1)
K(k_row_w_gated, 2)
'''
mod = cp.RawModule(code=SRC, options=("-std=c++17",))
a, b = cp.ones(768, cp.float32), cp.zeros(768, cp.float32)
W_WORDS = 192 * 6 * 256 * 4  # 4.7 MB
w = cp.zeros(60 * W_WORDS, cp.uint32)
N, R = 60, 20
cnt = cp.zeros(N, cp.int32)
stream = cp.cuda.Stream(non_blocking=True)
CASES = [("row", "k_row", "L2", 0), ("row+w", "k_row_w", "L2", 0), ("row+w", "k_row_w", "HBM", 0)]
CASES += [("row+w gated", "k_row_w_gated", mem, ns) for mem in ("L2", "HBM") for ns in (1000, 3000)]
graphs = {}
for case in CASES:
    label, fn, mem, ns = case
    k = mod.get_function(fn)
    with stream:
        stream.begin_capture()
        try:
            with cuda_modules.programmatic_launches(True):
                for i in range(N):
                    src, dst = (a, b) if i % 2 == 0 else (b, a)
                    wi = w[i * W_WORDS:] if mem == "HBM" else w
                    cuda_modules.launch(k, (192,), (256,), (src, dst, wi, np.int32(768), cnt, np.int32(i), np.int32(N),
                                                             np.int32(ns)), programmatic=True)
        finally:
            graphs[case] = stream.end_capture()
for rnd in range(3):
    for case in CASES:
        g = graphs[case]
        with stream:
            g.launch(stream)
        stream.synchronize()
        t0 = time.perf_counter()
        with stream:
            for _ in range(R):
                g.launch(stream)
        stream.synchronize()
        dt = (time.perf_counter() - t0) / (R * N)
        print(f"round {rnd} {case[0]:12s} {case[2]:3s} gate {case[3]:4d} ns: {dt * 1e6:5.2f} us a kernel", flush=True)

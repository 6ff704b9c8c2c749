"""Version 32: does a decode kernel pay for fetching its instructions? Visit 6-9 found the one-token GEMVs 16-21%
slower with a code path built in and never taken (15-45% more code). Here chains of 60 kernels (one CUDA graph,
programmatic launches, replayed 20 times) of the probe_pdl_floor.py "row" shape (read 768 floats the kernel
before wrote, block sum, 4 floats out) with NFMA straight-line FMAs after the sum (16 bytes of code each, 8
independent chains, so that their issue costs about NFMA / 8 x a few cycles, not their latency). The chain
cycles through DISTINCT different kernels of the same size (their constants differ), 1 or 4 or 8: with 1 the
code stays in the SM's instruction caches, with more it may not. us per kernel."""
import time

import cupy as cp
import numpy as np

from gpt2block.backends import cuda_modules

TMPL = r'''
__device__ __forceinline__ void trig() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_prev() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
template <int TAG, int NFMA>
__device__ __forceinline__ void body(const float* x, float* y, int n) {
    trig();
    wait_prev();
    __shared__ float red[8];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    float a[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = s + j;
#pragma unroll
    for (int i = 0; i < NFMA; ++i) a[i & 7] = fmaf(a[i & 7], 0.999f + 1e-7f * (i + 131 * TAG), 1e-6f * (TAG + 1));
#pragma unroll
    for (int j = 1; j < 8; ++j) a[0] += a[j] * 1e-3f;
    s = a[0];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (int q = 0; q < 8; ++q) t += red[q];
        const int i = blockIdx.x * 4 + threadIdx.x;
        y[i] = t * 1e-6f + x[i] * 0.5f;
    }
}
'''
SIZES = (64, 512, 1024, 2048)
src = TMPL + "".join(f'extern "C" __global__ void k_{t}_{f}(const float* x, float* y, int n) {{ body<{t}, {f}>(x, y, n); }}\n'
                     for f in SIZES for t in range(8))
mod = cp.RawModule(code=src, options=("-std=c++17",))
a, b = cp.ones(768, cp.float32), cp.zeros(768, cp.float32)
stream = cp.cuda.Stream(non_blocking=True)
N, R = 64, 20
graphs = {}
for f in SIZES:
    for distinct in (1, 4, 8):
        with stream:
            stream.begin_capture()
            try:
                with cuda_modules.programmatic_launches(True):
                    for i in range(N):
                        k = mod.get_function(f"k_{i % distinct}_{f}")
                        src_, dst = (a, b) if i % 2 == 0 else (b, a)
                        cuda_modules.launch(k, (192,), (256,), (src_, dst, np.int32(768)), programmatic=True)
            finally:
                graphs[f, distinct] = stream.end_capture()
for rnd in range(3):
    for f in SIZES:
        for distinct in (1, 4, 8):
            g = graphs[f, distinct]
            with stream:
                g.launch(stream)
            stream.synchronize()
            t0 = time.perf_counter()
            with stream:
                for _ in range(R):
                    g.launch(stream)
            stream.synchronize()
            dt = (time.perf_counter() - t0) / (R * N)
            print(f"round {rnd} {f:5d} FMAs (~{f * 16 // 1024} KB of code) x {distinct} distinct kernels: "
                  f"{dt * 1e6:5.2f} us a kernel", flush=True)

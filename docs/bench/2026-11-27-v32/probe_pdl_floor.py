"""Version 32: the floor of a kernel boundary under programmatic dependent launch on this GPU. Chains of 60
kernels captured in one CUDA graph, replayed 20 times back to back; us per kernel (wall clock over the
replays / 1,200), plain launches and programmatic ones:
  empty 1x32      trigger, wait, one thread adds 1 to a float (1 block of 32 threads);
  empty 192x256   the same with 192 blocks of 256 threads (a decode GEMV's grid);
  row 192x256     every block reads the 768 floats the kernel before wrote, sums them (warp shuffles, one
                  block barrier) and writes its 4 (a GEMV's handoff with no weights: x in, 4 rows out).
  row+w 192x256   the same, with 24 KB of weights a block loaded into registers before the wait (bf16 FC's);
                  "L2": every kernel the same 4.7 MB (in the L2), "HBM": each its own (as the decode step's);
  row+w post      the weights loaded after the wait instead.
  row+w half      12 KB a block before the wait, 12 KB after it;
  row+w bulk      the 24 KB copied into shared memory by the copy engine (one cp.async.bulk on an mbarrier,
                  issued before the wait), read from there after the row;
  row+w pf        the 24 KB prefetched into the L2 before the wait (cp.async.bulk.prefetch.L2), then loaded
                  into registers after it."""
import time

import cupy as cp
import numpy as np

from gpt2block.backends import cuda_modules

SRC = r'''
__device__ __forceinline__ void trig() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_prev() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
extern "C" __global__ void k_empty(const float* x, float* y, const uint4* w, int n) {
    trig(); wait_prev();
    if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = x[0] + 1.0f;
}
template <int W>  // 0 no weights; 1 before the wait; 2 after it; 3 half and half
__device__ __forceinline__ void row(const float* x, float* y, const uint4* w, int n) {
    trig();
    uint4 wv[6];
    auto load = [&](int j0, int j1) {
#pragma unroll
        for (int j = j0; j < j1; ++j) {
            const uint4* p = w + ((size_t)blockIdx.x * 6 + j) * 256 + threadIdx.x;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(wv[j].x), "=r"(wv[j].y), "=r"(wv[j].z), "=r"(wv[j].w) : "l"(p) : "memory");
        }
    };
    if (W == 1) load(0, 6);
    if (W == 3) load(0, 3);
    wait_prev();
    if (W == 2) load(0, 6);
    if (W == 3) load(3, 6);
    __shared__ float red[8];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    if (W) {
#pragma unroll
        for (int j = 0; j < 6; ++j) s += __uint_as_float(wv[j].x & 0x3f800000u) * 1e-9f;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (int q = 0; q < 8; ++q) t += red[q];
        const int i = blockIdx.x * 4 + threadIdx.x;
        y[i] = t * 1e-4f + x[i] * 0.5f;
    }
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
extern "C" __global__ void k_row_w_bulk(const float* x, float* y, const uint4* w, int n) {
    __shared__ __align__(128) uint4 ws[6 * 256];
    __shared__ __align__(8) unsigned long long mbar;
    __shared__ float red[8];
    trig();
    const unsigned mb = smem_u32(&mbar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(mb) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mb), "r"(6 * 256 * 16) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(smem_u32(ws)), "l"(w + (size_t)blockIdx.x * 6 * 256), "r"(6 * 256 * 16), "r"(mb) : "memory");
    }
    wait_prev();
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    __syncthreads();  // the mbarrier's init seen by every thread
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra W;\n}\n"
                 ::"r"(mb) : "memory");
#pragma unroll
    for (int j = 0; j < 6; ++j) s += __uint_as_float(ws[j * 256 + threadIdx.x].x & 0x3f800000u) * 1e-9f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (int q = 0; q < 8; ++q) t += red[q];
        const int i = blockIdx.x * 4 + threadIdx.x;
        y[i] = t * 1e-4f + x[i] * 0.5f;
    }
}
extern "C" __global__ void k_row_w_pf(const float* x, float* y, const uint4* w, int n) {
    if (threadIdx.x == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(w + (size_t)blockIdx.x * 6 * 256),
                     "r"(6 * 256 * 16) : "memory");
    row<2>(x, y, w, n);
}
extern "C" __global__ void k_row(const float* x, float* y, const uint4* w, int n) { row<0>(x, y, w, n); }
extern "C" __global__ void k_row_w(const float* x, float* y, const uint4* w, int n) { row<1>(x, y, w, n); }
extern "C" __global__ void k_row_w_post(const float* x, float* y, const uint4* w, int n) { row<2>(x, y, w, n); }
extern "C" __global__ void k_row_w_half(const float* x, float* y, const uint4* w, int n) { row<3>(x, y, w, n); }
'''
mod = cp.RawModule(code=SRC, options=("-std=c++17",))
a, b = cp.ones(768, cp.float32), cp.zeros(768, cp.float32)
W_WORDS = 192 * 6 * 256 * 4  # 4.7 MB
w = cp.zeros(60 * W_WORDS, cp.uint32)  # 60 slices: one a kernel ("HBM"), or the first for all ("L2")
stream = cp.cuda.Stream(non_blocking=True)
CASES = [("empty 1x32", "k_empty", 1, 32), ("empty 192x256", "k_empty", 192, 256), ("row 192x256", "k_row", 192, 256),
         ("row+w L2", "k_row_w", 192, 256), ("row+w HBM", "k_row_w", 192, 256), ("row+w post HBM", "k_row_w_post", 192, 256),
         ("row+w half HBM", "k_row_w_half", 192, 256), ("row+w bulk L2", "k_row_w_bulk", 192, 256),
         ("row+w bulk HBM", "k_row_w_bulk", 192, 256), ("row+w pf HBM", "k_row_w_pf", 192, 256)]
N, R = 60, 20
graphs = {}
for label, fn, grid, block in CASES:
    k = mod.get_function(fn)
    for prog in (False, True):
        with stream:
            stream.begin_capture()
            try:
                with cuda_modules.programmatic_launches(prog):
                    for i in range(N):
                        src, dst = (a, b) if i % 2 == 0 else (b, a)
                        wi = w[i * W_WORDS:] if "HBM" in label else w
                        cuda_modules.launch(k, (grid,), (block,), (src, dst, wi, np.int32(768)), programmatic=True)
            finally:
                graphs[label, prog] = stream.end_capture()
for rnd in range(3):
    for label, fn, grid, block in CASES:
        for prog in (False, True):
            g = graphs[label, prog]
            with stream:
                g.launch(stream)
            stream.synchronize()
            t0 = time.perf_counter()
            with stream:
                for _ in range(R):
                    g.launch(stream)
            stream.synchronize()
            dt = (time.perf_counter() - t0) / (R * N)
            print(f"round {rnd} {label:15s} {'programmatic' if prog else 'plain       '}: {dt * 1e6:5.2f} us a kernel",
                  flush=True)

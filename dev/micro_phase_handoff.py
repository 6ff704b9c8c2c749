#!/usr/bin/env python3
"""How long the fused decode kernel's phase handoff takes on its own, by protocol:
python dev/micro_phase_handoff.py (GPU; CuPy).

One block per SM runs many phases back to back. In each phase every block writes its slice of
an n-float vector and then needs the whole vector (as decode_layers.cu's phases need all of the
previous phase's outputs), checks every value and keeps it in shared memory; no arithmetic. The
protocols:
  barrier  plain stores, the grid barrier of decode_layers.cu (block barrier, a release add on one
           counter, acquire polls by thread 0, block barrier), then the vector's loads (as
           dl_phase_inputs: batches of 4 float4 per thread issued before their stores);
  flags    plain stores, block barrier, a release store of the block's own flag; threads 0..G-1
           poll one flag each with acquire loads, block barrier, then the vector's loads;
  tagged   each float stored beside a 32-bit tag (one 64-bit relaxed store of value and tag, the
           tag naming launch and phase); the readers poll the data itself with 16-byte relaxed
           loads until every tag is the phase's (no counter, no flag, no second round trip).
Two vectors alternate (phase p writes vector p % 2), as the kernel's phases write different
buffers. Reported: nanoseconds per phase (CUDA events over the whole launch / phases, median of
launches) and the count of wrong values seen (must be 0). docs/PERFORMANCE.md, version 12.
"""
import argparse

import numpy as np

SRC = r'''
#define THREADS 256
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ ulonglong2 ld_tagged2(const ulonglong2* p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_tagged(unsigned long long* p, float v, unsigned tag) {
    const unsigned long long w = ((unsigned long long)tag << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ bool tag_is(unsigned long long w, unsigned tag) { return (unsigned)(w >> 32) == tag; }

extern "C" __global__ void __launch_bounds__(THREADS, 1) handoff(int mode, int phases, int n, unsigned base,
        float* buf, unsigned long long* tbuf, unsigned* counter, unsigned* flags, int* errors) {
    extern __shared__ float4 sm4[];
    float* vec = (float*)sm4;
    const int tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;
    const int lo = (int)((long long)b * n / G), hi = (int)((long long)(b + 1) * n / G);
    int bad = 0;
    unsigned target = 0;
    for (int p = 0; p < phases; ++p) {
        const float val = (float)(p + 1);
        const unsigned tag = base + (unsigned)p;
        float* out = buf + (size_t)(p & 1) * n;
        unsigned long long* tout = tbuf + (size_t)(p & 1) * n;
        if (mode == 2) {
            for (int j = lo + tid; j < hi; j += THREADS) st_tagged(tout + j, val, tag);
            const ulonglong2* src = (const ulonglong2*)tout;
            for (int u0 = 0; u0 < n / 2; u0 += 4 * THREADS) {
                ulonglong2 v[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) { const int u = u0 + tid + k * THREADS; if (u < n / 2) v[k] = ld_tagged2(src + u); }
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int u = u0 + tid + k * THREADS;
                    if (u >= n / 2) break;
                    while (!tag_is(v[k].x, tag) || !tag_is(v[k].y, tag)) v[k] = ld_tagged2(src + u);
                    vec[2 * u] = __uint_as_float((unsigned)v[k].x);
                    vec[2 * u + 1] = __uint_as_float((unsigned)v[k].y);
                }
            }
            __syncthreads();
        } else {
            for (int j = lo + tid; j < hi; j += THREADS) out[j] = val;
            __syncthreads();
            if (mode == 0) {
                target += G;
                if (tid == 0) {
                    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
                    while (ld_acquire(counter) < target) {}
                }
            } else {
                if (tid == 0) st_release(flags + b, base + p);
                if (tid < G) while ((int)(ld_acquire(flags + tid) - (base + p)) < 0) {}
            }
            __syncthreads();
            const float4* s4 = (const float4*)out;
            float4* v4 = (float4*)vec;
            for (int e0 = 0; e0 < n / 4; e0 += 4 * THREADS) {
                float4 v[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) if (e0 + tid + k * THREADS < n / 4) v[k] = __ldcg(s4 + e0 + tid + k * THREADS);
#pragma unroll
                for (int k = 0; k < 4; ++k) if (e0 + tid + k * THREADS < n / 4) v4[e0 + tid + k * THREADS] = v[k];
            }
            __syncthreads();
        }
        for (int j = tid; j < n; j += THREADS) bad += vec[j] != val;
        __syncthreads();
    }
    if (bad) atomicAdd(errors, bad);
}
'''

MODES = {"barrier": 0, "flags": 1, "tagged": 2}


def main() -> None:
    import cupy as cp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="768,3072,6144,24576", help="floats per phase vector (M x K)")
    ap.add_argument("--phases", type=int, default=2000)
    ap.add_argument("--launches", type=int, default=7)
    args = ap.parse_args()
    mod = cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90a"))
    k = mod.get_function("handoff")
    g = cp.cuda.Device().attributes["MultiProcessorCount"]
    sizes = [int(s) for s in args.sizes.split(",")]
    nmax = max(sizes)
    smem = 4 * nmax + 65536  # (the extra keeps one block per SM, as the decode kernel's ring does)
    k.max_dynamic_shared_size_bytes = smem
    buf = cp.zeros(2 * nmax, cp.float32)
    tbuf = cp.zeros(2 * nmax, cp.uint64)
    counter = cp.zeros(1, cp.uint32)
    flags = cp.zeros(g, cp.uint32)
    errors = cp.zeros(1, cp.int32)
    base = 1
    print(f"{g} blocks, {args.phases} phases a launch, median of {args.launches} launches")
    print(f"{'floats':>7} " + " ".join(f"{m:>12}" for m in MODES) + "   (ns per phase)")
    for n in sizes:
        row = []
        for name, mode in MODES.items():
            times = []
            for _ in range(args.launches):
                counter.fill(0)
                a, e = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                k((g,), (256,), (np.int32(mode), np.int32(args.phases), np.int32(n), np.uint32(base), buf, tbuf,
                                 counter, flags, errors), shared_mem=smem)
                e.record()
                e.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, e) * 1e6 / args.phases)
                base += args.phases + 1
            row.append(float(np.median(times)))
        err = int(errors.get()[0])
        print(f"{n:>7} " + " ".join(f"{t:>12.0f}" for t in row) + f"   wrong values: {err}")


if __name__ == "__main__":
    main()

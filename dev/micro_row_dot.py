#!/usr/bin/env python3
"""How long one warp takes for a 768-float row dot product from shared memory, the decode
kernel's inner step, on its own: python dev/micro_row_dot.py (GPU; CuPy).

One block of 8 warps per SM, every warp on its own row of a stage in shared memory; clock64()
around the loop and around the warp's 5-shuffle sum; median cycles of warp 0's repetitions.
Variants: 0 as decode_layers.cu's FMA path (one accumulator, the activations re-read from
shared memory for each row), 1 four accumulators, 2 fully unrolled with the loads first,
3 three rows (stages) at once sharing each activation load. Every variant's sums are checked against
a float64 reference (relative error at most 1e-5; exit status 1 otherwise). docs/PERFORMANCE.md, version 11.
"""
import sys

import numpy as np

SRC = r'''
template <int V>
__device__ __forceinline__ void rows(const float* act, const float* w, int lane, float* res) {
    if (V == 0) {  // as decode_layers: one chain
        float acc = 0.f;
        for (int k = lane * 4; k < 768; k += 128) {
            float4 a = *(const float4*)(act + k), x = *(const float4*)(w + k);
            acc = fmaf(a.x, x.x, acc); acc = fmaf(a.y, x.y, acc); acc = fmaf(a.z, x.z, acc); acc = fmaf(a.w, x.w, acc);
        }
        res[0] = acc;
    } else if (V == 1) {  // four chains, unrolled by 2 with loads first
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        #pragma unroll 2
        for (int k = lane * 4; k < 768; k += 128) {
            float4 a = *(const float4*)(act + k), x = *(const float4*)(w + k);
            a0 = fmaf(a.x, x.x, a0); a1 = fmaf(a.y, x.y, a1); a2 = fmaf(a.z, x.z, a2); a3 = fmaf(a.w, x.w, a3);
        }
        res[0] = (a0 + a1) + (a2 + a3);
    } else if (V == 2) {  // fully unrolled, loads first (6 pieces)
        float4 a[6], x[6];
        #pragma unroll
        for (int i = 0; i < 6; ++i) { a[i] = *(const float4*)(act + lane * 4 + 128 * i); x[i] = *(const float4*)(w + lane * 4 + 128 * i); }
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        #pragma unroll
        for (int i = 0; i < 6; ++i) { a0 = fmaf(a[i].x, x[i].x, a0); a1 = fmaf(a[i].y, x[i].y, a1); a2 = fmaf(a[i].z, x[i].z, a2); a3 = fmaf(a[i].w, x[i].w, a3); }
        res[0] = (a0 + a1) + (a2 + a3);
    } else {  // V == 3: three rows (3 stages) at once, four chains each, unrolled by 2
        float c[3][4] = {};
        #pragma unroll 2
        for (int k = lane * 4; k < 768; k += 128) {
            float4 a = *(const float4*)(act + k);
            #pragma unroll
            for (int r = 0; r < 3; ++r) {
                float4 x = *(const float4*)(w + r * 8 * 768 + k);
                c[r][0] = fmaf(a.x, x.x, c[r][0]); c[r][1] = fmaf(a.y, x.y, c[r][1]); c[r][2] = fmaf(a.z, x.z, c[r][2]); c[r][3] = fmaf(a.w, x.w, c[r][3]);
            }
        }
        for (int r = 0; r < 3; ++r) res[r] = (c[r][0] + c[r][1]) + (c[r][2] + c[r][3]);
    }
}
template <int V>
__device__ void run(const float* act, const float* w, int warp, int lane, long long* out, float& total) {
    for (int rep = 0; rep < 40; ++rep) {
        long long t0 = clock64();
        float res[3];
        rows<V>(act, w + (rep & 1) * 3 * 8 * 768 + warp * 768, lane, res);
        long long t1 = clock64();
        const int nr = V == 3 ? 3 : 1;
        if (nr == 1) { for (int m = 16; m; m >>= 1) res[0] += __shfl_xor_sync(0xffffffffu, res[0], m); }
        else {  // three values: halving exchange on lane bit 16 (pairs 0/1), then full sums
            const bool up = lane & 16;
            float keep = up ? res[1] : res[0], send = up ? res[0] : res[1];
            float v01 = keep + __shfl_xor_sync(0xffffffffu, send, 16);
            float v2 = res[2] + __shfl_xor_sync(0xffffffffu, res[2], 16);
            for (int m = 8; m; m >>= 1) { v01 += __shfl_xor_sync(0xffffffffu, v01, m); v2 += __shfl_xor_sync(0xffffffffu, v2, m); }
            res[0] = v01 + v2;
        }
        long long t2 = clock64();
        total += res[0];
        if (blockIdx.x == 0 && lane == 0) { out[(warp * 40 + rep) * 2] = t1 - t0; out[(warp * 40 + rep) * 2 + 1] = t2 - t1; }
    }
}
extern "C" __global__ void __launch_bounds__(256, 1) micro(int v, long long* out, float* sink) {
    extern __shared__ float4 sm4[];
    float* act = (float*)sm4;      // 768
    float* w = act + 768;          // 2 x 3 stages x 8 rows x 768
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    for (int i = tid; i < 768 + 6 * 8 * 768; i += 256) act[i] = 0.001f * (i % 97);
    __syncthreads();
    float total = 0.f;
    if (v == 0) run<0>(act, w, warp, lane, out, total);
    else if (v == 1) run<1>(act, w, warp, lane, out, total);
    else if (v == 2) run<2>(act, w, warp, lane, out, total);
    else run<3>(act, w, warp, lane, out, total);
    sink[blockIdx.x * 256 + tid] = total;
}
'''


def expected_sums() -> np.ndarray:
    """Each thread's total (sink's value) from a float64 reference: [variant 0-2 | 3, 256 threads].
    The data is the kernel's (0.001 * (i % 97) in float32); a warp's row of repetition rep starts
    (rep & 1) * 3 stages in; variants 0-2 sum row 0's dot, variant 3 lanes 0-15 rows 0 + 2, 16-31 rows 1 + 2."""
    buf = (np.float32(0.001) * (np.arange(768 + 6 * 8 * 768) % 97).astype(np.float32)).astype(np.float64)
    act, w = buf[:768], buf[768:]
    one, three = np.zeros(256), np.zeros(256)
    for tid in range(256):
        warp, lane = tid >> 5, tid & 31
        for rep in range(40):
            base = (rep & 1) * 3 * 8 * 768 + warp * 768
            dots = [act @ w[base + r * 8 * 768: base + r * 8 * 768 + 768] for r in range(3)]
            one[tid] += dots[0]
            three[tid] += (dots[1] if lane & 16 else dots[0]) + dots[2]
    return np.stack([one, three])


def main() -> int:
    import cupy as cp

    mod = cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90a"))
    k = mod.get_function("micro")
    smem = 4 * (768 + 6 * 8 * 768)
    k.max_dynamic_shared_size_bytes = smem
    out = cp.zeros(8 * 40 * 2, cp.int64)
    sink = cp.zeros(132 * 256, cp.float32)
    want = expected_sums()
    failed = False
    for v in (0, 1, 2, 3, 0):
        sink.fill(cp.nan)
        k((132,), (256,), (np.int32(v), out, sink), shared_mem=smem)
        cp.cuda.runtime.deviceSynchronize()
        o = cp.asnumpy(out).reshape(8, 40, 2)[:, 5:]
        ref = want[1 if v == 3 else 0]
        err = float(np.nanmax(np.abs(cp.asnumpy(sink).reshape(132, 256) - ref) / np.abs(ref)))
        ok = bool(cp.isfinite(sink).all()) and err <= 1e-5  # float32 sums of 768 products, 40 times
        failed |= not ok
        print(f"variant {v} ({'3 rows' if v == 3 else '1 row'}): loop {np.median(o[..., 0]):.0f} cycles, "
              f"warp sums {np.median(o[..., 1]):.0f}; sums {'ok' if ok else 'WRONG'} "
              f"(max relative error {err:.1e} against float64)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

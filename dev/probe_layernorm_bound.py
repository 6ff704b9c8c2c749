#!/usr/bin/env python3
"""What bounds the LayerNorm at 8192 x 768 (docs/PERFORMANCE.md, version 20's items 1 and 2): python dev/probe_layernorm_bound.py

Times, by the benchmark's burst method (gpt2block.bench._burst_median, four input / output sets), a
torch copy of the same bytes, our own copies of the same rows (a warp a row, one or two rows in flight,
grid-stride; and a torch-like one, 8 KB a block), the kept LayerNorm (kernels/layernorm.cu) and
the same arithmetic with one row loaded ahead (version 19's schedule), and variants that share that
schedule and the kernel's helpers but do less arithmetic a row: the row's statistics in fp32 (two
fp32 warp sums), or none at all (g, b, FMA and the store only). Prints us per call and TB/s, and the copy
ceiling of gpt2block.bench in the same run. The fp32 and no-statistics variants compute something
else than the kept LayerNorm: they are measurements, not kernels.
The probe kernels live here, not in kernels/, for that reason.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402
import torch  # noqa: E402

from gpt2block.backends.cuda import ops as cuda_ops  # noqa: E402
from gpt2block.backends.cuda.modules import sm_count  # noqa: E402
from gpt2block.bench import _burst_median, layernorm_sets, measure_ceilings  # noqa: E402

SRC = r'''
#define LN_WARPS 4
#define LN_MAX_VEC 6
#define LN_DEPTH 2  // this file's layernorm_f32: one row loaded ahead (version 19's; cuda_ops picks 3 here)
#include "layernorm.cu"


// a torch-like copy: each thread 4 float4 at a stride of 128 threads, a block covers 8 KB, no grid stride
extern "C" __global__ void __launch_bounds__(128) copy_chunk(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
    const long long base = (long long)blockIdx.x * 512 + threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) if (base + 128 * i < n4) v[i] = x[base + 128 * i];
#pragma unroll
    for (int i = 0; i < 4; ++i) if (base + 128 * i < n4) y[base + 128 * i] = v[i];
}
// a warp a row, DEPTH rows in flight, rows grid-stride
template <int DEPTH>
__device__ void rowcopy_t(const float* __restrict__ x, float* __restrict__ y, int rows) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k = 0;; k += DEPTH) {
        float4 v[DEPTH][6];
        int r[DEPTH];
#pragma unroll
        for (int d = 0; d < DEPTH; ++d) {
            const int kk = k + d;
            r[d] = (blockIdx.x * 4 + warp) + kk * gridDim.x * 4;
            if (r[d] >= rows) r[d] = -1;
            if (r[d] >= 0) {
#pragma unroll
                for (int i = 0; i < 6; ++i) v[d][i] = reinterpret_cast<const float4*>(x + (long long)r[d] * 768)[lane + 32 * i];
            }
        }
#pragma unroll
        for (int d = 0; d < DEPTH; ++d)
            if (r[d] >= 0) {
#pragma unroll
                for (int i = 0; i < 6; ++i) reinterpret_cast<float4*>(y + (long long)r[d] * 768)[lane + 32 * i] = v[d][i];
            }
        if (r[DEPTH - 1] < 0) break;
    }
}
extern "C" __global__ void __launch_bounds__(128) rowcopy_d1(const float* x, float* y, int rows) { rowcopy_t<1>(x, y, rows); }
extern "C" __global__ void __launch_bounds__(128) rowcopy_d2(const float* x, float* y, int rows) { rowcopy_t<2>(x, y, rows); }

// MODE 1: fp32 statistics (two fp32 warp sums); MODE 2: none (mean 0, rstd 1): g, b, FMA, store
template <int MODE>
__device__ __forceinline__ void ln_row_t(float4 (&v)[LN_MAX_VEC], const float* __restrict__ g, const float* __restrict__ b,
                                         float* __restrict__ y, int row, int D, int nvec, int lane, float eps) {
    float rstd = 1.f;
    if (MODE == 1) {
        const float c = warp_sum(ln_lane_sum(v, nvec, lane)) / D;
        ln_shift(v, c, nvec, lane);
        float sq = 0.f;
#pragma unroll
        for (int i = 0; i < LN_MAX_VEC; ++i)
            if (lane + 32 * i < nvec) sq += (v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w);
        rstd = rsqrtf(warp_sum(sq) / D + eps);
    }
    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * D);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c4 = lane + 32 * i;
        if (c4 < nvec) {
            const float4 gg = __ldg(g4 + c4), bv = __ldg(b4 + c4);
            yr[c4] = make_float4(fmaf(v[i].x * rstd, gg.x, bv.x), fmaf(v[i].y * rstd, gg.y, bv.y),
                                 fmaf(v[i].z * rstd, gg.z, bv.z), fmaf(v[i].w * rstd, gg.w, bv.w));
        }
    }
}
template <int MODE>
__device__ void ln_t(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ b,
                     float* __restrict__ y, int rows, int D, float eps) {
    const int lane = threadIdx.x & 31, stride = gridDim.x * 4, nvec = D >> 2;
    int row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= rows) return;
    float4 va[LN_MAX_VEC], vb[LN_MAX_VEC];
    ln_load(va, x, row, D, nvec, lane);
    while (true) {
        const int r1 = row + stride;
        if (r1 < rows) ln_load(vb, x, r1, D, nvec, lane);
        ln_row_t<MODE>(va, g, b, y, row, D, nvec, lane, eps);
        if (r1 >= rows) break;
        const int r2 = r1 + stride;
        if (r2 < rows) ln_load(va, x, r2, D, nvec, lane);
        ln_row_t<MODE>(vb, g, b, y, r1, D, nvec, lane, eps);
        if (r2 >= rows) break;
        row = r2;
    }
}
extern "C" __global__ void __launch_bounds__(128) ln_fp32stats(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_t<1>(x, g, b, y, rows, D, eps); }
extern "C" __global__ void __launch_bounds__(128) ln_nostats(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_t<2>(x, g, b, y, rows, D, eps); }
// ---- probe: the LayerNorm with each block's contiguous rows streamed into shared memory by bulk
// copies (TMA, cp.async.bulk) S stages ahead, a row per warp per stage; the output by each warp's
// stores (BULK_STORE 0) or written back into the stage and sent by one bulk store (1).
__device__ __forceinline__ unsigned lb_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void lb_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
#define LB_WARPS 8
template <int S, int BULK_STORE>
__device__ __forceinline__ void ln_bulk_t(const float* __restrict__ x, const float* __restrict__ g,
                                          const float* __restrict__ b, float* __restrict__ y, int rows, int D, float eps) {
    extern __shared__ float4 lb_sm[];  // [S][LB_WARPS][D / 4]
    __shared__ __align__(8) unsigned long long full[S];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, D4 = D >> 2;
    const int G = gridDim.x;
    const int r0 = (int)((long long)rows * blockIdx.x / G), r1 = (int)((long long)rows * (blockIdx.x + 1) / G);
    const int nst = (r1 - r0 + LB_WARPS - 1) / LB_WARPS;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(lb_smem(full + s)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int t) {
        const int ra = r0 + t * LB_WARPS, rb = min(r1, ra + LB_WARPS);
        const unsigned bytes = (unsigned)(rb - ra) * D * 4;
        const unsigned bar = lb_smem(full + t % S);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     ::"r"(lb_smem(lb_sm + (t % S) * LB_WARPS * D4)), "l"(x + (long long)ra * D), "r"(bytes), "r"(bar) : "memory");
    };
    if (threadIdx.x == 0)
        for (int t = 0; t < min(S, nst); ++t) issue(t);
    const int nvec = D4;
    for (int t = 0; t < nst; ++t) {
        lb_wait(lb_smem(full + t % S), (t / S) & 1);
        const int row = r0 + t * LB_WARPS + warp;
        float4* slot = lb_sm + ((t % S) * LB_WARPS + warp) * D4;
        if (row < r1) {
            float4 v[LN_MAX_VEC];
#pragma unroll
            for (int i = 0; i < LN_MAX_VEC; ++i) v[i] = lane + 32 * i < nvec ? slot[lane + 32 * i] : make_float4(0.f, 0.f, 0.f, 0.f);
            if (BULK_STORE) {
                ln_row(v, g, b, reinterpret_cast<float*>(slot), 0, D, D, nvec, lane, eps);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            } else {
                ln_row(v, g, b, y, row, D, D, nvec, lane, eps);
            }
        }
        __syncthreads();  // the stage read (and, BULK_STORE, written back) by every warp
        if (threadIdx.x == 0) {
            if (BULK_STORE) {
                const int ra = r0 + t * LB_WARPS, rb = min(r1, ra + LB_WARPS);
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                             ::"l"(y + (long long)ra * D), "r"(lb_smem(lb_sm + (t % S) * LB_WARPS * D4)), "r"((unsigned)(rb - ra) * D * 4) : "memory");
                asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
                // the previous stage's store has read its slot: that slot takes stage t - 1 + S
                asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
                if (t >= 1 && t - 1 + S < nst) issue(t - 1 + S);
            } else if (t + S < nst) {
                issue(t + S);
            }
        }
    }
    if (BULK_STORE && threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
extern "C" __global__ void __launch_bounds__(32 * LB_WARPS) ln_bulk_s3(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_bulk_t<3, 0>(x, g, b, y, rows, D, eps); }
extern "C" __global__ void __launch_bounds__(32 * LB_WARPS) ln_bulk_s4(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_bulk_t<4, 0>(x, g, b, y, rows, D, eps); }
extern "C" __global__ void __launch_bounds__(32 * LB_WARPS) ln_bulk_s6(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_bulk_t<6, 0>(x, g, b, y, rows, D, eps); }
extern "C" __global__ void __launch_bounds__(32 * LB_WARPS) ln_bulk_s4_bs(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_bulk_t<4, 1>(x, g, b, y, rows, D, eps); }
extern "C" __global__ void __launch_bounds__(32 * LB_WARPS) ln_bulk_s6_bs(const float* x, const float* g, const float* b, float* y, int rows, int D, float eps) { ln_bulk_t<6, 1>(x, g, b, y, rows, D, eps); }
'''


def main() -> None:
    sms = sm_count()
    print(f"copy ceiling {measure_ceilings(torch, 20)['copy_TBps']:.3f} TB/s", flush=True)
    mod = cp.RawModule(code=SRC, options=("-std=c++17", f"-I{ROOT / 'kernels'}"))
    rows, d, sets = 8192, 768, 4
    xs, ys, g, b, xc, yc, gc, bc = layernorm_sets(torch, rows, d, sets)
    nbytes, n4 = 2 * rows * d * 4, rows * d // 4
    R, I, F = cp.int32(rows), cp.int32, cp.float32
    # version 19's schedule (one row ahead) runs the same arithmetic: its output must be the kept
    # kernel's (cuda_ops.layernorm builds two rows ahead at this shape), bit for bit
    ref = cp.empty_like(yc[0])
    cuda_ops.layernorm(xc[0], gc, bc, ref, 1e-5)
    out = cp.full_like(ref, cp.nan)
    one_ahead = mod.get_function("layernorm_f32")
    one_ahead((4 * sms,), (128,), (xc[0], gc, bc, out, R, I(d), I(d), I(d), F(1e-5)))
    print(f"one row ahead bit-equal to the kept kernel: {bool((out == ref).all())}", flush=True)

    def ln(name, per):
        k = mod.get_function(name)
        return lambda i: k((per * sms,), (128,), (xc[i % sets], gc, bc, yc[i % sets], R, I(d), F(1e-5)))

    def rowcopy(name, per):
        k = mod.get_function(name)
        return lambda i: k((per * sms,), (128,), (xc[i % sets], yc[i % sets], R))

    def bulk(name, per, stages):
        k = mod.get_function(name)
        smem = stages * 8 * d * 4
        k.max_dynamic_shared_size_bytes = smem
        return lambda i: k((per * sms,), (256,), (xc[i % sets], gc, bc, yc[i % sets], R, I(d), F(1e-5)),
                           shared_mem=smem)

    for name, per, st in (("ln_bulk_s4", 1, 4), ("ln_bulk_s4_bs", 1, 4), ("ln_bulk_s3", 2, 3)):
        yc[0].fill(cp.nan)
        bulk(name, per, st)(0)
        print(f"{name} x{per}/SM bit-equal to the kept kernel: {bool((yc[0] == ref).all())}", flush=True)
    chunk = mod.get_function("copy_chunk")
    cases = {"torch copy": lambda i: ys[i % sets].copy_(xs[i % sets]),
             "copy_chunk (8 KB a block)": lambda i: chunk((-(-n4 // 512),), (128,), (xc[i % sets], yc[i % sets], cp.int64(n4))),
             "rowcopy, 1 row in flight, 4/SM": rowcopy("rowcopy_d1", 4),
             "rowcopy, 2 rows in flight, 8/SM": rowcopy("rowcopy_d2", 8),
             "LayerNorm kept (2 rows ahead), 4/SM": lambda i: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5),
             "LayerNorm, 1 row ahead, 4/SM": lambda i: one_ahead((4 * sms,), (128,), (xc[i % sets], gc, bc, yc[i % sets],
                                                                                    R, I(d), I(d), I(d), F(1e-5))),
             "fp32 statistics, 4/SM": ln("ln_fp32stats", 4),
             "no statistics, 4/SM": ln("ln_nostats", 4),
             "bulk rows, 3 stages, 1/SM": bulk("ln_bulk_s3", 1, 3),
             "bulk rows, 4 stages, 1/SM": bulk("ln_bulk_s4", 1, 4),
             "bulk rows, 6 stages, 1/SM": bulk("ln_bulk_s6", 1, 6),
             "bulk rows, 3 stages, 2/SM": bulk("ln_bulk_s3", 2, 3),
             "bulk rows, 4 stages, 2/SM": bulk("ln_bulk_s4", 2, 4),
             "bulk rows + bulk store, 4 st, 1/SM": bulk("ln_bulk_s4_bs", 1, 4),
             "bulk rows + bulk store, 6 st, 1/SM": bulk("ln_bulk_s6_bs", 1, 6),
             "bulk rows + bulk store, 4 st, 2/SM": bulk("ln_bulk_s4_bs", 2, 4)}
    res = {}
    for _ in range(3):
        for k, fn in cases.items():
            res.setdefault(k, []).append(_burst_median(torch, fn, 30) * 1e3)
    for k, v in res.items():
        print(f"  {k:34s} " + " / ".join(f"{x:6.2f}" for x in v) + f" us  {nbytes / (min(v) * 1e-6) / 1e12:.3f} TB/s",
              flush=True)


if __name__ == "__main__":
    main()

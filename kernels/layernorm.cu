// layernorm.cu: LayerNorm over the last dimension, one warp per row.
//
//   y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * g + b,   var = mean((x - mean)^2)   (biased, divide by D)
//
// The row is held in registers (float4 per lane, LN_MAX_VEC of them), so the variance is a
// second pass over the row about a first estimate of its mean: no E[x^2] - E[x]^2, which loses
// everything on the residual-stream rows of trained GPT-2 whose values reach the thousands. c, the
// first estimate, comes from fp32 lane sums; the registers are shifted to d = x - c, whose sum and
// squares (fp32 four at a time, then float64) give md = mean - c and var = E[d^2] - md^2 (md is
// small next to the row's spread, so md^2 takes none of the variance's digits). The output is
// d * rstd * g + (b - md * rstd * g) with the scale rstd * g kept as an unrounded pair and one last
// rounding: one-row draws of the trained stream's shape (three columns x3000, the row shifted by
// 2000) stayed within 1.63-1.85 float32 ulps of the float64 result, where rounding x - c - md and
// (x - mean) * rstd on the way reaches 2.4-2.9 (dev/layernorm/run.py, variants 4 and 1;
// docs/PERFORMANCE.md, version 37).
//
// Each warp takes rows warp, warp + W, warp + 2W, ... (W = the grid's warps) and loads its next
// row (its next two: LN_DEPTH) before it works on the current one: with a grid of a few blocks per
// SM, an SM's loads of the next rows stream while its warps reduce and store the current ones. A
// grid of ceil(rows / LN_WARPS) blocks gives each warp one row (and no overlap between an SM's reads
// and writes: they all load, then all store).
//
// Launch: grid = any number of blocks up to ceil(rows / LN_WARPS), block = 32 * LN_WARPS, no
// dynamic shared memory. Takes part in programmatic dependent launch (common.cuh): every block lets
// the next kernel launch at once and waits for the kernels ahead before it touches any memory, so a
// programmatic launch is correct after any kernel; back to back, the next call's blocks are placed on
// the SMs as this call's leave and start the moment it completes (8192 x 768 in bursts: 15.8-15.9 ->
// 15.2 us, docs/PERFORMANCE.md version 24).
// Requires D % 4 == 0, D <= 128 * LN_MAX_VEC, 16-byte aligned x, y, g, b (row starts too).
#include "common.cuh"

// Build parameters (gpt2block/backends/cuda/build.py): LN_WARPS warps per block; LN_MAX_VEC float4 per
// lane, D <= 128 LN_MAX_VEC (a module per ceil(D / 128), so a narrow row does not pay a wide row's
// registers); LN_DEPTH rows a warp holds at once: 2, the one it works on and the next, or 3, two loaded
// ahead. gpt2block builds 3 where some warp takes 3 rows or more and LN_MAX_VEC is 4 to 6 (cuda/ops.layernorm):
// at 6 the kernel then takes 128 registers (4 blocks per SM still fit) and measured 16.5 us against 16.8
// at 8192 x 768 (dev/probe_layernorm_bound.py); at 3 ptxas spills, and wider rows would not fit.
#ifndef LN_WARPS
#error "LN_WARPS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef LN_MAX_VEC
#error "LN_MAX_VEC is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef LN_DEPTH
#error "LN_DEPTH is set by gpt2block/backends/cuda/build.py"
#endif
#if LN_DEPTH != 2 && LN_DEPTH != 3
#error "LN_DEPTH must be 2 or 3"
#endif

// Cache hints of the row's loads and stores. The rows are read once and written once, so x is
// loaded without allocating in L1 (.nc.L1::no_allocate) and y stored streaming (.cs: evict-first in
// L2): at 8192 x 768 16.55 -> 15.60 us, each hint about half of it (docs/PERFORMANCE.md version 22).
// A row is read by the warp that writes it, before it writes it, so the non-coherent load is safe
// with y = x.
__device__ __forceinline__ float4 ln_ld4(const float4* p) {
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void ln_st4(float4* p, const float4& v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}

__device__ __forceinline__ void ln_load(float4 (&v)[LN_MAX_VEC], const float* x, int row, int x_stride,
                                        int nvec, int lane) {
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)row * x_stride);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c = lane + 32 * i;
        v[i] = c < nvec ? ln_ld4(xr + c) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Sum over the lane's live elements of v (fp32; the lanes' sums are added in float64 by the caller).
__device__ __forceinline__ float ln_lane_sum(const float4 (&v)[LN_MAX_VEC], int nvec, int lane) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i)
        if (lane + 32 * i < nvec) s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    return s;
}

// v -= c on the lane's live elements.
__device__ __forceinline__ void ln_shift(float4 (&v)[LN_MAX_VEC], float c, int nvec, int lane) {
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        if (lane + 32 * i < nvec) {
            v[i].x -= c;
            v[i].y -= c;
            v[i].z -= c;
            v[i].w -= c;
        }
    }
}

// The lane's sums over the centred row d = x - c (in v): sd = sum(d) (fp32), sq = sum(d^2) (fp32 four at
// a time, then float64).
__device__ __forceinline__ void ln_lane_stats(const float4 (&v)[LN_MAX_VEC], int nvec, int lane, double& sd,
                                              double& sq) {
    float s = 0.f;
    double q = 0.0;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        if (lane + 32 * i < nvec) {
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
            q += (double)((v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w));
        }
    }
    sd = (double)s;
    sq = q;
}

// One output element from d = x - c: (d - m) * (r_hi + r_lo) * g + b, the scale unrounded
// (s_hi + s_lo) and the small terms added before the last fma's rounding.
__device__ __forceinline__ float ln_out(float d, float m, float r_hi, float r_lo, float g, float b) {
    const float s_hi = __fmul_rn(r_hi, g);
    const float s_lo = fmaf(r_lo, g, fmaf(r_hi, g, -s_hi));
    float t = fmaf(-m, s_hi, b);
    t = fmaf(d, s_lo, t);
    return fmaf(d, s_hi, t);
}

// The row in v (one warp's registers) normalized, each float4 of it handed to store(c4, o) (columns 4 c4 ..
// 4 c4 + 3); v is left centred on c.
template <class Store>
__device__ __forceinline__ void ln_row_to(float4 (&v)[LN_MAX_VEC], const float* __restrict__ g,
                                          const float* __restrict__ b, int D, int nvec, int lane, float eps,
                                          Store store) {
    const float c = (float)(warp_sum((double)ln_lane_sum(v, nvec, lane)) / D);
    ln_shift(v, c, nvec, lane);
    double sd, sq;
    ln_lane_stats(v, nvec, lane, sd, sq);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {  // warp_sum of both, interleaved
        sd += __shfl_xor_sync(0xffffffffu, sd, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
    }
    const double md = sd / D;
    const double rstd = 1.0 / sqrt(fmax(sq / D - md * md, 0.0) + (double)eps);
    const float m = (float)md;
    const float r_hi = (float)rstd;
    const float r_lo = (float)(rstd - (double)r_hi);

    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* b4 = reinterpret_cast<const float4*>(b);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c4 = lane + 32 * i;
        if (c4 < nvec) {
            const float4 gg = __ldg(g4 + c4), bv = __ldg(b4 + c4);
            float4 o;
            o.x = ln_out(v[i].x, m, r_hi, r_lo, gg.x, bv.x);
            o.y = ln_out(v[i].y, m, r_hi, r_lo, gg.y, bv.y);
            o.z = ln_out(v[i].z, m, r_hi, r_lo, gg.z, bv.z);
            o.w = ln_out(v[i].w, m, r_hi, r_lo, gg.w, bv.w);
            store(c4, o);
        }
    }
}

// The row in v normalized -> y[row] (fp32).
__device__ __forceinline__ void ln_row(float4 (&v)[LN_MAX_VEC], const float* __restrict__ g,
                                       const float* __restrict__ b, float* __restrict__ y, int row,
                                       int y_stride, int D, int nvec, int lane, float eps) {
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * y_stride);
    ln_row_to(v, g, b, D, nvec, lane, eps, [&](int c4, const float4& o) { ln_st4(yr + c4, o); });
}

extern "C" __global__ void __launch_bounds__(32 * LN_WARPS) layernorm_f32(
    const float* __restrict__ x,  // [rows, D], row stride x_stride
    const float* __restrict__ g,  // [D]
    const float* __restrict__ b,  // [D]
    float* __restrict__ y,        // [rows, D], row stride y_stride
    int rows, int D, int x_stride, int y_stride, float eps) {
    const int lane = threadIdx.x & 31;
    const int stride = gridDim.x * LN_WARPS;  // rows apart of one warp's consecutive rows
    const int nvec = D >> 2;
    int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    pdl_trigger();
    pdl_wait();  // nothing before it reads or writes memory
    if (row >= rows) return;
#if LN_DEPTH == 3
    float4 va[LN_MAX_VEC], vb[LN_MAX_VEC], vc[LN_MAX_VEC];  // this row and the next two, in turn
    ln_load(va, x, row, x_stride, nvec, lane);
    if (row + stride < rows) ln_load(vb, x, row + stride, x_stride, nvec, lane);
    while (true) {
        if (row + 2 * stride < rows) ln_load(vc, x, row + 2 * stride, x_stride, nvec, lane);
        ln_row(va, g, b, y, row, y_stride, D, nvec, lane, eps);
        if ((row += stride) >= rows) break;
        if (row + 2 * stride < rows) ln_load(va, x, row + 2 * stride, x_stride, nvec, lane);
        ln_row(vb, g, b, y, row, y_stride, D, nvec, lane, eps);
        if ((row += stride) >= rows) break;
        if (row + 2 * stride < rows) ln_load(vb, x, row + 2 * stride, x_stride, nvec, lane);
        ln_row(vc, g, b, y, row, y_stride, D, nvec, lane, eps);
        if ((row += stride) >= rows) break;
    }
#else
    float4 va[LN_MAX_VEC], vb[LN_MAX_VEC];  // this row and the next, alternating
    ln_load(va, x, row, x_stride, nvec, lane);
    while (true) {
        const int r1 = row + stride;
        if (r1 < rows) ln_load(vb, x, r1, x_stride, nvec, lane);
        ln_row(va, g, b, y, row, y_stride, D, nvec, lane, eps);
        if (r1 >= rows) break;
        const int r2 = r1 + stride;
        if (r2 < rows) ln_load(va, x, r2, x_stride, nvec, lane);
        ln_row(vb, g, b, y, r1, y_stride, D, nvec, lane, eps);
        if (r2 >= rows) break;
        row = r2;
    }
#endif
}

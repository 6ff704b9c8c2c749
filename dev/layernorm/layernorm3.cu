// layernorm.cu: LayerNorm over the last dimension, one warp per row.
//
//   y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * g + b,   var = mean((x - mean)^2)   (biased, divide by D)
//
// The row is held in registers (float4 per lane, LN_MAX_VEC of them), so the variance is a
// second pass over the row about a first estimate of its mean: no E[x^2] - E[x]^2, which loses
// everything on the residual-stream rows of trained GPT-2 whose values reach the thousands. c, the
// first estimate, comes from fp32 lane sums; then the deviations x - c are taken exactly (as a
// float32 pair), and their sum and squares (with what the fp32 squares drop) give md = mean - c
// and var = E[(x - c)^2] - md^2 in float64. The output is formed from the exact x - c, the
// unrounded scale rstd * g and the small terms, then rounded once: within about one float32 ulp
// of the float64 LayerNorm (the trained stream's rows of a few huge values keep their small ones).
// Conversions to and from float64 run at a quarter of the FP64 rate on sm_90: this kernel makes
// about one per four elements.
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

#ifndef LN_WARPS
#define LN_WARPS 4  // warps per block of 128 threads
#endif
#ifndef LN_MAX_VEC
#define LN_MAX_VEC 13  // float4 per lane: D up to 1664 (gpt2-xl: 1600)
#endif
#ifndef LN_DEPTH
// Rows a warp holds at once: 2, the one it works on and the next; or 3, two loaded ahead. gpt2block
// builds 3 where some warp takes 3 rows or more and LN_MAX_VEC is 4 to 6 (cuda_ops.layernorm): at 6
// the kernel then takes 128 registers (4 blocks per SM still fit) and measured 16.5 us against 16.8
// at 8192 x 768 (scripts/probe_layernorm_bound.py); at 3 ptxas spills, and wider rows would not fit.
#define LN_DEPTH 2
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

// d = x - c exactly, as d_hi + d_lo: d_hi the float32 difference, d_lo its rounding error (TwoSum,
// no assumption on which of x and c is larger).
__device__ __forceinline__ float ln_diff(float x, float c, float& lo) {
    const float hi = x - c;
    const float t = hi - x;
    lo = (x - (hi - t)) + (-c - t);
    return hi;
}

// One element of ln_lane_stats: returns d_hi = x - c, sets p = d_hi^2 rounded to fp32 (not
// contracted into a later add: l holds its rounding error) and adds to l that error plus 2 d_hi d_lo.
__device__ __forceinline__ float ln_dev(float x, float c, float& p, float& l) {
    float e;
    const float d = ln_diff(x, c, e);
    p = __fmul_rn(d, d);
    l += fmaf(d, d, -p) + 2.f * d * e;
    return d;
}

// The lane's share of the centred row's statistics about c, all over its live elements:
// sd = sum(d_hi) (fp32), sq = sum(d_hi^2) (fp32 four at a time, then float64), and lo, what the
// fp32 squares dropped: each product's rounding error (fma) plus 2 d_hi d_lo (fp32).
__device__ __forceinline__ void ln_lane_stats(const float4 (&v)[LN_MAX_VEC], float c, int nvec, int lane,
                                              double& sd, double& sq, double& lo) {
    float s = 0.f, l = 0.f;
    double q = 0.0;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        if (lane + 32 * i < nvec) {
            float px, py, pz, pw;
            const float dx = ln_dev(v[i].x, c, px, l), dy = ln_dev(v[i].y, c, py, l);
            const float dz = ln_dev(v[i].z, c, pz, l), dw = ln_dev(v[i].w, c, pw, l);
            s += (dx + dy) + (dz + dw);
            q += (double)((px + py) + (pz + pw));
        }
    }
    sd = (double)s;
    sq = q;
    lo = (double)l;
}

// One output element: (x - mean) * rstd * g + b with mean = c + m and rstd = r_hi + r_lo. x - c is
// taken exactly (ln_diff), rstd * g as an unrounded pair (s_hi + s_lo), and the small terms
// (b - m s, the rounding error of x - c, the low half of the scale) are added before the one
// rounding that matters, the last fma's: within about one float32 ulp of the float64 result.
__device__ __forceinline__ float ln_out(float x, float c, float m, float r_hi, float r_lo, float g, float b) {
    float d_lo;
    const float d = ln_diff(x, c, d_lo);
    const float s_hi = __fmul_rn(r_hi, g);  // not contracted: s_lo holds its rounding error
    const float s_lo = fmaf(r_lo, g, fmaf(r_hi, g, -s_hi));
    float t = fmaf(-m, s_hi, b);
    t = fmaf(d_lo, s_hi, t);
    t = fmaf(d, s_lo, t);
    return fmaf(d, s_hi, t);
}

// The row in v (one warp's registers, left unchanged) normalized -> y[row].
__device__ __forceinline__ void ln_row(const float4 (&v)[LN_MAX_VEC], const float* __restrict__ g,
                                       const float* __restrict__ b, float* __restrict__ y, int row,
                                       int y_stride, int D, int nvec, int lane, float eps) {
    // c: a first estimate of the mean from fp32 lane sums (added in float64); then, about c, the
    // deviations' sum and squares in one more warp sum (three float64 butterflies interleaved):
    // mean = c + md, var = E[(x - c)^2] - md^2, where md is small next to the row's spread, so
    // md^2 takes none of the variance's digits
    const float c = (float)(warp_sum((double)ln_lane_sum(v, nvec, lane)) / D);
    double sd, sq, lo;
    ln_lane_stats(v, c, nvec, lane, sd, sq, lo);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sd += __shfl_xor_sync(0xffffffffu, sd, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
        lo += __shfl_xor_sync(0xffffffffu, lo, o);
    }
    const double md = sd / D;
    const double rstd = 1.0 / sqrt(fmax((sq + lo) / D - md * md, 0.0) + (double)eps);
    const float m = (float)md;
    const float r_hi = (float)rstd;
    const float r_lo = (float)(rstd - (double)r_hi);

    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * y_stride);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c4 = lane + 32 * i;
        if (c4 < nvec) {
            const float4 gg = __ldg(g4 + c4), bv = __ldg(b4 + c4);
            float4 o;
            o.x = ln_out(v[i].x, c, m, r_hi, r_lo, gg.x, bv.x);
            o.y = ln_out(v[i].y, c, m, r_hi, r_lo, gg.y, bv.y);
            o.z = ln_out(v[i].z, c, m, r_hi, r_lo, gg.z, bv.z);
            o.w = ln_out(v[i].w, c, m, r_hi, r_lo, gg.w, bv.w);
            ln_st4(yr + c4, o);
        }
    }
}

// At least 4 blocks of 4 warps an SM (at most 128 registers) where a row fits 10 float4 a lane: without
// it ptxas keeps the 6-float4 one-ahead build (gpt2's width, prefill and solve()) at 80 registers and
// spills; the widest rows (gpt2-xl's 13 float4) take about 157 registers and 3 blocks.
#define LN_MIN_BLOCKS (LN_MAX_VEC <= 10 ? 4 : 1)

extern "C" __global__ void __launch_bounds__(32 * LN_WARPS, LN_MIN_BLOCKS) layernorm_f32(
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

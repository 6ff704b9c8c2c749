// layernorm.cu: LayerNorm over the last dimension, one warp per row.
//
//   y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * g + b,   var = mean((x - mean)^2)   (biased, divide by D)
//
// The row is held in registers (float4 per lane, LN_MAX_VEC of them), so the variance is a
// second pass over the row shifted by its mean: no E[x^2] - E[x]^2, which loses everything on the
// residual-stream rows of trained GPT-2 whose values reach the thousands. The mean is found in
// two steps: c from fp32 lane sums, then m, the mean of x - c, summed beside the squares of x - c
// (var = E[(x - c)^2] - m^2: c is within the fp32 sums' rounding of the mean, so m is small next to
// the row's spread and m^2 takes none of the variance's digits); both subtractions are made on the
// registers, so x - mean is x - c - m with m small (a row whose mean is 2000 keeps its
// small deviations). Each lane sums the values in fp32 and the squares in fp32 four at a time, then
// in float64; the 32 lane sums are added in float64. Conversions to and from float64 run at a
// quarter of the FP64 rate on sm_90: this kernel makes one per four elements (it made four per
// element before, and was slower).
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
// loaded without allocating in L1 and y stored streaming (.cs: evict-first in L2): at 8192 x 768
// 16.55 -> 15.60 us, each hint about half of it (docs/PERFORMANCE.md version 22, scripts/
// tune_layernorm.py --hints). A row is read by the warp that writes it, before it writes it, so the
// non-coherent load is safe with y = x. The other choices, for measuring:
#ifndef LN_LOAD_HINT
#define LN_LOAD_HINT 1  // x: 0 plain; 1 .nc.L1::no_allocate; 2 .nc.L1::no_allocate.L2::256B; 3 .cs
#endif
#ifndef LN_STORE_HINT
#define LN_STORE_HINT 1  // y: 0 plain; 1 .cs; 2 .L1::no_allocate; 3 .L1::no_allocate with an L2 evict-first policy
#endif

__device__ __forceinline__ float4 ln_ld4(const float4* p) {
    float4 v;
#if LN_LOAD_HINT == 1
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
#elif LN_LOAD_HINT == 2
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
#elif LN_LOAD_HINT == 3
    asm volatile("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
#else
    v = *p;
#endif
    return v;
}

__device__ __forceinline__ void ln_st4(float4* p, const float4& v) {
#if LN_STORE_HINT == 1
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
#elif LN_STORE_HINT == 2
    asm volatile("st.global.L1::no_allocate.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w) : "memory");
#elif LN_STORE_HINT == 3
    const unsigned long long pol = l2_policy(false);
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "f"(v.x),
                 "f"(v.y), "f"(v.z), "f"(v.w), "l"(pol) : "memory");
#else
    *p = v;
#endif
}

// v = row `row` of x, lane's share: float4 number lane + 32 i (zero past the row's end).
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

// The statistics in two warp sums (1) or three (0, for measuring): after the first, whose mean c is the
// fp32 lane sums' (within their rounding of the row's mean), the second adds the deviations v - c and
// their squares side by side (two float64 butterflies interleaved) and takes var = E[(v - c)^2] - m^2,
// m = E[v - c], whose m^2 is far below the variance's rounding; three put m first and square v - c - m.
// 8192 x 768 on the H200: 15.09-15.35 us with three, 14.91-14.93 with two (docs/PERFORMANCE.md, version 34).
#ifndef LN_STATS_TWO_SUMS
#define LN_STATS_TWO_SUMS 1
#endif

// The row in v (one warp's registers) normalized -> y[row]; v is used up (left centred).
__device__ __forceinline__ void ln_row(float4 (&v)[LN_MAX_VEC], const float* __restrict__ g,
                                       const float* __restrict__ b, float* __restrict__ y, int row,
                                       int y_stride, int D, int nvec, int lane, float eps) {
    // mean = c + m: c a first estimate (fp32 lane sums), m the mean of v - c, which is small
    // next to the row's spread, so its rounding to fp32 costs nothing visible
    const float c = (float)(warp_sum((double)ln_lane_sum(v, nvec, lane)) / D);
    ln_shift(v, c, nvec, lane);
    float rstd;
    if (LN_STATS_TWO_SUMS) {
        // squares summed in fp32 four at a time, then in float64 (as below), beside the deviations
        double sq = 0.0;
#pragma unroll
        for (int i = 0; i < LN_MAX_VEC; ++i)
            if (lane + 32 * i < nvec)
                sq += (double)((v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w));
        double sd = (double)ln_lane_sum(v, nvec, lane);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {  // warp_sum of both, interleaved
            sd += __shfl_xor_sync(0xffffffffu, sd, o);
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
        }
        const double md = sd / D;
        const float m = (float)md;
        ln_shift(v, m, nvec, lane);  // v = x - mean
        rstd = (float)(1.0 / sqrt(fmax(sq / D - md * md, 0.0) + (double)eps));
    } else {
        const float m = (float)(warp_sum((double)ln_lane_sum(v, nvec, lane)) / D);
        ln_shift(v, m, nvec, lane);  // v = x - mean
        // squares summed in fp32 four at a time, then in float64: a row of a few huge values among
        // many small ones (the trained residual stream) keeps the small ones' share of the variance
        double sq = 0.0;
#pragma unroll
        for (int i = 0; i < LN_MAX_VEC; ++i)
            if (lane + 32 * i < nvec)
                sq += (double)((v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w));
        rstd = (float)(1.0 / sqrt(warp_sum(sq) / D + (double)eps));
    }

    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * y_stride);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c4 = lane + 32 * i;
        if (c4 < nvec) {
            const float4 gg = __ldg(g4 + c4), bv = __ldg(b4 + c4);
            float4 o;
            o.x = fmaf(v[i].x * rstd, gg.x, bv.x);
            o.y = fmaf(v[i].y * rstd, gg.y, bv.y);
            o.z = fmaf(v[i].z * rstd, gg.z, bv.z);
            o.w = fmaf(v[i].w * rstd, gg.w, bv.w);
            ln_st4(yr + c4, o);
        }
    }
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

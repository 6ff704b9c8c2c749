// layernorm.cu: LayerNorm over the last dimension, one warp per row.
//
//   y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * g + b,   var = mean((x - mean)^2)   (biased, divide by D)
//
// The row is held in registers (float4 per lane, LN_MAX_VEC of them), so the variance is a
// true second pass over (x - mean): no E[x^2] - E[x]^2, which loses everything on the
// residual-stream rows of trained GPT-2 whose values reach the thousands. The row's sums,
// mean and 1/std are float64 (a few FP64 operations per element, nothing next to the memory
// traffic): a row whose mean is 2000 keeps its small deviations, and each output takes only
// the rounding of the normalized value and of its final fma with g and b.
//
// Launch: grid = ceil(rows / LN_WARPS), block = 32 * LN_WARPS, no dynamic shared memory.
// Requires D % 4 == 0, D <= 128 * LN_MAX_VEC, 16-byte aligned x, y, g, b (row starts too).
#include "common.cuh"

#ifndef LN_WARPS
#define LN_WARPS 4  // rows per block of 128 threads
#endif
#ifndef LN_MAX_VEC
#define LN_MAX_VEC 13  // float4 per lane: D up to 1664 (gpt2-xl: 1600)
#endif

extern "C" __global__ void __launch_bounds__(32 * LN_WARPS) layernorm_f32(
    const float* __restrict__ x,  // [rows, D], row stride x_stride
    const float* __restrict__ g,  // [D]
    const float* __restrict__ b,  // [D]
    float* __restrict__ y,        // [rows, D], row stride y_stride
    int rows, int D, int x_stride, int y_stride, float eps) {
    const int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)row * x_stride);
    const int nvec = D >> 2;

    float4 v[LN_MAX_VEC];
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c = lane + 32 * i;
        v[i] = c < nvec ? xr[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i)
        sum += ((double)v[i].x + (double)v[i].y) + ((double)v[i].z + (double)v[i].w);
    const double mean = warp_sum(sum) / D;

    double sq = 0.0;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        if (lane + 32 * i < nvec) {
            const double a = v[i].x - mean, bb = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
            sq += (a * a + bb * bb) + (c * c + d * d);
        }
    }
    const double rstd = 1.0 / sqrt(warp_sum(sq) / D + (double)eps);

    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * y_stride);
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c = lane + 32 * i;
        if (c < nvec) {
            const float4 gg = __ldg(g4 + c), bv = __ldg(b4 + c);
            float4 o;
            o.x = fmaf((float)((v[i].x - mean) * rstd), gg.x, bv.x);
            o.y = fmaf((float)((v[i].y - mean) * rstd), gg.y, bv.y);
            o.z = fmaf((float)((v[i].z - mean) * rstd), gg.z, bv.z);
            o.w = fmaf((float)((v[i].w - mean) * rstd), gg.w, bv.w);
            yr[c] = o;
        }
    }
}

// gemv.cu: the decode-step products, a few rows (M <= GEMV_MAX_M sequences) against a weight
// matrix read once, at memory speed. Weights are float32 or bf16 (stored as the upper 16 bits
// of a float32, uint16 [same shape]); accumulation is float32 in every case.
//
//   gemv_{f32,bf16}_{bias,bias_gelu,bias_residual}: y[M,N] = epi(x[M,K] @ W[K,N] + bias[N])
//     epilogues as in gemm.cu (bias_residual: y = R + xW + bias, R may be the same buffer as y).
//     (const float* x, const W* w, const float* bias, const float* R, float* y,
//      float* ws, unsigned* counters, int M, int N, int K, int k_per_split)
//     x [M, K], w [K, N] (float or unsigned short), bias [N], R [M, N] (bias_residual only, else NULL),
//     y [M, N]; ws [gridDim.y, M, N] float scratch and counters [gridDim.x] unsigned, both used
//     only when gridDim.y > 1 (else NULL is fine); the counters must be zero before the first
//     launch and are left zero by every launch.
//     Requirements: 1 <= M <= GEMV_MAX_M; N % GEMV_CPT == 0 (4 for f32, 8 for bf16); w 16-byte aligned.
//   gemv_{f32,bf16}_nt: y[M,V] = x[M,K] @ w[V,K]^T (the tied LM head over wte)
//     (const float* x, const W* w, float* y, int M, int V, int K)
//     Requirements: 1 <= M <= GEMV_MAX_M; K % 4 == 0 (f32) or K % 8 == 0 (bf16); x and w 16-byte aligned.
//
// Launch recipe (256 threads per block, no dynamic shared memory):
//   gemv_*_{bias,bias_gelu,bias_residual}:
//     grid = (ceil(N / COLS), splits, 1), COLS = 8 * GEMV_CPT (32 columns f32, 64 bf16),
//     k_per_split = a multiple of 32 with splits = ceil(K / k_per_split) (gpt2block's wrapper picks
//     splits so that grid.x * splits is about 4 blocks per SM; any choice gives a correct result).
//     Split-K reduction: each block of a column strip writes its partial sums to ws; the last to
//     finish (counted on counters[blockIdx.x]) adds the strip's partials in split order 0, 1, ...
//     and applies the epilogue. The order is fixed, so results repeat bit for bit.
//   gemv_*_nt: grid = (ceil(V / 16), 1, 1): 8 warps, each owning 2 vocabulary rows.

#include "common.cuh"

#define GEMV_MAX_M 8
#define GEMV_THREADS 256
#define GEMV_TPR 8                            // threads across one weight row's strip
#define GEMV_RPP (GEMV_THREADS / GEMV_TPR)    // weight rows per pass: 32
#define GEMV_UNROLL 4                         // 16-byte weight loads in flight per thread
#define GEMV_NT_ROWS 2                        // vocabulary rows per warp (nt)

#define GEMV_EPI_BIAS 0
#define GEMV_EPI_GELU 1
#define GEMV_EPI_RESIDUAL 2

// 16 bytes of weights as floats: 4 f32 or 8 bf16 (bf16 -> f32 is a 16-bit shift).
template <bool BF16>
struct GemvW;

template <>
struct GemvW<false> {
    typedef float T;
    static constexpr int CPT = 4;
    __device__ static __forceinline__ void load(const float* p, float (&w)[4]) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p));
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }
};

template <>
struct GemvW<true> {
    typedef unsigned short T;
    static constexpr int CPT = 8;
    __device__ static __forceinline__ void load(const unsigned short* p, float (&w)[8]) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[2 * i] = __uint_as_float(u[i] << 16);
            w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
};

template <int EPI>
__device__ __forceinline__ float gemv_epi(float acc, const float* bias, const float* R, long long idx, int col) {
    float v = acc + __ldg(bias + col);
    if (EPI == GEMV_EPI_GELU) v = gelu_tanh(v);
    if (EPI == GEMV_EPI_RESIDUAL) v += R[idx];
    return v;
}

// ---------------------------------------------------------------------------------------------
// y = epi(x @ W + bias). Block (strip, split): columns strip*COLS .. +COLS, rows of W in
// [split * k_per_split, min(K, (split + 1) * k_per_split)). Thread: 32 rows apart, CPT columns.

template <bool BF16, int EPI>
__device__ __forceinline__ void gemv_body(const float* __restrict__ x, const typename GemvW<BF16>::T* __restrict__ w,
                                          const float* __restrict__ bias, const float* R, float* y,
                                          float* __restrict__ ws, unsigned* __restrict__ counters, int M, int N,
                                          int K, int k_per_split) {
    constexpr int CPT = GemvW<BF16>::CPT;
    constexpr int COLS = GEMV_TPR * CPT;
    constexpr int WARPS = GEMV_THREADS / 32;
    __shared__ float red[WARPS][GEMV_MAX_M][COLS];  // per-warp partial sums
    __shared__ bool is_last;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int strip = blockIdx.x, split = blockIdx.y, nsplit = gridDim.y;
    const int cg = tid % GEMV_TPR, r = tid / GEMV_TPR;
    const int col = strip * COLS + cg * CPT;
    const bool col_ok = col < N;  // N % CPT == 0: the thread's CPT columns are all in or all out
    const int kb = split * k_per_split;
    const int ke = min(K, kb + k_per_split);

    float acc[GEMV_MAX_M][CPT];
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; ++m)
#pragma unroll
        for (int c = 0; c < CPT; ++c) acc[m][c] = 0.0f;

    for (int k = kb + r; k < ke; k += GEMV_RPP * GEMV_UNROLL) {
        float wv[GEMV_UNROLL][CPT];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {  // all loads first: GEMV_UNROLL in flight
            const int ku = k + u * GEMV_RPP;
            if (col_ok && ku < ke) {
                GemvW<BF16>::load(w + (long long)ku * N + col, wv[u]);
            } else {
#pragma unroll
                for (int c = 0; c < CPT; ++c) wv[u][c] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; ++u) {
            const int ku = k + u * GEMV_RPP;
            if (ku >= ke) break;
#pragma unroll
            for (int m = 0; m < GEMV_MAX_M; ++m) {
                if (m >= M) break;
                const float xv = __ldg(x + (long long)m * K + ku);
#pragma unroll
                for (int c = 0; c < CPT; ++c) acc[m][c] = fmaf(xv, wv[u][c], acc[m][c]);
            }
        }
    }

    // Sum over the 4 row groups of each warp (lanes cg, cg + 8, cg + 16, cg + 24), then over warps.
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; ++m) {
        if (m >= M) break;
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
            float v = acc[m][c];
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (lane < GEMV_TPR) red[warp][m][cg * CPT + c] = v;
        }
    }
    __syncthreads();

    if (nsplit == 1) {
        for (int i = tid; i < M * COLS; i += GEMV_THREADS) {
            const int m = i / COLS, c = i % COLS, n = strip * COLS + c;
            if (n >= N) continue;
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < WARPS; ++q) s += red[q][m][c];
            const long long idx = (long long)m * N + n;
            y[idx] = gemv_epi<EPI>(s, bias, R, idx, n);
        }
        return;
    }

    // Split-K: publish this block's partial sums, then the strip's last block reduces them.
    for (int i = tid; i < M * COLS; i += GEMV_THREADS) {
        const int m = i / COLS, c = i % COLS, n = strip * COLS + c;
        if (n >= N) continue;
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < WARPS; ++q) s += red[q][m][c];
        ws[((long long)split * M + m) * N + n] = s;
    }
    __threadfence();  // the partials are visible device-wide before this block is counted
    __syncthreads();
    if (tid == 0) is_last = atomicAdd(counters + strip, 1u) == (unsigned)(nsplit - 1);
    __syncthreads();
    if (!is_last) return;
    __threadfence();  // order the partial reads after the count
    for (int i = tid; i < M * COLS; i += GEMV_THREADS) {
        const int m = i / COLS, c = i % COLS, n = strip * COLS + c;
        if (n >= N) continue;
        float s = 0.0f;
        for (int q = 0; q < nsplit; ++q) s += __ldcg(ws + ((long long)q * M + m) * N + n);
        const long long idx = (long long)m * N + n;
        y[idx] = gemv_epi<EPI>(s, bias, R, idx, n);
    }
    if (tid == 0) counters[strip] = 0u;  // ready for the next launch (stream order)
}

// ---------------------------------------------------------------------------------------------
// y[M, V] = x[M, K] @ w[V, K]^T: each warp owns GEMV_NT_ROWS vocabulary rows, lanes stride
// along K with 16-byte loads, one warp_sum per (row, m).

template <bool BF16>
__device__ __forceinline__ void gemv_nt_body(const float* __restrict__ x, const typename GemvW<BF16>::T* __restrict__ w,
                                             float* __restrict__ y, int M, int V, int K) {
    constexpr int CPT = GemvW<BF16>::CPT;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int v0 = (blockIdx.x * (GEMV_THREADS / 32) + warp) * GEMV_NT_ROWS;
    if (v0 >= V) return;  // whole warp leaves together

    float acc[GEMV_NT_ROWS][GEMV_MAX_M];
#pragma unroll
    for (int j = 0; j < GEMV_NT_ROWS; ++j)
#pragma unroll
        for (int m = 0; m < GEMV_MAX_M; ++m) acc[j][m] = 0.0f;

    for (int k = lane * CPT; k < K; k += 32 * CPT) {
        float wv[GEMV_NT_ROWS][CPT];
#pragma unroll
        for (int j = 0; j < GEMV_NT_ROWS; ++j) {
            if (v0 + j < V) {
                GemvW<BF16>::load(w + (long long)(v0 + j) * K + k, wv[j]);
            } else {
#pragma unroll
                for (int c = 0; c < CPT; ++c) wv[j][c] = 0.0f;
            }
        }
#pragma unroll
        for (int m = 0; m < GEMV_MAX_M; ++m) {
            if (m >= M) break;
            float xv[CPT];
#pragma unroll
            for (int c = 0; c < CPT; c += 4) {
                const float4 q = __ldg(reinterpret_cast<const float4*>(x + (long long)m * K + k + c));
                xv[c] = q.x;
                xv[c + 1] = q.y;
                xv[c + 2] = q.z;
                xv[c + 3] = q.w;
            }
#pragma unroll
            for (int j = 0; j < GEMV_NT_ROWS; ++j)
#pragma unroll
                for (int c = 0; c < CPT; ++c) acc[j][m] = fmaf(xv[c], wv[j][c], acc[j][m]);
        }
    }

#pragma unroll
    for (int j = 0; j < GEMV_NT_ROWS; ++j) {
#pragma unroll
        for (int m = 0; m < GEMV_MAX_M; ++m) {
            if (m >= M) break;
            const float s = warp_sum(acc[j][m]);
            if (lane == 0 && v0 + j < V) y[(long long)m * V + v0 + j] = s;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The exported kernels.

#define GEMV_KERNEL(name, bf16, epi)                                                                           \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                                 \
        name(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w, const float* __restrict__ bias, \
             const float* R, float* y, float* __restrict__ ws, unsigned* __restrict__ counters, int M, int N,   \
             int K, int k_per_split) {                                                                         \
        gemv_body<bf16, epi>(x, w, bias, R, y, ws, counters, M, N, K, k_per_split);                            \
    }

#define GEMV_NT_KERNEL(name, bf16)                                                                         \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                             \
        name(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w, float* __restrict__ y, int M, \
             int V, int K) {                                                                               \
        gemv_nt_body<bf16>(x, w, y, M, V, K);                                                              \
    }

GEMV_KERNEL(gemv_f32_bias, false, GEMV_EPI_BIAS)
GEMV_KERNEL(gemv_f32_bias_gelu, false, GEMV_EPI_GELU)
GEMV_KERNEL(gemv_f32_bias_residual, false, GEMV_EPI_RESIDUAL)
GEMV_KERNEL(gemv_bf16_bias, true, GEMV_EPI_BIAS)
GEMV_KERNEL(gemv_bf16_bias_gelu, true, GEMV_EPI_GELU)
GEMV_KERNEL(gemv_bf16_bias_residual, true, GEMV_EPI_RESIDUAL)
GEMV_NT_KERNEL(gemv_f32_nt, false)
GEMV_NT_KERNEL(gemv_bf16_nt, true)

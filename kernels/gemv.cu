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
//   gemv_{f32,bf16}_nt[_ln][_<epilogue>]_m{1,2,4,8}: y[M,N] = epi(x'[M,K] @ w[N,K]^T (+ bias[N])), w
//     holding W transposed (the decode copies of the block matrices; wte for the tied LM head); the
//     suffix is the build for up to 1, 2, 4 or 8 tokens (M = 1, 2, 3-4, 5-8):
//       gemv_*_nt                  y = x @ w^T
//       gemv_*_nt_ln               y = LN(x) @ w^T                    (ln_f + LM head)
//       gemv_*_nt_ln_bias          y = LN(x) @ w^T + bias             (ln_1 + QKV)
//       gemv_*_nt_ln_bias_gelu     y = gelu(LN(x) @ w^T + bias)       (ln_2 + FC)
//       gemv_*_nt_bias_residual    y = R + x @ w^T + bias             (attention and MLP projections)
//       gemv_*_nt_bias, gemv_*_nt_bias_gelu   without the LayerNorm
//     (const float* x, const W* w, const float* bias, const float* R, float* y,
//      const float* ln_g, const float* ln_b, int M, int N, int K, float eps, int wpr)
//     x [M, K] contiguous, w [N, K], bias [N] / R [M, N] / ln_g, ln_b [K] where used (else NULL);
//     wpr: warps per row group, which split K between them (1, 2, 4 or 8; see the launch recipe).
//     Requirements: 1 <= M <= the build's MP; K % 4 == 0 (f32) or K % 8 == 0 (bf16); x, w, ln_g, ln_b
//     16-byte aligned.
//       gemv_*_nt_ln_bias_kv_m*    as _ln_bias (N = 3D, the QKV product of the decode step), and
//                                  each row's key and value also into the KV cache; extra arguments
//                                  (const int* seq, const int* pos, float* k_cache, float* v_cache,
//                                  long long batch_stride): see GemvKv.
//       gemv_*_nt_ln_m*            extra arguments (int* am_out, float* am_part_v, int* am_part_i,
//                                  int* am_counter, int* am_step, int* am_host_out): in the one-token
//                                  build (_m1), when am_out is not NULL, also the token's argmax
//                                  (GemvArgmax); the other builds take them and ignore them.
//     The nt kernels take part in programmatic dependent launch (common.cuh): they touch only
//     their weights (w, bias, ln_g, ln_b) before pdl_wait(), so those must not be written by any
//     kernel that may still be running (launches trigger early, so not only the one just before).
//
// Launch recipe:
//   gemv_*_{bias,bias_gelu,bias_residual}: 256 threads per block, no dynamic shared memory,
//     grid = (ceil(N / COLS), splits, 1), COLS = 8 * GEMV_CPT (32 columns f32, 64 bf16),
//     k_per_split = a multiple of 32 with splits = ceil(K / k_per_split) (gpt2block's wrapper picks
//     splits so that grid.x * splits is about 4 blocks per SM; any choice gives a correct result).
//     Split-K reduction: each block of a column strip writes its partial sums to ws; the last to
//     finish (counted on counters[blockIdx.x]) adds the strip's partials in split order 0, 1, ...
//     and applies the epilogue. The order is fixed, so results repeat bit for bit.
//   gemv_*_nt*: grid = (G, 1, 1) with 1 <= G, block = GEMV_NT_THREADS (256); the block's 8 warps form
//     8 / wpr row groups, group g of block b taking the R outputs starting at (8 / wpr) R b + R g,
//     then (8 / wpr) R G further, ..., its wpr warps splitting K; R = GemvNt<>::ROWS of the build
//     (2; 4 at 8 tokens for bf16 weights and for the float32 LM head, gemv_f32_nt_ln_m8; one bf16
//     token: GEMV_NT_ROWS_M1_BF16). gpt2block (gemv_nt_plan): the fewest wpr that give
//     ceil(N / ((8 / wpr) R)) >= 2 blocks per SM, G that count capped at the resident blocks
//     (GemvNt<>::MIN_BLOCKS per SM: 3; 2 at 4 rows; one token: its own knobs, which gpt2block's
//     gpt2block's cuda/build.py sets by the model's width). Any G and wpr give a correct result.
//     dynamic shared memory (M + 2) * K * 4 bytes for the _ln kernels (the normalized rows, then g
//     and b; above 48 KB with the static shared memory needs the opt-in attribute), else 0.

#include "common.cuh"
#include "mma.cuh"  // cp.async
#include "argmax.cuh"  // the LM head's argmax (gemv_*_nt_ln_m1)

// Build parameters (gpt2block/backends/cuda/build.py passes every one; the host plans its launches with
// the same values): GEMV_MAX_M tokens at most; the k-major kernels' GEMV_THREADS, GEMV_TPR threads across
// one weight row's strip and GEMV_UNROLL 16-byte weight loads in flight per thread.
#ifndef GEMV_MAX_M
#error "GEMV_MAX_M is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_THREADS
#error "GEMV_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_TPR
#error "GEMV_TPR is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_UNROLL
#error "GEMV_UNROLL is set by gpt2block/backends/cuda/build.py"
#endif
#define GEMV_RPP (GEMV_THREADS / GEMV_TPR)    // weight rows per pass

#define GEMV_EPI_BIAS 0
#define GEMV_EPI_GELU 1
#define GEMV_EPI_RESIDUAL 2
#define GEMV_EPI_NONE 3

// 16 bytes of weights as floats: 4 f32 or 8 bf16 (common.cuh, unpack16).
template <bool BF16>
struct GemvW;

template <>
struct GemvW<false> {
    typedef float T;
    static constexpr int CPT = 4;
    __device__ static __forceinline__ void load(const float* p, float (&w)[4]) {
        unpack16(__ldg(reinterpret_cast<const float4*>(p)), w);
    }
};

template <>
struct GemvW<true> {
    typedef unsigned short T;
    static constexpr int CPT = 8;
    __device__ static __forceinline__ void load(const unsigned short* p, float (&w)[8]) {
        unpack16(__ldg(reinterpret_cast<const uint4*>(p)), w);
    }
};

// The epilogue on values already loaded: acc + bias, then GELU or + the residual r.
template <int EPI>
__device__ __forceinline__ float gemv_epi_apply(float acc, float bias, float r) {
    float v = acc + bias;
    if (EPI == GEMV_EPI_GELU) v = gelu_tanh(v);
    if (EPI == GEMV_EPI_RESIDUAL) v += r;
    return v;
}

template <int EPI>
__device__ __forceinline__ float gemv_epi(float acc, const float* bias, const float* R, long long idx, int col) {
    return gemv_epi_apply<EPI>(acc, __ldg(bias + col), EPI == GEMV_EPI_RESIDUAL ? R[idx] : 0.0f);
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
// nt: y[M, N] = epi(x'[M, K] @ w[N, K]^T (+ bias)), w holding W transposed (each output reads one
// contiguous weight row: the decode layout, and the tied LM head over wte).
// Each warp owns GemvNt<>::ROWS (2 or 4) weight rows at a time, its lanes striding along K in 16-byte
// chunks (lane l takes chunks l, l + 32, ...), GEMV_NT_UNROLL (bf16: _BF16; float32 from 3 tokens on:
// _M4) chunks per row in flight; each row's token sums meet by halving shuffles (warp_sums), no
// barrier. Every kernel is built for MP = 1, 2, 4 and 8 tokens (suffix _m1 .. _m8; the wrapper takes
// the smallest MP >= M), its token loops unrolled without a branch on M, so that the activation
// loads of a piece go out together. Warps walk the row groups with a grid stride
// (the LM head has thousands; the per-layer matrices one or two per warp). Many small warps
// keep the loads in flight (bandwidth by occupancy, not by registers per thread).
// LN: x' = LayerNorm(x; ln_g, ln_b) of each row, staged in shared memory [M][K] by every block
// (gemv_ln_rows); otherwise x' = x read through the L1 cache.
// Programmatic dependent launch (common.cuh): the first batch of weights, the epilogue's bias and
// LayerNorm's g and b are loaded before pdl_wait(); x, R, the KV slots and y are touched after it.

// Build parameters (build.py): GEMV_NT_THREADS; weight rows per warp at a time (each x load serves
// them all): GEMV_NT_ROWS, at 8 tokens GEMV_NT_ROWS_M8_F32 / _M8_LM (the float32 LM head, gemv_f32_nt_ln) /
// _M8_BF16, at one bf16 token GEMV_NT_ROWS_M1_BF16 (by width); resident blocks per SM the registers must
// allow: GEMV_NT_MIN_BLOCKS, at one token GEMV_NT_MIN_BLOCKS_M1_BF16 / _M1_F32 (by width).
#ifndef GEMV_NT_THREADS
#error "GEMV_NT_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_ROWS
#error "GEMV_NT_ROWS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_ROWS_M8_F32
#error "GEMV_NT_ROWS_M8_F32 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_ROWS_M8_LM
#error "GEMV_NT_ROWS_M8_LM is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_ROWS_M8_BF16
#error "GEMV_NT_ROWS_M8_BF16 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_MIN_BLOCKS
#error "GEMV_NT_MIN_BLOCKS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_ROWS_M1_BF16
#error "GEMV_NT_ROWS_M1_BF16 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_MIN_BLOCKS_M1_BF16
#error "GEMV_NT_MIN_BLOCKS_M1_BF16 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMV_NT_MIN_BLOCKS_M1_F32
#error "GEMV_NT_MIN_BLOCKS_M1_F32 is set by gpt2block/backends/cuda/build.py"
#endif
#define GEMV_NT_WARPS (GEMV_NT_THREADS / 32)
#define GEMV_NT_UNROLL 3  // 16-byte chunks per row per lane in flight (float32 weights; 4 measured 2-5% slower, version 15)
#define GEMV_NT_UNROLL_M4 2  // float32 from 3 tokens on (3 and 4 measured slower at 8 tokens, version 14)
#define GEMV_NT_UNROLL_BF16 2  // bf16: 8 weights per chunk to unpack, so fewer chunks fit the registers

// Per build (MP tokens; bf16 weights or not; LM: the LM head, gemv_*_nt_ln): weight rows per warp
// at a time, 16-byte chunks per row per lane in flight, and the resident blocks per SM its registers
// must allow (2 at 4 rows; 3 otherwise: 4 spilled and lost 3% at 2 tokens and with bf16, version 15.
// One float32 token has its own knob: 4 blocks measured +1.3% in version 15, while the weight loads
// still came after pdl_wait; once they came before it, 3 blocks measured +3.1%, version 17; version 18
// chose both one-token builds' knobs by width, build.py's GEMV_NT_M1_*_BY_WIDTH).
template <int MP, bool BF16, bool LM>
struct GemvNt {
    static constexpr int ROWS = MP == 1 && BF16 ? GEMV_NT_ROWS_M1_BF16
                                : MP < 8 ? GEMV_NT_ROWS
                                : BF16   ? GEMV_NT_ROWS_M8_BF16
                                : LM     ? GEMV_NT_ROWS_M8_LM
                                         : GEMV_NT_ROWS_M8_F32;
    static constexpr int UNROLL = BF16 ? GEMV_NT_UNROLL_BF16 : MP >= 4 ? GEMV_NT_UNROLL_M4 : GEMV_NT_UNROLL;
    static constexpr int MIN_BLOCKS = ROWS >= 4           ? 2
                                      : MP == 1 && !BF16 ? GEMV_NT_MIN_BLOCKS_M1_F32
                                      : MP == 1          ? GEMV_NT_MIN_BLOCKS_M1_BF16
                                                         : GEMV_NT_MIN_BLOCKS;
    static constexpr bool LM_HEAD = LM;
    // each row's MP sums land on 32 / MP lanes (warp_sums), one row per lane of them
    static_assert(ROWS >= 1 && ROWS <= 32 / MP, "GemvNt: more rows per warp than lanes per token sum");
};

// The weights' L2 eviction priority in the one-token builds (_m1): evict-first for every weight load,
// except GEMV_LM_PIN_BYTES_{BF16,F32} bytes of the LM head's rows (gemv_*_nt_ln_m1), loaded evict-last, so
// that they stay in the L2 (60 MB on the H200) from one decode step to the next while the layers' weights
// stream past. gpt2 on the H200, tok/s (docs/PERFORMANCE.md, version 23): bf16 b1 +1.3% with 24 MB kept,
// fp32 b1 +2.2% with none kept. The 8-token builds lost 1.4% with it, so they keep the plain loads.
#define GEMV_LM_PIN_BYTES_BF16 (24ll << 20)
#define GEMV_LM_PIN_BYTES_F32 0ll
// Which of the LM head's rows are kept: as many row groups (ROWS rows) as the bytes allow, spread evenly
// over all of them (group g kept where floor((g + 1) P / G) > floor(g P / G), P of G kept), so that every
// pass of the grid over the rows reads part from the L2 and part from HBM, instead of the first passes
// from the L2 alone while HBM waits (the first P rows kept: gpt2 bf16 b1 0.3% slower, version 26).
__device__ __forceinline__ bool gemv_lm_keep(long long pin_bytes, int n0, int rows, int N, int K, int wbytes) {
    const long long groups = (N + rows - 1) / rows, g = n0 / rows;
    const long long kept = min(groups, pin_bytes / ((long long)rows * K * wbytes));
    return (g + 1) * kept / groups > g * kept / groups;
}
template <bool BF16>
struct GemvRaw;  // 16 raw bytes of weights, loaded by ld_pre_wait4 (common.cuh) so that the first
                 // batch is issued where it is written, before pdl_wait, not sunk past it; with
                 // POLICY, carrying the L2 eviction policy pol (l2_policy)
template <>
struct GemvRaw<false> {
    typedef float4 T;
    template <bool POLICY>
    __device__ static __forceinline__ float4 load(const void* p, unsigned long long pol) {
        return POLICY ? ld_pre_wait4(p, pol) : ld_pre_wait4(p);
    }
};
template <>
struct GemvRaw<true> {
    typedef uint4 T;
    template <bool POLICY>
    __device__ static __forceinline__ uint4 load(const void* p, unsigned long long pol) {
        return POLICY ? ld_pre_wait4u(p, pol) : ld_pre_wait4u(p);
    }
};

// The float64 sum and sum of squares of pieces first, first + step, ... of a row's K4 float4 in shared
// memory, added over the warp (every lane gets both): lane l of one warp taking pieces l, l + 32, ...
// (gemv_ln_rows), or thread t of the block pieces t, t + 256, ... (gemv_ln_row_block, the warp's share).
__device__ __forceinline__ void gemv_row_sums(const float4* row, int K4, int first, int step, double& s, double& q) {
    s = 0.0;
    q = 0.0;
    for (int k = first; k < K4; k += step) {
        const float4 v = row[k];
        const double a = v.x, b2 = v.y, c = v.z, d = v.w;
        s += (a + b2) + (c + d);
        q += (a * a + b2 * b2) + (c * c + d * d);
    }
    s = warp_sum(s);
    q = warp_sum(q);
}

// Rows 0 .. M-1 of x [M, K] into xs [M][K] as LayerNorm(x; g, b), warp w taking rows w, w + 8, ...:
// g and b are staged in shared memory before pdl_wait (gemv_ln_stage_gb: they are weights, so their
// round trip overlaps the kernel before). Each lane copies its 16-byte pieces of the row into shared
// memory (lane l: pieces l, l + 32, ...; cp.async, all in flight at once, so one round trip) and
// waits for its own copies; the warp adds the pieces' float64 sums (one pass for the sum and the sum
// of squares, which float64 keeps exact enough for rows in the thousands), and each lane normalizes
// the pieces it copied itself in float32 (ln_row_stats, ln_apply4: the mean as hi + lo, no float64
// division or conversion per element). Two block barriers: g and b landed, and the rows done.
// (Version 15; measured on gpt2 decode against the block-wide path it replaced, which staged x, g and
// b after pdl_wait, formed the sums one warp per row and normalized in float64 with the whole block:
// +7% at 1 token, +12% at 4, and at 8 tokens the float32 normalization alone +3.5%. A float32
// two-pass sum, the mean first and float64 only per piece, was 1.4% slower than the float64 sums.)
// xs: [M * K] floats, gbs: [2 * K] floats (g, then b).
__device__ __forceinline__ void gemv_ln_stage_gb(const float* __restrict__ g, const float* __restrict__ b, float* gbs,
                                                 int K) {
    const int K4 = K >> 2;
    float4* gbs4 = reinterpret_cast<float4*>(gbs);
    for (int i = threadIdx.x; i < 2 * K4; i += GEMV_NT_THREADS)
        cp_async16(gbs4 + i, i < K4 ? reinterpret_cast<const float4*>(g) + i : reinterpret_cast<const float4*>(b) + (i - K4), 16);
    cp_async_commit();
}

__device__ __forceinline__ void gemv_ln_rows(const float* __restrict__ x, const float* gbs, float* xs, int M, int K,
                                             float eps) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, K4 = K >> 2;
    const double inv_k = ln_inv_n(K);
    float4* xs4 = reinterpret_cast<float4*>(xs);
    const float4* gs4 = reinterpret_cast<const float4*>(gbs);
    const float4* bs4 = gs4 + K4;
    for (int m = warp; m < M; m += GEMV_NT_WARPS)
        for (int k = lane; k < K4; k += 32) cp_async16(xs4 + m * K4 + k, reinterpret_cast<const float4*>(x) + (long long)m * K4 + k, 16);
    cp_async_commit();
    cp_async_wait<0>();  // this thread's copies: its row pieces and its share of g and b
    __syncthreads();     // everyone's share of g and b
    for (int m = warp; m < M; m += GEMV_NT_WARPS) {
        float4* srow = xs4 + m * K4;
        double s, q;
        gemv_row_sums(srow, K4, lane, 32, s, q);
        const LnRow st = ln_row_stats(s, q, inv_k, eps);
        for (int k = lane; k < K4; k += 32) srow[k] = ln_apply4(srow[k], st, gs4[k], bs4[k]);
    }
    __syncthreads();
}

// One token (the _m1 builds): the whole block shares the row instead of one warp. Thread t copies pieces
// t, t + 256, ... of x into xs (cp.async) and adds their float64 sums; each warp's sums go to shared
// memory, every thread adds the GEMV_NT_WARPS of them in warp order (so every thread forms the same
// statistics) and normalizes its own pieces. gemv_ln_rows' warp 0 walks K / 128 pieces per lane in a
// dependent chain while the other warps wait: at D = 768 in the bf16 decode step its statistics took
// 0.64 us and the normalization 0.36 us after x had landed (docs/PERFORMANCE.md, version 24).
// Two block barriers, as there: the warps' sums with g and b landed, and the row done.
// The width the one-token build's LayerNorm is built for (GEMV_LN_K > 0; gpt2block: every LayerNorm launch's K,
// the model's n_embd): its loops over the row's pieces then have a known trip count (at most one piece a
// thread up to K = 1024), so no loop is left on the path from x's arrival to the products. A build with
// GEMV_LN_K > 0 takes only LayerNorm launches of K == GEMV_LN_K (the host's contract); 0 takes any K. The
// same pieces, sums and order either way, so the same bits.
#ifndef GEMV_LN_K
#error "GEMV_LN_K is set by gpt2block/backends/cuda/build.py"
#endif
template <int KC>  // KC > 0: K == KC
__device__ __forceinline__ void gemv_ln_row_block_k(const float* __restrict__ x, const float* gbs, float* xs, int K_,
                                                    float eps) {
    const int K = KC > 0 ? KC : K_;
    __shared__ double part[GEMV_NT_WARPS][2];  // each warp's sum and sum of squares
    const int tid = threadIdx.x, warp = tid >> 5, K4 = K >> 2;
    float4* xs4 = reinterpret_cast<float4*>(xs);
    const float4* gs4 = reinterpret_cast<const float4*>(gbs);
    const float4* bs4 = gs4 + K4;
    for (int k = tid; k < K4; k += GEMV_NT_THREADS) cp_async16(xs4 + k, reinterpret_cast<const float4*>(x) + k, 16);
    cp_async_commit();
    cp_async_wait<0>();  // this thread's pieces and its share of g and b
    double s, q;
    gemv_row_sums(xs4, K4, tid, GEMV_NT_THREADS, s, q);
    if ((tid & 31) == 0) {
        part[warp][0] = s;
        part[warp][1] = q;
    }
    __syncthreads();  // the warps' sums, and everyone's share of g and b
    s = 0.0;
    q = 0.0;
#pragma unroll
    for (int w = 0; w < GEMV_NT_WARPS; ++w) {
        s += part[w][0];
        q += part[w][1];
    }
    const LnRow st = ln_row_stats(s, q, ln_inv_n(K), eps);
    for (int k = tid; k < K4; k += GEMV_NT_THREADS) xs4[k] = ln_apply4(xs4[k], st, gs4[k], bs4[k]);
    __syncthreads();
}
__device__ __forceinline__ void gemv_ln_row_block(const float* __restrict__ x, const float* gbs, float* xs, int K,
                                                  float eps) {
    gemv_ln_row_block_k<GEMV_LN_K>(x, gbs, xs, K, eps);
}

// The KV-cache destination of the _kv kernels: output n of row m in [D, 2D) is key n - D of
// token m, in [2D, 3D) its value; they go to k / v + seq[m] * batch_stride + pos[m] * D as well.
struct GemvKv {
    const int* seq;  // [M] cache row of each token
    const int* pos;  // [M] position of each token
    float* k;        // this layer's keys:   [batch][n_ctx, D] at batch_stride
    float* v;        // this layer's values: the same
    long long batch_stride;
    int D;
};

// The LM head's own argmax (gemv_*_nt_ln_m1 with out != NULL; the greedy decode step at batch 1,
// where it saves the argmax kernel's launch and boundary): the token's first index of its
// largest logit (argmax.cuh), as argmax_rows_f32 gives it from the stored logits. Every lane keeps
// the best of the outputs it stores; the block's best per token goes to part_v / part_i [M, G];
// the block that takes the last ticket on *counter (and puts it back to zero) reduces the G
// partials of each token and writes out[m] (and host_out, step: argmax_write). The pairs are
// totally ordered, so the winner does not depend on which block finishes last.
struct GemvArgmax {
    int* out;       // [M] the winners, or NULL: no argmax (then the rest is unused)
    float* part_v;  // [M, gridDim.x] each block's best value per token
    int* part_i;    // [M, gridDim.x] and its index
    int* counter;   // [1] zero before the launch, left zero
    int* step;      // [4, M] a decode step's ints to move on (argmax_write), or NULL
    int* host_out;  // [M] mapped host memory, or NULL
};

// The block's end of the argmax: lane l holds the best of token l / (32 / MP)'s outputs it stored.
template <int MP>
__device__ __forceinline__ void gemv_argmax_finish(const GemvArgmax am, float best_v, int best_i, int M, int lane,
                                                   int warp) {
    constexpr int LPS = 32 / MP;  // lanes per token (warp_sums' layout)
    __shared__ float sv[GEMV_NT_WARPS * 8];  // [warp][token], then argmax_block's scratch
    __shared__ int si[GEMV_NT_WARPS * 8];
    __shared__ int is_last;
    argmax_lanes(best_v, best_i, LPS);  // over the token's lanes
    const int e_m = lane / LPS;
    if (lane % LPS == 0 && e_m < M) { sv[warp * MP + e_m] = best_v; si[warp * MP + e_m] = best_i; }
    __syncthreads();
    const int G = gridDim.x;
    if (threadIdx.x < M) {  // token m = threadIdx.x: the best over the warps, in warp order
        const int m = threadIdx.x;
        float bv = NEG_INF_F32;
        int bi = ARGMAX_NONE;
        for (int q = 0; q < GEMV_NT_WARPS; ++q)
            if (argmax_better(sv[q * MP + m], si[q * MP + m], bv, bi)) { bv = sv[q * MP + m]; bi = si[q * MP + m]; }
        am.part_v[(long long)m * G + blockIdx.x] = bv;
        am.part_i[(long long)m * G + blockIdx.x] = bi;
        __threadfence();  // the partials visible device-wide before the ticket is taken
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int ticket = atomicAdd(am.counter, 1);
        is_last = ticket == G - 1;
        if (is_last) *am.counter = 0;  // ready for the next launch
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();  // order the partials' reads after the ticket
    for (int m = 0; m < M; ++m) {
        float bv = NEG_INF_F32;
        int bi = ARGMAX_NONE;
        for (int q = threadIdx.x; q < G; q += GEMV_NT_THREADS) {
            const float qv = __ldcg(am.part_v + (long long)m * G + q);
            const int qi = __ldcg(am.part_i + (long long)m * G + q);
            if (argmax_better(qv, qi, bv, bi)) { bv = qv; bi = qi; }
        }
        argmax_block(bv, bi, sv, si);
        if (threadIdx.x == 0) argmax_write(am.out, am.step, am.host_out, m, M, bi);
    }
}

// One token's row sums (HALVE in gemv_nt_body): a lane's ROWS partial sums fold together by halving
// shuffles, warp_sums<ROWS> (ROWS - 1 + 5 - log2 ROWS shuffles: 6 at 4 rows, 5 at 2), instead of one
// warp_sum of 5 shuffles per row; gpt2 bf16 b1 +2.2% (docs/PERFORMANCE.md, version 25).
template <bool BF16, int EPI, bool LN, bool KV, int MP, bool ARGMAX = false>
__device__ __forceinline__ void gemv_nt_body(const float* __restrict__ x, const typename GemvW<BF16>::T* __restrict__ w,
                                             const float* __restrict__ bias, const float* R, float* y,
                                             const float* __restrict__ ln_g, const float* __restrict__ ln_b,
                                             int M, int N, int K, float eps, int wpr, GemvKv kv,
                                             GemvArgmax am = GemvArgmax{}) {
    constexpr int CPT = GemvW<BF16>::CPT;
    typedef GemvNt<MP, BF16, LN && EPI == GEMV_EPI_NONE> Build;
    constexpr int ROWS = Build::ROWS;  // weight rows per warp at a time
    constexpr int STEP = 32 * CPT;  // K covered by one chunk of every lane
    // float32 weights: 2 chunks in flight from 3 tokens on, whose activations take the registers
    constexpr int UNROLL = Build::UNROLL;
    // Tokens in blocks of MB (32 registers of activations: 8 float32 pieces, 4 bf16), each block's
    // loads issued together before its FMAs. Rows past M - 1 repeat row M - 1 (their sums are
    // formed and never stored), so that no load waits behind a branch on M.
    constexpr int MB = MP * CPT <= 32 ? MP : 32 / CPT;
    typedef GemvRaw<BF16> Raw;
    extern __shared__ float4 gemv_smem4[];
    float* xs = reinterpret_cast<float*>(gemv_smem4);  // LN: [M][K]
    __shared__ float red[GEMV_NT_WARPS][32];  // wpr > 1: each warp's sums, lane-indexed

    // The block's warps form GEMV_NT_WARPS / wpr groups; group g takes rows n_blk + ROWS g .. + ROWS - 1, and
    // its wpr warps split K into slices of k_span (whole chunks), added in slice order.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp / wpr, slice = warp - group * wpr;
    const int rows_blk = (GEMV_NT_WARPS / wpr) * ROWS;
    const int k_span = (((K + wpr - 1) / wpr + CPT - 1) / CPT) * CPT;
    const int k_lo = slice * k_span, k_hi = min(K, k_lo + k_span);
    typename Raw::T wv[UNROLL][ROWS];
    const typename GemvW<BF16>::T* wrow[ROWS];
    constexpr bool POLICY = MP == 1;
    unsigned long long wpol = 0;  // POLICY: this row group's L2 eviction policy (l2_policy)
    auto load_batch = [&](int k0) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int k = k0 + u * STEP;
            if (k < k_hi) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) wv[u][r] = Raw::template load<POLICY>(wrow[r] + k, wpol);
            }
        }
    };
    auto set_rows = [&](int n0) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) wrow[r] = w + (long long)min(n0 + r, N - 1) * K;  // >= N: unused
        if (POLICY)
            wpol = l2_policy(Build::LM_HEAD && gemv_lm_keep(BF16 ? GEMV_LM_PIN_BYTES_BF16 : GEMV_LM_PIN_BYTES_F32,
                                                            n0, ROWS, N, K, BF16 ? 2 : 4));
    };

    // This lane's output in a row group: row n0 + e_r, token e_m (each row's MP sums land on lanes
    // by warp_sums, below). Its epilogue's inputs are loaded before the arithmetic, so that no round
    // trip is left at the end: the bias before pdl_wait (a weight), the residual and the KV cache
    // slot after it (written by the kernels before).
    // One token (HALVE, above): row r's sum lands on lanes r * LPR .. + LPR - 1, and the first of them
    // stores it.
    constexpr bool HALVE = MP == 1 && ROWS > 1;
    constexpr int LPR = HALVE ? 32 / ROWS : 1;  // HALVE: lanes per row sum
    constexpr int LPS = 32 / MP;  // lanes per sum
    const int e_r = HALVE ? lane / LPR : lane % LPS, e_m = lane / LPS;
    const bool e_own = lane % LPR == 0;  // the lane that stores its row (every one without HALVE)
    float e_bias = 0.0f, e_res = 0.0f;
    auto epi_bias = [&](int n0) {
        if (EPI != GEMV_EPI_NONE && e_r < ROWS && n0 + e_r < N) e_bias = ld_pre_wait(bias + n0 + e_r);
    };
    auto epi_res = [&](int n0) {
        if (EPI == GEMV_EPI_RESIDUAL && slice == 0 && e_r < ROWS && e_m < M && n0 + e_r < N)
            e_res = R[(long long)e_m * N + n0 + e_r];
    };

    pdl_trigger();
    const int first = blockIdx.x * rows_blk;
    set_rows(first + group * ROWS);
    load_batch(k_lo + lane * CPT);  // weights only: before the wait
    epi_bias(first + group * ROWS);
    if (LN) gemv_ln_stage_gb(ln_g, ln_b, xs + M * K, K);
    pdl_wait();
    epi_res(first + group * ROWS);
    long long e_kv = 0;  // KV: token e_m's cache row and position, as an offset
    if (KV && e_m < M) e_kv = kv.seq[e_m] * kv.batch_stride + (long long)kv.pos[e_m] * kv.D;
    if (LN) {  // the whole block
        if (MP == 1)
            gemv_ln_row_block(x, xs + K, xs, K, eps);
        else
            gemv_ln_rows(x, xs + M * K, xs, M, K, eps);
    }

    float best_v = NEG_INF_F32;  // ARGMAX: the best of this lane's stored outputs (token e_m)
    int best_i = ARGMAX_NONE;
    for (int n_blk = first; n_blk < N; n_blk += gridDim.x * rows_blk) {  // the same trip count in every warp
        const int n0 = n_blk + group * ROWS;
        if (n_blk != first) {
            set_rows(n0);
            load_batch(k_lo + lane * CPT);
            epi_bias(n0);
            epi_res(n0);
        }
        float acc[ROWS][MP];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int m = 0; m < MP; ++m) acc[r][m] = 0.0f;
        for (int k0 = k_lo + lane * CPT;;) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int k = k0 + u * STEP;
                if (k >= k_hi) break;
                float wf[ROWS][CPT];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) unpack16(wv[u][r], wf[r]);
#pragma unroll
                for (int m0 = 0; m0 < MP; m0 += MB) {
                    float4 q[MB][CPT / 4];
#pragma unroll
                    for (int m = 0; m < MB; ++m) {
                        const float* xm = (LN ? xs : x) + (long long)min(m0 + m, M - 1) * K + k;
#pragma unroll
                        for (int c = 0; c < CPT; c += 4)
                            q[m][c / 4] = LN ? *reinterpret_cast<const float4*>(xm + c)
                                             : __ldg(reinterpret_cast<const float4*>(xm + c));
                    }
#pragma unroll
                    for (int m = 0; m < MB; ++m)
#pragma unroll
                        for (int c = 0; c < CPT; c += 4)
#pragma unroll
                            for (int r = 0; r < ROWS; ++r) {
                                float& a = acc[r][m0 + m];
                                a = fmaf(q[m][c / 4].x, wf[r][c], a);
                                a = fmaf(q[m][c / 4].y, wf[r][c + 1], a);
                                a = fmaf(q[m][c / 4].z, wf[r][c + 2], a);
                                a = fmaf(q[m][c / 4].w, wf[r][c + 3], a);
                            }
                }
            }
            k0 += UNROLL * STEP;
            if (k0 - lane * CPT >= k_hi) break;  // the warp's next batch would start past its slice
            load_batch(k0);
        }

        // HALVE: lane l gets row l / LPR's sum. Otherwise each row's MP sums by halving shuffles
        // (warp_sums): lane l gets token l / LPS's sum of every row, and keeps row r = l % LPS's
        // (r < ROWS <= LPS)
        float mine = 0.0f;
        if constexpr (HALVE) {
            float v[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) v[r] = acc[r][0];
            mine = warp_sums<ROWS>(v, lane);
        } else {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const float s = warp_sums<MP>(acc[r], lane);
                if (lane % LPS == r) mine = s;
            }
        }
        if (wpr > 1) {  // the slices of a group, added in slice order by its first warp
            red[warp][lane] = mine;
            __syncthreads();
            if (slice == 0) {
                mine = red[warp][lane];
                for (int q = 1; q < wpr; ++q) mine += red[warp + q][lane];
            }
            __syncthreads();  // red is reused by the next row group
        }
        const int n = n0 + e_r;
        if (slice == 0 && e_own && e_r < ROWS && e_m < M && n < N) {
            const float v = EPI == GEMV_EPI_NONE ? mine : gemv_epi_apply<EPI>(mine, e_bias, e_res);
            y[(long long)e_m * N + n] = v;
            if (ARGMAX && argmax_better(v, n, best_v, best_i)) { best_v = v; best_i = n; }
            if (KV && n >= kv.D) {
                const int part = n >= 2 * kv.D;  // 0: key, 1: value
                float* dst = part ? kv.v : kv.k;
                dst[e_kv + (n - kv.D - part * kv.D)] = v;
            }
        }
    }
    if (ARGMAX && am.out != nullptr) gemv_argmax_finish<MP>(am, best_v, best_i, M, lane, warp);
}

// ---------------------------------------------------------------------------------------------
// The exported kernels.
// (lm_screen.cu includes this file with GEMV_DEVICE_ONLY defined: the device code above without them.)
#ifndef GEMV_DEVICE_ONLY

// One build, one kind: GEMV_BUILD_MP = 1, 2, 4 or 8 emits only the nt kernels of that token count (_m1 ..
// _m8), 0 only the k-major gemv_{f32,bf16}_* kernels. gpt2block builds each kind it uses on its own
// (cuda/build.py): NVRTC compiles a module whole, and a run needs one or two of the five, so its first run
// compiles a fraction of the 70 kernels.
#ifndef GEMV_BUILD_MP
#error "GEMV_BUILD_MP is set by gpt2block/backends/cuda/build.py"
#endif
#if GEMV_BUILD_MP == 0
#define GEMV_IF_KMAJOR(k) k
#else
#define GEMV_IF_KMAJOR(k)
#endif
#if GEMV_BUILD_MP == 1
#define GEMV_IF_MP1(k) k
#else
#define GEMV_IF_MP1(k)
#endif
#if GEMV_BUILD_MP == 2
#define GEMV_IF_MP2(k) k
#else
#define GEMV_IF_MP2(k)
#endif
#if GEMV_BUILD_MP == 4
#define GEMV_IF_MP4(k) k
#else
#define GEMV_IF_MP4(k)
#endif
#if GEMV_BUILD_MP == 8
#define GEMV_IF_MP8(k) k
#else
#define GEMV_IF_MP8(k)
#endif

#define GEMV_KERNEL_DEF(name, bf16, epi)                                                                       \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                                 \
        name(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w, const float* __restrict__ bias, \
             const float* R, float* y, float* __restrict__ ws, unsigned* __restrict__ counters, int M, int N,   \
             int K, int k_per_split) {                                                                         \
        gemv_body<bf16, epi>(x, w, bias, R, y, ws, counters, M, N, K, k_per_split);                            \
    }
#define GEMV_KERNEL(name, bf16, epi) GEMV_IF_KMAJOR(GEMV_KERNEL_DEF(name, bf16, epi))

// Each nt kernel in four builds by the padded token count MP (1, 2, 4, 8; suffix _m1 .. _m8,
// for M = 1, 2, 3-4, 5-8): separate kernels, so that each gets its own register allocation.
#define GEMV_NT_KERNEL_MP(name, bf16, epi, ln, mp)                                                            \
    extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS, GemvNt<mp, bf16, ln && epi == GEMV_EPI_NONE>::MIN_BLOCKS) \
        name##_m##mp(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w,                          \
                     const float* __restrict__ bias, const float* R, float* y, const float* __restrict__ ln_g,   \
                     const float* __restrict__ ln_b, int M, int N, int K, float eps, int wpr) {                  \
        gemv_nt_body<bf16, epi, ln, false, mp>(x, w, bias, R, y, ln_g, ln_b, M, N, K, eps, wpr, GemvKv{});     \
    }
#define GEMV_NT_KERNEL(name, bf16, epi, ln)     \
    GEMV_IF_MP1(GEMV_NT_KERNEL_MP(name, bf16, epi, ln, 1))   \
    GEMV_IF_MP2(GEMV_NT_KERNEL_MP(name, bf16, epi, ln, 2))   \
    GEMV_IF_MP4(GEMV_NT_KERNEL_MP(name, bf16, epi, ln, 4))   \
    GEMV_IF_MP8(GEMV_NT_KERNEL_MP(name, bf16, epi, ln, 8))

// ln_f + the LM head (no bias, no epilogue) and its argmax (GemvArgmax; out NULL: none).
#define GEMV_NT_LM_KERNEL_MP(name, bf16, mp)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS, GemvNt<mp, bf16, true>::MIN_BLOCKS)         \
        name##_m##mp(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w,                          \
                     const float* __restrict__ bias, const float* R, float* y, const float* __restrict__ ln_g,   \
                     const float* __restrict__ ln_b, int M, int N, int K, float eps, int wpr, int* am_out,       \
                     float* am_part_v, int* am_part_i, int* am_counter, int* am_step, int* am_host_out) {        \
        const GemvArgmax am{am_out, am_part_v, am_part_i, am_counter, am_step, am_host_out};                  \
        gemv_nt_body<bf16, GEMV_EPI_NONE, true, false, mp, mp == 1>(x, w, bias, R, y, ln_g, ln_b, M, N, K, eps, \
                                                              wpr, GemvKv{}, am);                             \
    }
#define GEMV_NT_LM_KERNEL(name, bf16)     \
    GEMV_IF_MP1(GEMV_NT_LM_KERNEL_MP(name, bf16, 1))   \
    GEMV_IF_MP2(GEMV_NT_LM_KERNEL_MP(name, bf16, 2))   \
    GEMV_IF_MP4(GEMV_NT_LM_KERNEL_MP(name, bf16, 4))   \
    GEMV_IF_MP8(GEMV_NT_LM_KERNEL_MP(name, bf16, 8))

// ln_1 + QKV with the K / V store of the decode step (N = 3D): y as gemv_*_nt_ln_bias, and
// keys and values into the cache (GemvKv).
#define GEMV_NT_KV_KERNEL_MP(name, bf16, mp)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS, GemvNt<mp, bf16, false>::MIN_BLOCKS)        \
        name##_m##mp(const float* __restrict__ x, const GemvW<bf16>::T* __restrict__ w,                          \
                     const float* __restrict__ bias, const float* R, float* y, const float* __restrict__ ln_g,   \
                     const float* __restrict__ ln_b, int M, int N, int K, float eps, int wpr,                    \
                     const int* __restrict__ seq, const int* __restrict__ pos, float* __restrict__ k_cache,      \
                     float* __restrict__ v_cache, long long batch_stride) {                                      \
        const GemvKv kv{seq, pos, k_cache, v_cache, batch_stride, N / 3};                                     \
        gemv_nt_body<bf16, GEMV_EPI_BIAS, true, true, mp>(x, w, bias, R, y, ln_g, ln_b, M, N, K, eps, wpr, kv); \
    }
#define GEMV_NT_KV_KERNEL(name, bf16)     \
    GEMV_IF_MP1(GEMV_NT_KV_KERNEL_MP(name, bf16, 1))   \
    GEMV_IF_MP2(GEMV_NT_KV_KERNEL_MP(name, bf16, 2))   \
    GEMV_IF_MP4(GEMV_NT_KV_KERNEL_MP(name, bf16, 4))   \
    GEMV_IF_MP8(GEMV_NT_KV_KERNEL_MP(name, bf16, 8))

GEMV_KERNEL(gemv_f32_bias, false, GEMV_EPI_BIAS)
GEMV_KERNEL(gemv_f32_bias_gelu, false, GEMV_EPI_GELU)
GEMV_KERNEL(gemv_f32_bias_residual, false, GEMV_EPI_RESIDUAL)
GEMV_KERNEL(gemv_bf16_bias, true, GEMV_EPI_BIAS)
GEMV_KERNEL(gemv_bf16_bias_gelu, true, GEMV_EPI_GELU)
GEMV_KERNEL(gemv_bf16_bias_residual, true, GEMV_EPI_RESIDUAL)
GEMV_NT_KERNEL(gemv_f32_nt, false, GEMV_EPI_NONE, false)
GEMV_NT_LM_KERNEL(gemv_f32_nt_ln, false)
GEMV_NT_KERNEL(gemv_f32_nt_ln_bias, false, GEMV_EPI_BIAS, true)
GEMV_NT_KERNEL(gemv_f32_nt_ln_bias_gelu, false, GEMV_EPI_GELU, true)
GEMV_NT_KERNEL(gemv_f32_nt_bias, false, GEMV_EPI_BIAS, false)
GEMV_NT_KERNEL(gemv_f32_nt_bias_gelu, false, GEMV_EPI_GELU, false)
GEMV_NT_KERNEL(gemv_f32_nt_bias_residual, false, GEMV_EPI_RESIDUAL, false)
GEMV_NT_KERNEL(gemv_bf16_nt, true, GEMV_EPI_NONE, false)
GEMV_NT_LM_KERNEL(gemv_bf16_nt_ln, true)
GEMV_NT_KERNEL(gemv_bf16_nt_ln_bias, true, GEMV_EPI_BIAS, true)
GEMV_NT_KERNEL(gemv_bf16_nt_ln_bias_gelu, true, GEMV_EPI_GELU, true)
GEMV_NT_KERNEL(gemv_bf16_nt_bias, true, GEMV_EPI_BIAS, false)
GEMV_NT_KERNEL(gemv_bf16_nt_bias_gelu, true, GEMV_EPI_GELU, false)
GEMV_NT_KERNEL(gemv_bf16_nt_bias_residual, true, GEMV_EPI_RESIDUAL, false)
GEMV_NT_KV_KERNEL(gemv_f32_nt_ln_bias_kv, false)
GEMV_NT_KV_KERNEL(gemv_bf16_nt_ln_bias_kv, true)
#endif  // GEMV_DEVICE_ONLY

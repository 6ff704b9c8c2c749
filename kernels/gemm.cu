// gemm.cu: C[M,N] = epilogue(A[M,K] @ B[K,N] + bias[N]) for prefill and solve, and the tied
// LM head C[M,N] = A[M,K] @ B[N,K]^T. All matrices row-major and contiguous, float32.
//
// Arithmetic variants (the first word of each name):
//   tf32x3  mma.sync m16n8k8 TF32 tensor cores, each operand split x = hi + lo (hi = tf32(x),
//           lo = tf32(x - hi)), (lo*hi' + hi*lo' + hi*hi') per k8 step, the step's sum
//           formed in the tensor core and added up with round-to-nearest FADDs (per k tile,
//           then per tile into acc): fp32-level accuracy.
//           The engine's default fp32 precision mode runs this.
//   tf32    the same kernel with one pass (acc += tf32(a) * tf32(b)).
// Epilogues (the second word): bias (C = AB + bias), bias_gelu (C = gelu_tanh(AB + bias)),
//   bias_residual (C = R + AB + bias; R may be the same buffer as C: every element is read,
//   then written, by one thread), nt (C = A @ B^T, B is [N, K]; no bias).
//
// Every kernel has the same parameters:
//   (const float* A, const float* B, const float* bias, const float* R, float* C, int M, int N, int K)
//   A [M, K]; B [K, N] (nt: [N, K]); bias [N] (unused by nt: pass NULL);
//   R [M, N] (read by bias_residual only, else NULL); C [M, N].
// Any M, N, K >= 1. 16-byte loads are used where a matrix's rows allow them (row length a
// multiple of 4 and a 16-byte aligned base), else 4-byte copies: the kernel decides from the
// pointers and sizes itself. C and R are written/read in pairs when N is even and both are
// 8-byte aligned. Results are deterministic (no atomics, fixed summation order).
//
// Launch recipe
//   tensor-core kernels gemm_tf32x3_* and gemm_tf32_*, with the tile defines below
//   (GEMM_BM, GEMM_BN, GEMM_WARPS_M, GEMM_WARPS_N: build.py's tiles, e.g. 128, 128, 2, 4):
//     grid  = (ceil(M / GEMM_BM), ceil(N / GEMM_BN), 1)
//     block = (GEMM_WARPS_M * GEMM_WARPS_N * 32, 1, 1)
//     dynamic shared memory = GEMM_SMEM_BYTES
//         = GEMM_STAGES * (GEMM_BM * GEMM_LDK + max(GEMM_BK * (GEMM_BN + 8), GEMM_BN * GEMM_LDK)) * 4
//         = 110592 bytes for 128x128 (needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize)),
//           82944 for 128x64, 55296 for 64x64.
// grid.x walks M so that blocks running together share B's column tile (the wte tile of nt).

#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"

// Build parameters (build.py; the host sizes grids and shared memory by them): the tile GEMM_BM x GEMM_BN
// of GEMM_WARPS_M x GEMM_WARPS_N warps, GEMM_BK k per shared-memory stage, GEMM_STAGES cp.async stages.
#ifndef GEMM_BM
#error "GEMM_BM is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_BN
#error "GEMM_BN is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_WARPS_M
#error "GEMM_WARPS_M is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_WARPS_N
#error "GEMM_WARPS_N is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_BK
#error "GEMM_BK is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_STAGES
#error "GEMM_STAGES is set by gpt2block/backends/cuda/build.py"
#endif
#define GEMM_THREADS (GEMM_WARPS_M * GEMM_WARPS_N * 32)
#define GEMM_LDK (GEMM_BK + 4)          // k-contiguous tile row stride: conflict-free fragment reads
#define GEMM_LDN (GEMM_BN + 8)          // n-contiguous B tile row stride: conflict-free fragment reads
#define GEMM_A_FLOATS (GEMM_BM * GEMM_LDK)
#define GEMM_B_FLOATS \
    (GEMM_BK * GEMM_LDN > GEMM_BN * GEMM_LDK ? GEMM_BK * GEMM_LDN : GEMM_BN * GEMM_LDK)
#define GEMM_STAGE_FLOATS (GEMM_A_FLOATS + GEMM_B_FLOATS)
#define GEMM_SMEM_BYTES (GEMM_STAGES * GEMM_STAGE_FLOATS * 4)


// ---------------------------------------------------------------------------------------------
// Tensor-core kernel: cp.async triple buffering, GEMM_WARPS_M x GEMM_WARPS_N warps (8 at 128 x 128) each owning a
// (BM / WARPS_M) x (BN / WARPS_N) piece of the block tile as m16n8 accumulator tiles.

// ROWS x GEMM_BK floats of a k-contiguous matrix G [nrows, K] from (row0, k0) into s [ROWS][GEMM_LDK];
// rows >= nrows and k >= K are zero-filled. vec: 16-byte copies (K % 4 == 0, G 16-byte aligned).
template <int ROWS>
__device__ __forceinline__ void gemm_load_kmajor(float* s, const float* G, int row0, int nrows, int k0, int K,
                                                 bool vec) {
    constexpr int CHUNKS = ROWS * (GEMM_BK / 4);  // 16-byte chunks in the tile
    static_assert(CHUNKS % GEMM_THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / GEMM_THREADS; ++i) {
        const int c = threadIdx.x + i * GEMM_THREADS;
        const int r = c / (GEMM_BK / 4), kc = (c % (GEMM_BK / 4)) * 4;
        const int gr = row0 + r, gk = k0 + kc;
        float* dst = s + r * GEMM_LDK + kc;
        if (vec) {
            const bool ok = gr < nrows && gk < K;  // K % 4 == 0: the chunk is all in or all out
            cp_async16(dst, ok ? G + (long long)gr * K + gk : G, ok ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool ok = gr < nrows && gk + j < K;
                cp_async4(dst + j, ok ? G + (long long)gr * K + gk + j : G, ok ? 4 : 0);
            }
        }
    }
}

// GEMM_BK x GEMM_BN floats of an n-contiguous matrix B [K, N] from (k0, n0) into s [GEMM_BK][GEMM_LDN].
__device__ __forceinline__ void gemm_load_nmajor(float* s, const float* B, int k0, int K, int n0, int N,
                                                 bool vec) {
    constexpr int CHUNKS = GEMM_BK * (GEMM_BN / 4);
    static_assert(CHUNKS % GEMM_THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / GEMM_THREADS; ++i) {
        const int c = threadIdx.x + i * GEMM_THREADS;
        const int r = c / (GEMM_BN / 4), nc = (c % (GEMM_BN / 4)) * 4;
        const int gk = k0 + r, gn = n0 + nc;
        float* dst = s + r * GEMM_LDN + nc;
        if (vec) {
            const bool ok = gk < K && gn < N;  // N % 4 == 0
            cp_async16(dst, ok ? B + (long long)gk * N + gn : B, ok ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool ok = gk < K && gn + j < N;
                cp_async4(dst + j, ok ? B + (long long)gk * N + gn + j : B, ok ? 4 : 0);
            }
        }
    }
}

// PASSES: 1 (tf32) or 3 (tf32x3). NT: B is [N, K].
template <int PASSES, int EPI, bool NT>
__device__ __forceinline__ void gemm_mma_body(const float* __restrict__ A, const float* __restrict__ B,
                                              const float* __restrict__ bias, const float* R, float* C, int M,
                                              int N, int K) {
    constexpr int WTM = GEMM_BM / GEMM_WARPS_M;  // warp tile rows
    constexpr int WTN = GEMM_BN / GEMM_WARPS_N;  // warp tile cols
    constexpr int MT = WTM / 16;                 // m16 tiles per warp
    constexpr int NT8 = WTN / 8;                 // n8 tiles per warp
    static_assert(WTM % 16 == 0 && WTN % 8 == 0, "warp tile must be a multiple of 16 x 8");

    extern __shared__ float4 gemm_smem4[];
    float* smem = reinterpret_cast<float*>(gemm_smem4);

    const int m0 = blockIdx.x * GEMM_BM, n0 = blockIdx.y * GEMM_BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / GEMM_WARPS_N, wn = warp % GEMM_WARPS_N;

    const bool a_vec = (K & 3) == 0 && gemm_aligned(A, 16);
    const bool b_vec = NT ? ((K & 3) == 0 && gemm_aligned(B, 16)) : ((N & 3) == 0 && gemm_aligned(B, 16));
    const int KT = (K + GEMM_BK - 1) / GEMM_BK;

    auto load_stage = [&](int stage, int kt) {
        float* sA = smem + stage * GEMM_STAGE_FLOATS;
        float* sB = sA + GEMM_A_FLOATS;
        gemm_load_kmajor<GEMM_BM>(sA, A, m0, M, kt * GEMM_BK, K, a_vec);
        if (NT)
            gemm_load_kmajor<GEMM_BN>(sB, B, n0, N, kt * GEMM_BK, K, b_vec);
        else
            gemm_load_nmajor(sB, B, kt * GEMM_BK, K, n0, N, b_vec);
    };

    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < GEMM_STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();  // always commit: keeps the group count fixed
    }

    for (int kt = 0; kt < KT; ++kt) {
        // tf32x3: this k tile's sum, added to acc once at the end of the tile (see below).
        float tile_sum[PASSES == 3 ? MT : 1][NT8][4];
#pragma unroll
        for (int i = 0; i < (PASSES == 3 ? MT : 1); ++i)
#pragma unroll
            for (int j = 0; j < NT8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) tile_sum[i][j][e] = 0.0f;
        cp_async_wait<GEMM_STAGES - 2>();  // tile kt has landed (for this thread)
        __syncthreads();                   // ... for every thread; and stage (kt-1) % S is free
        {
            const int nk = kt + GEMM_STAGES - 1;
            if (nk < KT) load_stage(nk % GEMM_STAGES, nk);
            cp_async_commit();
        }
        const float* sA = smem + (kt % GEMM_STAGES) * GEMM_STAGE_FLOATS;
        const float* sB = sA + GEMM_A_FLOATS;
        const float* aw = sA + (wm * WTM + g) * GEMM_LDK + t;  // this lane's A fragment base
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; kk += 8) {
            unsigned bh[NT8][2], bl[NT8][2];
#pragma unroll
            for (int j = 0; j < NT8; ++j) {
                const int n = wn * WTN + j * 8 + g;
                float b0, b1;
                if (NT) {
                    b0 = sB[n * GEMM_LDK + kk + t];
                    b1 = sB[n * GEMM_LDK + kk + t + 4];
                } else {
                    b0 = sB[(kk + t) * GEMM_LDN + n];
                    b1 = sB[(kk + t + 4) * GEMM_LDN + n];
                }
                if (PASSES == 3) {
                    split_tf32(b0, bh[j][0], bl[j][0]);
                    split_tf32(b1, bh[j][1], bl[j][1]);
                } else {
                    bh[j][0] = f32_to_tf32(b0);
                    bh[j][1] = f32_to_tf32(b1);
                }
            }
            unsigned ah[MT][4], al[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float* ap = aw + i * 16 * GEMM_LDK + kk;
                const float a[4] = {ap[0], ap[8 * GEMM_LDK], ap[4], ap[8 * GEMM_LDK + 4]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (PASSES == 3)
                        split_tf32(a[e], ah[i][e], al[i][e]);
                    else
                        ah[i][e] = f32_to_tf32(a[e]);
                }
            }
            if (PASSES == 3) {
                // Each k8 step's three products are summed inside the tensor core from zero, then
                // added to the k tile's sum by an FADD, and the tile's sum to acc once per tile:
                // the tensor core's internal accumulation rounds toward zero, the FADDs to nearest,
                // so only short sums are truncated and the long running sum takes K / GEMM_BK
                // roundings, not K / 8 (measured: error against float64 0.2-0.6x torch fp32's at
                // M >= 100, about half of a single-level sum's).
                // Small cross terms first, then the big one; one pass over the n8 tiles at a time
                // so that consecutive MMAs are independent.
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    float part[NT8][4];
#pragma unroll
                    for (int j = 0; j < NT8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) part[j][e] = 0.0f;
#pragma unroll
                    for (int j = 0; j < NT8; ++j) mma_tf32_16x8x8(part[j], al[i], bh[j]);
#pragma unroll
                    for (int j = 0; j < NT8; ++j) mma_tf32_16x8x8(part[j], ah[i], bl[j]);
#pragma unroll
                    for (int j = 0; j < NT8; ++j) mma_tf32_16x8x8(part[j], ah[i], bh[j]);
#pragma unroll
                    for (int j = 0; j < NT8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) tile_sum[i][j][e] += part[j][e];
                }
            } else {
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int j = 0; j < NT8; ++j) mma_tf32_16x8x8(acc[i][j], ah[i], bh[j]);
            }
        }
        if (PASSES == 3) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] += tile_sum[i][j][e];
        }
    }
    cp_async_wait<0>();  // no copy may be left in flight when the block exits

    const bool pair = (N & 1) == 0 && gemm_aligned(C, 8) && (EPI != GEMM_EPI_RESIDUAL || gemm_aligned(R, 8));
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * WTM + i * 16 + g + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NT8; ++j) {
                const int col = n0 + wn * WTN + j * 8 + 2 * t;
                gemm_store2<EPI>(C, bias, R, row, col, N, pair, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The exported kernels: gemm_<variant>_<epilogue>.

#define GEMM_MMA_KERNEL(name, passes, epi, nt)                                         \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS) name(GEMM_PARAMS) {   \
        gemm_mma_body<passes, epi, nt>(A, B, bias, R, C, M, N, K);                     \
    }

#if GEMM_WITH_TF32X3
GEMM_MMA_KERNEL(gemm_tf32x3_bias, 3, GEMM_EPI_BIAS, false)
GEMM_MMA_KERNEL(gemm_tf32x3_bias_gelu, 3, GEMM_EPI_GELU, false)
GEMM_MMA_KERNEL(gemm_tf32x3_bias_residual, 3, GEMM_EPI_RESIDUAL, false)
GEMM_MMA_KERNEL(gemm_tf32x3_nt, 3, GEMM_EPI_NONE, true)

#endif

#if GEMM_WITH_TF32
GEMM_MMA_KERNEL(gemm_tf32_bias, 1, GEMM_EPI_BIAS, false)
GEMM_MMA_KERNEL(gemm_tf32_bias_gelu, 1, GEMM_EPI_GELU, false)
GEMM_MMA_KERNEL(gemm_tf32_bias_residual, 1, GEMM_EPI_RESIDUAL, false)
GEMM_MMA_KERNEL(gemm_tf32_nt, 1, GEMM_EPI_NONE, true)

#endif

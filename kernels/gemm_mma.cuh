// gemm_mma.cuh: the mma.sync tensor-core GEMM body of gemm.cu, on a tile given as a type
// (GemmTile), so that one translation unit can hold several tiles: gemm.cu instantiates the tile of
// its build parameters (one NVRTC module per tile, for the engine). Arithmetic, epilogues, argument
// conventions and launch recipe: gemm.cu's header. Device code only.
#pragma once
#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"

// A block tile BM x BN of WARPS_M x WARPS_N warps, BK k per shared-memory stage, STAGES cp.async
// stages; the shared-memory strides and sizes that follow from it.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int BK_, int STAGES_>
struct GemmTile {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, BK = BK_, STAGES = STAGES_;
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr int LDK = BK + 4;  // k-contiguous tile row stride: conflict-free fragment reads
    static constexpr int LDN = BN + 8;  // n-contiguous B tile row stride: conflict-free fragment reads
    static constexpr int A_FLOATS = BM * LDK;
    static constexpr int B_FLOATS = BK * LDN > BN * LDK ? BK * LDN : BN * LDK;
    static constexpr int STAGE_FLOATS = A_FLOATS + B_FLOATS;
    static constexpr int SMEM_BYTES = STAGES * STAGE_FLOATS * 4;
};

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel: cp.async triple buffering, WARPS_M x WARPS_N warps (8 at 128 x 128) each owning a
// (BM / WARPS_M) x (BN / WARPS_N) piece of the block tile as m16n8 accumulator tiles.

// ROWS x BK floats of a k-contiguous matrix G [nrows, K] from (row0, k0) into s [ROWS][LDK];
// rows >= nrows and k >= K are zero-filled. vec: 16-byte copies (K % 4 == 0, G 16-byte aligned).
template <class T, int ROWS>
__device__ __forceinline__ void gemm_load_kmajor(float* s, const float* G, int row0, int nrows, int k0, int K,
                                                 bool vec) {
    constexpr int CHUNKS = ROWS * (T::BK / 4);  // 16-byte chunks in the tile
    static_assert(CHUNKS % T::THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / T::THREADS; ++i) {
        const int c = threadIdx.x + i * T::THREADS;
        const int r = c / (T::BK / 4), kc = (c % (T::BK / 4)) * 4;
        const int gr = row0 + r, gk = k0 + kc;
        float* dst = s + r * T::LDK + kc;
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

// BK x BN floats of an n-contiguous matrix B [K, N] from (k0, n0) into s [BK][LDN].
template <class T>
__device__ __forceinline__ void gemm_load_nmajor(float* s, const float* B, int k0, int K, int n0, int N,
                                                 bool vec) {
    constexpr int CHUNKS = T::BK * (T::BN / 4);
    static_assert(CHUNKS % T::THREADS == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < CHUNKS / T::THREADS; ++i) {
        const int c = threadIdx.x + i * T::THREADS;
        const int r = c / (T::BN / 4), nc = (c % (T::BN / 4)) * 4;
        const int gk = k0 + r, gn = n0 + nc;
        float* dst = s + r * T::LDN + nc;
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
// EPI: a GEMM_EPI_* (gemm_epilogue.cuh); GEMM_EPI_RUNTIME: the run-time epi.
template <class T, int PASSES, int EPI, bool NT>
__device__ __forceinline__ void gemm_mma_body(const float* __restrict__ A, const float* __restrict__ B,
                                              const float* __restrict__ bias, const float* R, float* C, int M,
                                              int N, int K, int epi = EPI) {
    constexpr int WTM = T::BM / T::WARPS_M;  // warp tile rows
    constexpr int WTN = T::BN / T::WARPS_N;  // warp tile cols
    constexpr int MT = WTM / 16;                 // m16 tiles per warp
    constexpr int NT8 = WTN / 8;                 // n8 tiles per warp
    static_assert(WTM % 16 == 0 && WTN % 8 == 0, "warp tile must be a multiple of 16 x 8");

    extern __shared__ float4 gemm_smem4[];
    float* smem = reinterpret_cast<float*>(gemm_smem4);

    const int m0 = blockIdx.x * T::BM, n0 = blockIdx.y * T::BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;

    const bool a_vec = (K & 3) == 0 && gemm_aligned(A, 16);
    const bool b_vec = NT ? ((K & 3) == 0 && gemm_aligned(B, 16)) : ((N & 3) == 0 && gemm_aligned(B, 16));
    const int KT = (K + T::BK - 1) / T::BK;

    auto load_stage = [&](int stage, int kt) {
        float* sA = smem + stage * T::STAGE_FLOATS;
        float* sB = sA + T::A_FLOATS;
        gemm_load_kmajor<T, T::BM>(sA, A, m0, M, kt * T::BK, K, a_vec);
        if (NT)
            gemm_load_kmajor<T, T::BN>(sB, B, n0, N, kt * T::BK, K, b_vec);
        else
            gemm_load_nmajor<T>(sB, B, kt * T::BK, K, n0, N, b_vec);
    };

    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
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
        cp_async_wait<T::STAGES - 2>();  // tile kt has landed (for this thread)
        __syncthreads();                   // ... for every thread; and stage (kt-1) % S is free
        {
            const int nk = kt + T::STAGES - 1;
            if (nk < KT) load_stage(nk % T::STAGES, nk);
            cp_async_commit();
        }
        const float* sA = smem + (kt % T::STAGES) * T::STAGE_FLOATS;
        const float* sB = sA + T::A_FLOATS;
        const float* aw = sA + (wm * WTM + g) * T::LDK + t;  // this lane's A fragment base
#pragma unroll
        for (int kk = 0; kk < T::BK; kk += 8) {
            unsigned bh[NT8][2], bl[NT8][2];
#pragma unroll
            for (int j = 0; j < NT8; ++j) {
                const int n = wn * WTN + j * 8 + g;
                float b0, b1;
                if (NT) {
                    b0 = sB[n * T::LDK + kk + t];
                    b1 = sB[n * T::LDK + kk + t + 4];
                } else {
                    b0 = sB[(kk + t) * T::LDN + n];
                    b1 = sB[(kk + t + 4) * T::LDN + n];
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
                const float* ap = aw + i * 16 * T::LDK + kk;
                const float a[4] = {ap[0], ap[8 * T::LDK], ap[4], ap[8 * T::LDK + 4]};
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
                // so only short sums are truncated and the long running sum takes K / BK
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

    const bool pair = (N & 1) == 0 && gemm_aligned(C, 8) && (gemm_epi<EPI>(epi) != GEMM_EPI_RESIDUAL || gemm_aligned(R, 8));
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * WTM + i * 16 + g + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NT8; ++j) {
                const int col = n0 + wn * WTN + j * 8 + 2 * t;
                gemm_store2<EPI>(C, bias, R, row, col, N, pair, acc[i][j][2 * h], acc[i][j][2 * h + 1], epi);
            }
        }
    }
}


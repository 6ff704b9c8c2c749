// gemm_simt.cuh: C[M,N] = epilogue(A[M,K] @ B[K,N] + bias[N]) in plain fp32 FFMA, for GPUs without
// cp.async or TF32 tensor cores (the T4, sm_75): the one-file export's path there (solve.cu).
// Row-major, contiguous float32; any M, N, K >= 1, any alignment (4-byte loads); deterministic.
// Epilogues as gemm.cu's (gemm_epilogue.cuh): bias, bias_gelu, bias_residual (R may be C itself:
// every element is read, then written, by one thread).
//
// Block: SIMT_BM x SIMT_BN outputs (64 x 64), 256 threads, each a 4 x 4 patch (rows 4 ty .., columns
// 4 tx .., ty = tid / 16, tx = tid % 16). k tiles of SIMT_BK = 16: A's tile stored transposed
// [k][m] and B's [k][n] in shared memory (float4 reads along m and n), double-buffered, the next
// tile's global loads held in registers during this tile's FFMAs.
// Accuracy: each k tile's 16 products summed into a fresh partial, then added to the accumulator
// (K / 16 long-sum roundings instead of K): error against float64 at or below a plain FFMA loop's.
//
// Launch: grid (ceil(M / SIMT_BM), ceil(N / SIMT_BN)), block SIMT_THREADS, no dynamic shared memory.
// Device code only; needs common.cuh and gemm_epilogue.cuh.
#pragma once
#include "common.cuh"
#include "gemm_epilogue.cuh"

#define SIMT_BM 64
#define SIMT_BN 64
#define SIMT_BK 16
#define SIMT_THREADS 256
#define SIMT_LD (SIMT_BM + 4)  // shared row stride (floats) of both tiles: 16-byte aligned rows

// EPI: a GEMM_EPI_* (gemm_epilogue.cuh); GEMM_EPI_RUNTIME: the run-time epi.
template <int EPI>
__device__ __forceinline__ void gemm_simt_body(const float* __restrict__ A, const float* __restrict__ B,
                                               const float* __restrict__ bias, const float* R, float* C, int M,
                                               int N, int K, int epi = EPI) {
    static_assert(SIMT_BM == SIMT_BN && SIMT_BM * SIMT_BK == 4 * SIMT_THREADS, "one tile: 4 loads a thread");
    __shared__ __align__(16) float As[2][SIMT_BK][SIMT_LD];  // A's tile transposed: [k][m]
    __shared__ __align__(16) float Bs[2][SIMT_BK][SIMT_LD];  // [k][n]
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int m0 = blockIdx.x * SIMT_BM, n0 = blockIdx.y * SIMT_BN;
    // this thread's loads: A rows m0 + (tid / 4), k 4 (tid % 4) .. + 3; B rows k (tid / 16), n 4 (tid % 16) .. + 3
    const int ar = tid >> 2, ak = (tid & 3) * 4, bk = tid >> 4, bn = (tid & 15) * 4;
    float ra[4], rb[4];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int m = m0 + ar, k = k0 + ak + e;
            ra[e] = m < M && k < K ? __ldg(A + (long long)m * K + k) : 0.0f;
            const int kb = k0 + bk, n = n0 + bn + e;
            rb[e] = kb < K && n < N ? __ldg(B + (long long)kb * N + n) : 0.0f;
        }
    };
    auto store = [&](int s) {
#pragma unroll
        for (int e = 0; e < 4; ++e) As[s][ak + e][ar] = ra[e];
        *reinterpret_cast<float4*>(&Bs[s][bk][bn]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
    };

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    const int KT = (K + SIMT_BK - 1) / SIMT_BK;
    fetch(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < KT; ++kt) {
        const int s = kt & 1;
        if (kt + 1 < KT) fetch((kt + 1) * SIMT_BK);  // in flight during this tile's products
        float part[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) part[i][j] = 0.0f;
#pragma unroll
        for (int k = 0; k < SIMT_BK; ++k) {
            const float4 a = *reinterpret_cast<const float4*>(&As[s][k][4 * ty]);
            const float4 b = *reinterpret_cast<const float4*>(&Bs[s][k][4 * tx]);
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] += part[i][j];
        if (kt + 1 < KT) store(s ^ 1);  // the other buffer: last read before the previous barrier
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = m0 + 4 * ty + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + 4 * tx + j;
            if (col < N) {
                const long long idx = (long long)row * N + col;
                C[idx] = gemm_epi_value<EPI>(acc[i][j], bias, R, idx, col, epi);
            }
        }
    }
}

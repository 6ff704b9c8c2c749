// gemm_mma_vec.cuh: the mma.sync TF32 GEMM C[M,N] = epilogue(A[M,K] @ B[K,N] + bias) with 16-byte
// fragment reads, for the one-file export's sm_80+ path (solve.cu, path 2) where the operands allow it
// (K % 4 == 0, N % 4 == 0, A and B 16-byte aligned); gemm_mma.cuh's body is the general one (any sizes
// and alignments, B as [N, K] too). Arithmetic, epilogues, argument conventions: gemm.cu's header
// (tf32x3: each operand split x = hi + lo, lo*hi' + hi*lo' + hi*hi' a k8 step summed from zero in the
// tensor core and added to acc by an FADD; tf32: one pass). Device code only.
//
// What it does that gemm_mma.cuh does not (measured: docs/PERFORMANCE.md, version 40; dev/tune_gemm_mma.py):
//   - k is permuted inside each 16-wide k chunk (the sum over k does not care in which order the
//     products come, as long as A and B agree): MMA step s (0, 1) of the chunk gives lane t (lane % 4)
//     the physical k 4t + 2s as fragment k index t and 4t + 2s + 1 as index t + 4, so a lane's A values
//     for both steps of a chunk are one 16-byte LDS per row;
//   - n is permuted inside the warp tile (32 columns, four n8 tiles): n8 tile j's column g (lane / 4) is
//     the physical column 4g + j, so a lane's B values for the four n8 tiles are one 16-byte LDS per k
//     row, and its outputs are 8 adjacent columns per row (two 16-byte stores);
//   - both shared tiles are unpadded and XOR-swizzled at 16-byte granularity so that those reads are
//     conflict-free: A [BM][32] element (r, k) at r * 32 + ((k / 4) ^ 4 (r & 1)) * 4 + k % 4;
//     B [32][BN] element (k, n) at k * BN + ((n / 4) ^ 2 ((k / 4) & 3)) * 4 + n % 4.
// Shapes: a block tile BM x BN of WARPS_M x WARPS_N warps, each warp WTM = BM / WARPS_M rows (m16 tiles)
// by WTN = 32 columns; BK = 32 k per shared stage, STAGES cp.async stages.
#pragma once
#include "common.cuh"
#include "gemm_epilogue.cuh"
#include "mma.cuh"

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct GemmVecTile {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
    static constexpr int BK = 32;
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16, NT8 = WTN / 8;
    static_assert(WTN == 32, "a lane's B values for one k row are one 16-byte read: four n8 tiles");
    static_assert(WTM % 16 == 0 && BN % 32 == 0, "tile shape");
    static constexpr int A_FLOATS = BM * BK, B_FLOATS = BK * BN;
    static constexpr int STAGE_FLOATS = A_FLOATS + B_FLOATS;
    static constexpr int SMEM_BYTES = STAGES * STAGE_FLOATS * 4;
};

__device__ __forceinline__ int gemm_vec_a_index(int r, int k) { return r * 32 + (((k >> 2) ^ ((r & 1) << 2)) << 2) + (k & 3); }

template <int BN>
__device__ __forceinline__ int gemm_vec_b_index(int k, int n) {
    return k * BN + (((n >> 2) ^ (((k >> 2) & 3) << 1)) << 2) + (n & 3);
}

// C[idx .. idx + 3] = the epilogue e_op (a GEMM_EPI_*) of v, columns col .. col + 3: 16-byte reads of bias
// and R, one 16-byte store (each element of R read before C's is written: R may be C).
__device__ __forceinline__ void gemm_vec_store4(float* C, const float* bias, const float* R, long long idx, int col,
                                                float4 o, int e_op) {
    if (e_op != GEMM_EPI_NONE) {
        const float4 bb = __ldg(reinterpret_cast<const float4*>(bias + col));
        o.x += bb.x, o.y += bb.y, o.z += bb.z, o.w += bb.w;
        if (e_op == GEMM_EPI_GELU) {
            o.x = gelu_tanh(o.x), o.y = gelu_tanh(o.y), o.z = gelu_tanh(o.z), o.w = gelu_tanh(o.w);
        } else if (e_op == GEMM_EPI_RESIDUAL) {
            const float4 rr = *reinterpret_cast<const float4*>(R + idx);
            o.x += rr.x, o.y += rr.y, o.z += rr.z, o.w += rr.w;
        }
    }
    *reinterpret_cast<float4*>(C + idx) = o;
}

// Split K's second pass over `tiles` output tiles BM x BN from tile0 on (tile t at rows (t % tiles_m) BM,
// columns (t / tiles_m) BN): C = epi(P[t][0] + ... + P[t][splits - 1] + bias), each tile's partials dense
// [BM][BN] at P + ((t - tile0) splits + z) BM BN, summed in z order (deterministic). One float4 a thread;
// N % 4 == 0, C, bias, R 16-byte aligned.
__device__ __forceinline__ void gemm_vec_splitk_reduce(const float* __restrict__ P, int splits, int tile0, int tiles,
                                                       int tiles_m, int BM, int BN, const float* __restrict__ bias,
                                                       const float* R, float* C, int M, int N, int epi) {
    const long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_tile = BM * BN / 4;
    if (i4 >= (long long)tiles * per_tile) return;
    const int r = (int)(i4 / per_tile), e = (int)(i4 % per_tile);
    const int lr = e / (BN / 4), lc = (e % (BN / 4)) * 4;
    const int t = tile0 + r;
    const int row = (t % tiles_m) * BM + lr, col = (t / tiles_m) * BN + lc;
    if (row >= M || col >= N) return;
    const float* p = P + (long long)r * splits * BM * BN + lr * BN + lc;
    float4 v = *reinterpret_cast<const float4*>(p);
    for (int z = 1; z < splits; ++z) {
        const float4 q = *reinterpret_cast<const float4*>(p + (long long)z * BM * BN);
        v.x += q.x, v.y += q.y, v.z += q.z, v.w += q.w;
    }
    gemm_vec_store4(C, bias, R, (long long)row * N + col, col, v, epi);
}

// One block a (tile, split): the grid is 1-D, block b on output tile tile0 + b / splits (tile t at rows
// (t % tiles_m) BM, columns (t / tiles_m) BN: consecutive blocks share B's columns) and k split b % splits.
// splits == 1: the tile's epilogue into C. splits > 1: the split's k tiles [z per, (z + 1) per) only, its
// partial sum stored dense [BM][BN] at P + ((t - tile0) splits + z) BM BN, no epilogue
// (gemm_vec_splitk_reduce applies it).
template <class T, int PASSES, int EPI>
__device__ __forceinline__ void gemm_mma_vec_body(const float* __restrict__ A, const float* __restrict__ B,
                                              const float* __restrict__ bias, const float* R, float* C, int M,
                                              int N, int K, int epi, int tile0, int splits, float* P) {
    constexpr int MT = T::MT;
    extern __shared__ float4 gemm_smem4[];
    float* smem = reinterpret_cast<float*>(gemm_smem4);

    const int tiles_m = (M + T::BM - 1) / T::BM;
    const int tile = tile0 + blockIdx.x / splits, z = blockIdx.x % splits;
    const int m0 = (tile % tiles_m) * T::BM, n0 = (tile / tiles_m) * T::BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
    const int kt_all = (K + T::BK - 1) / T::BK;
    const int per = (kt_all + splits - 1) / splits;
    const int kt_first = z * per;
    const int KT = max(0, min(kt_all, kt_first + per) - kt_first);

    auto load_stage = [&](int stage, int kt) {
        float* sA = smem + stage * T::STAGE_FLOATS;
        float* sB = sA + T::A_FLOATS;
        const int k0 = (kt_first + kt) * T::BK;
        constexpr int A_CHUNKS = T::BM * (T::BK / 4);
#pragma unroll
        for (int i = 0; i < (A_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (A_CHUNKS % T::THREADS != 0 && c >= A_CHUNKS) break;
            const int r = c >> 3, kc = (c & 7) << 2;
            const int gr = m0 + r, gk = k0 + kc;
            const bool ok = gr < M && gk < K;
            cp_async16(sA + gemm_vec_a_index(r, kc), ok ? A + (long long)gr * K + gk : A, ok ? 16 : 0);
        }
        constexpr int B_CHUNKS = T::BK * (T::BN / 4);
#pragma unroll
        for (int i = 0; i < (B_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (B_CHUNKS % T::THREADS != 0 && c >= B_CHUNKS) break;
            const int r = c / (T::BN / 4), nc = (c % (T::BN / 4)) << 2;
            const int gk = k0 + r, gn = n0 + nc;
            const bool ok = gk < K && gn < N;
            cp_async16(sB + gemm_vec_b_index<T::BN>(r, nc), ok ? B + (long long)gk * N + gn : B, ok ? 16 : 0);
        }
    };

    float acc[MT][4][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }

    const int a_row = wm * T::WTM + g;       // + 16 i (+ 8)
    const int b_col = wn * T::WTN + 4 * g;   // the lane's four columns

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<T::STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + T::STAGES - 1;
            if (nk < KT) load_stage(nk % T::STAGES, nk);
            cp_async_commit();
        }
        const float* sA = smem + (kt % T::STAGES) * T::STAGE_FLOATS;
        const float* sB = sA + T::A_FLOATS;
#pragma unroll
        for (int kk = 0; kk < T::BK; kk += 16) {
            float4 ra[MT][2], rb[4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                ra[i][0] = *reinterpret_cast<const float4*>(sA + gemm_vec_a_index(a_row + 16 * i, kk + 4 * t));
                ra[i][1] = *reinterpret_cast<const float4*>(sA + gemm_vec_a_index(a_row + 16 * i + 8, kk + 4 * t));
            }
#pragma unroll
            for (int q = 0; q < 4; ++q)
                rb[q] = *reinterpret_cast<const float4*>(sB + gemm_vec_b_index<T::BN>(kk + 4 * t + q, b_col));
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                // A fragment (rows g, g + 8; k indices t, t + 4) and B fragments (k indices t, t + 4;
                // column g of n8 tile j) of step s: physical k 4t + 2s and 4t + 2s + 1.
                float a[MT][4], b[4][2];
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    a[i][0] = s ? ra[i][0].z : ra[i][0].x;
                    a[i][1] = s ? ra[i][1].z : ra[i][1].x;
                    a[i][2] = s ? ra[i][0].w : ra[i][0].y;
                    a[i][3] = s ? ra[i][1].w : ra[i][1].y;
                }
                const float4 b0 = rb[2 * s], b1 = rb[2 * s + 1];
                b[0][0] = b0.x, b[1][0] = b0.y, b[2][0] = b0.z, b[3][0] = b0.w;
                b[0][1] = b1.x, b[1][1] = b1.y, b[2][1] = b1.z, b[3][1] = b1.w;
                if (PASSES == 3) {
                    unsigned bh[4][2], bl[4][2];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) split_tf32_fast(b[j][e], bh[j][e], bl[j][e]);
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        unsigned ah[4], al[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) split_tf32_fast(a[i][e], ah[e], al[e]);
                        float part[4][4];
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) part[j][e] = 0.0f;
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(part[j], al, bh[j]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(part[j], ah, bl[j]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(part[j], ah, bh[j]);
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[i][j][e] += part[j][e];
                    }
                } else {
                    unsigned bh[4][2];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) bh[j][e] = tf32_rna_bits(b[j][e]);
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        unsigned ah[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) ah[e] = tf32_rna_bits(a[i][e]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(acc[i][j], ah, bh[j]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    // Row g (e 0, 1) and g + 8 (e 2, 3) of m16 tile i: columns b_col' = wn WTN + 8t .. + 7, where
    // acc[i][j][e] (n8 tile j's logical column 2t + (e & 1)) is physical column 4 (2t + (e & 1)) + j.
    if (splits > 1) {  // the partial tile, dense: rows a_row + 16 i + 8 h, columns wn WTN + 8t .. + 7
        float* out = P + ((long long)(tile - tile0) * splits + z) * T::BM * T::BN;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    *reinterpret_cast<float4*>(out + (a_row + 16 * i + 8 * h) * T::BN + wn * T::WTN + 8 * t + 4 * half) =
                        make_float4(acc[i][0][2 * h + half], acc[i][1][2 * h + half], acc[i][2][2 * h + half],
                                    acc[i][3][2 * h + half]);
        return;
    }
    const int e_op = gemm_epi<EPI>(epi);
    const int col0 = n0 + wn * T::WTN + 8 * t;
    const bool vec_out = (N & 3) == 0 && gemm_aligned(C, 16) && (e_op == GEMM_EPI_NONE || gemm_aligned(bias, 16)) &&
                         (e_op != GEMM_EPI_RESIDUAL || gemm_aligned(R, 16));
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + a_row + 16 * i + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int col = col0 + 4 * half;
                float v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) v[j] = acc[i][j][2 * h + half];
                const long long idx = (long long)row * N + col;
                if (vec_out && col + 3 < N) {
                    gemm_vec_store4(C, bias, R, idx, col, make_float4(v[0], v[1], v[2], v[3]), e_op);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (col + j < N) C[idx + j] = gemm_epi_value<EPI>(v[j], bias, R, idx + j, col + j, e_op);
                }
            }
        }
    }
}

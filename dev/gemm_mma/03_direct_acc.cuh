// 03_direct_acc.cuh: 02_vec_frags.cuh with less ALU work a k8 step in tf32x3.
//   - tf32x3, PARTIAL false: the three products accumulate straight into acc in the tensor core (no
//     zeroed partial, no FADD): 64 MOV + 64 FADD fewer a k8 step for a 64 x 32 warp tile;
//     PARTIAL true: a k16 chunk's six products summed from zero, then added to acc by FADDs (half of
//     02's MOV and FADD); error of each measured against 02's;
//   - the split: hi = x truncated to tf32 (one mask), lo = x - hi (exact), two instructions an element;
// Layout, permutations and swizzles: kernels/gemm_mma_vec.cuh (the 02 of dev/tune_gemm_mma.py).
//
// 02's header:
// the mma.sync GEMM of kernels/gemm_mma.cuh with its shared-memory fragment reads
// vectorized, for C[M,N] = epilogue(A[M,K] @ B[K,N] + bias) (B n-contiguous, the block's weights).
//
// What changes against 01 (kernels/gemm_mma.cuh), and why: 01 reads every TF32 fragment element with
// its own 4-byte LDS (24 a k8 step for a 64 x 32 warp tile) and rounds / splits it there; on Hopper the
// mma.sync path is issue-bound before it is tensor-bound in tf32x3. Here
//   - k is permuted inside each 16-wide k chunk (the sum over k does not care in which order the
//     products come, as long as A and B agree): MMA step s of the chunk gives lane t the physical k
//     4t + 2s (fragment k index t) and 4t + 2s + 1 (index t + 4), so a lane's A values for both steps of
//     a chunk are one 16-byte LDS per row;
//   - n is permuted inside the warp tile: n8 tile j's column g is the physical column 4g + j, so a
//     lane's B values for the four n8 tiles (WTN = 32) are one 16-byte LDS per k row, and its outputs
//     are 8 adjacent columns per row (two 16-byte stores);
//   - both tiles are XOR-swizzled at 16-byte granularity, unpadded, so that those LDS.128 are
//     conflict-free: A element (r, k) at r * 32 + ((k / 4) ^ 4 (r & 1)) * 4 + k % 4; B element (k, n)
//     at k * BN + ((n / 4) ^ 2 ((k / 4) & 3)) * 4 + n % 4;
//   - tf32x3's split is split_tf32_fast (3 integer / FP instructions), and each k8 step's three
//     products, summed from zero in the tensor core, are added to acc by FADDs (K / 8 roundings).
// Needs: K % 4 == 0, N % 4 == 0, A and B 16-byte aligned (the host falls back to 01 otherwise); BK 32;
// the warp tile WTN = 32 (four n8 tiles) and WTM a multiple of 16; BN a multiple of 32.
#pragma once
#include "common.cuh"
#include "gemm_epilogue.cuh"
#include "mma.cuh"

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct VecTile3 {
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

__device__ __forceinline__ int v3_a_index(int r, int k) { return r * 32 + (((k >> 2) ^ ((r & 1) << 2)) << 2) + (k & 3); }

template <int BN>
__device__ __forceinline__ int v3_b_index(int k, int n) {
    return k * BN + (((n >> 2) ^ (((k >> 2) & 3) << 1)) << 2) + (n & 3);
}

template <class T, int PASSES, int EPI, bool PARTIAL>
__device__ __forceinline__ void gemm_v3_body(const float* __restrict__ A, const float* __restrict__ B,
                                              const float* __restrict__ bias, const float* R, float* C, int M,
                                              int N, int K, int epi = EPI) {
    constexpr int MT = T::MT;
    extern __shared__ float4 gemm_smem4[];
    float* smem = reinterpret_cast<float*>(gemm_smem4);

    const int m0 = blockIdx.x * T::BM, n0 = blockIdx.y * T::BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
    const int KT = (K + T::BK - 1) / T::BK;

    auto load_stage = [&](int stage, int kt) {
        float* sA = smem + stage * T::STAGE_FLOATS;
        float* sB = sA + T::A_FLOATS;
        const int k0 = kt * T::BK;
        constexpr int A_CHUNKS = T::BM * (T::BK / 4);
#pragma unroll
        for (int i = 0; i < (A_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (A_CHUNKS % T::THREADS != 0 && c >= A_CHUNKS) break;
            const int r = c >> 3, kc = (c & 7) << 2;
            const int gr = m0 + r, gk = k0 + kc;
            const bool ok = gr < M && gk < K;
            cp_async16(sA + v3_a_index(r, kc), ok ? A + (long long)gr * K + gk : A, ok ? 16 : 0);
        }
        constexpr int B_CHUNKS = T::BK * (T::BN / 4);
#pragma unroll
        for (int i = 0; i < (B_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (B_CHUNKS % T::THREADS != 0 && c >= B_CHUNKS) break;
            const int r = c / (T::BN / 4), nc = (c % (T::BN / 4)) << 2;
            const int gk = k0 + r, gn = n0 + nc;
            const bool ok = gk < K && gn < N;
            cp_async16(sB + v3_b_index<T::BN>(r, nc), ok ? B + (long long)gk * N + gn : B, ok ? 16 : 0);
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
                ra[i][0] = *reinterpret_cast<const float4*>(sA + v3_a_index(a_row + 16 * i, kk + 4 * t));
                ra[i][1] = *reinterpret_cast<const float4*>(sA + v3_a_index(a_row + 16 * i + 8, kk + 4 * t));
            }
#pragma unroll
            for (int q = 0; q < 4; ++q)
                rb[q] = *reinterpret_cast<const float4*>(sB + v3_b_index<T::BN>(kk + 4 * t + q, b_col));
            if (PASSES == 3) {
                // x = hi + lo: hi = x truncated to tf32 (a mask), lo = x - hi exact (its low bits
                // truncated by the tensor core). B of both steps first, then one m16 tile at a time.
                unsigned bh[2][4][2], bl[2][4][2];
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float4 r = rb[2 * s + e];
                            const float x = j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w;
                            bh[s][j][e] = __float_as_uint(x) & 0xffffe000u;
                            bl[s][j][e] = __float_as_uint(x - __uint_as_float(bh[s][j][e]));
                        }
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    float part[4][4];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) part[j][e] = 0.0f;
#pragma unroll
                    for (int s = 0; s < 2; ++s) {
                        const float a[4] = {s ? ra[i][0].z : ra[i][0].x, s ? ra[i][1].z : ra[i][1].x,
                                            s ? ra[i][0].w : ra[i][0].y, s ? ra[i][1].w : ra[i][1].y};
                        unsigned ah[4], al[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            ah[e] = __float_as_uint(a[e]) & 0xffffe000u;
                            al[e] = __float_as_uint(a[e] - __uint_as_float(ah[e]));
                        }
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(PARTIAL ? part[j] : acc[i][j], al, bh[s][j]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(PARTIAL ? part[j] : acc[i][j], ah, bl[s][j]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) mma_tf32_16x8x8(PARTIAL ? part[j] : acc[i][j], ah, bh[s][j]);
                    }
                    if (PARTIAL) {
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[i][j][e] += part[j][e];
                    }
                }
            } else {
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    unsigned bh[4][2];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float4 r = rb[2 * s + e];
                            bh[j][e] = tf32_rna_bits(j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w);
                        }
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        const float a[4] = {s ? ra[i][0].z : ra[i][0].x, s ? ra[i][1].z : ra[i][1].x,
                                            s ? ra[i][0].w : ra[i][0].y, s ? ra[i][1].w : ra[i][1].y};
                        unsigned ah[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e) ah[e] = tf32_rna_bits(a[e]);
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
                    float4 o = make_float4(v[0], v[1], v[2], v[3]);
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
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (col + j < N) C[idx + j] = gemm_epi_value<EPI>(v[j], bias, R, idx + j, col + j, e_op);
                }
            }
        }
    }
}

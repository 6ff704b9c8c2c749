// gemm_mma_f16.cuh: the one-file export's GEMM on sm_80+, sm_90a included (solve.cu, path 2):
// C[M,N] = epilogue(A[M,K] @ W[K,N] + bias) on fp16 tensor cores (mma.sync m16n8k16, fp32 accumulation),
// its operands stored as fp16 planes, at the accuracy of fp32 (PLANES 2: three products) or of TF32
// (PLANES 1: one). On the H200 mma.sync reaches 637 TFLOP/s in fp16 against 318 in TF32
// (dev/micro_mma_peak.py): fp32 accuracy costs three fp16 products where tf32x3 took three TF32 ones.
//
// Planes. An fp32 operand X (A [M, K] or W [K, N], row-major) is stored as
//   hi = fp16(X s)                    rounded to nearest: 11 significant bits
//   lo = fp16((X s - hi) 2^11)        PLANES 2 only: the next 11 bits, scaled up into fp16's normal range
// s a power of two per operand (solve.cu works it out from a bound on |X|: bound * s <= 2^14, below fp16's
// largest finite 65504, so hi never overflows). X s - hi is exact in fp32, so X = (hi + 2^-11 lo) / s to
// within 2^-22 |X| (and 2^-35 / s absolute where |X s| is below fp16's normal range, 2^-14): the same
// representation error as tf32x3's split, on the same 11-bit hi (TF32's and fp16's significands are both
// 11 bits; fp16's range is what the scale is for).
// Products (acc ~ A W s_a s_w):
//   PLANES 2: Ah Wh, a k16 step at a time summed from zero in the tensor core and added to acc by FADDs
//             (the tensor core truncates its fp32 sums; over a k16 partial that costs what fp32 rounding
//             does), and Ah Wl + Al Wh accumulated in the tensor core over all of K (accl: 2^-11 the size,
//             so its truncation is 2^-11 smaller); Al Wl (2^-22) dropped. C = (acc + 2^-11 accl) / (s_a s_w).
//   PLANES 1: Ah Wh accumulated in the tensor core, as the TF32 GEMMs do. C = acc / (s_a s_w).
// Shapes: a block tile BM x BN of WARPS_M x WARPS_N warps, a warp WTM x WTN (MT m16 tiles by NT n8 tiles);
// BK = 32 k per shared stage, STAGES cp.async stages. Fragments come from ldmatrix (A) and ldmatrix.trans
// (W), both tiles XOR-swizzled at 16-byte granularity so that ldmatrix is conflict-free:
//   A [BM][32] halves, 16-byte chunk c (k 8c .. 8c + 7) of row r at r * 64 + (c ^ ((r / 2) & 3)) * 16 bytes;
//   W [32][BN] halves, chunk c (n 8c .. 8c + 7) of k row r at r * 2 BN + (c ^ (r & 7)) * 16 bytes.
// Needs K % 8 == 0, N % 8 == 0, every plane 16-byte aligned (solve.cu's, always). Device code only; the
// PTX here needs sm_80 (the export compiles these bodies for its path 2 only).
#pragma once
#include "common.cuh"
#include "gemm_epilogue.cuh"
#include "mma.cuh"

#define F16_LO_SCALE 2048.0f       // 2^11: lo's scale against hi
#define F16_LO_UNSCALE 4.8828125e-4f  // 2^-11

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int PLANES_>
struct GemmF16Tile {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
    static constexpr int PLANES = PLANES_;
    static constexpr int BK = 32;
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16, NT = WTN / 8;
    static_assert(WTM % 16 == 0 && WTN % 16 == 0, "a warp tile of whole m16 tiles and pairs of n8 tiles");
    static_assert(BN % 64 == 0, "W's swizzle needs rows of at least 8 16-byte chunks");
    static_assert(PLANES == 1 || PLANES == 2, "one plane (hi) or two (hi, lo)");
    static constexpr int A_BYTES = BM * BK * 2, W_BYTES = BK * BN * 2;
    static constexpr int STAGE_BYTES = PLANES * (A_BYTES + W_BYTES);
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
};

// ---------------------------------------------------------------------------------------------
// fp16 helpers (inline PTX: no cuda_fp16.h, so NVRTC compiles this file as is).

// (x0, x1) -> fp16x2 rounded to nearest, x0 in the low half.
__device__ __forceinline__ unsigned f16x2_rn(float x0, float x1) {
    unsigned r;
#ifdef MMA_NO_CP_ASYNC
    r = 0;
    __trap();
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(x1), "f"(x0));
#endif
    return r;
}

// fp16x2 -> (low half, high half) as floats (exact).
__device__ __forceinline__ void f16x2_unpack(unsigned h, float& x0, float& x1) {
    asm("{ .reg .f16 l, u; mov.b32 {l, u}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, u; }\n"
        : "=f"(x0), "=f"(x1)
        : "r"(h));
}

// (x0, x1) s -> hi, lo planes' fp16x2 (the split of the file's header; lo only where planes == 2).
__device__ __forceinline__ void f16_split2(float x0, float x1, float s, int planes, unsigned& hi, unsigned& lo) {
    x0 *= s, x1 *= s;
    hi = f16x2_rn(x0, x1);
    lo = 0;
    if (planes == 2) {
        float h0, h1;
        f16x2_unpack(hi, h0, h1);
        lo = f16x2_rn((x0 - h0) * F16_LO_SCALE, (x1 - h1) * F16_LO_SCALE);
    }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// d[16x8] (+)= a[16x16 (row)] * b[16x8 (col)], fp16 operands, fp32 accumulation. Fragment layout (PTX ISA,
// mma.m16n8k16 .f16), g = lane / 4, t = lane % 4, each register two fp16 adjacent in k:
//   a0 (g, 2t)  a1 (g+8, 2t)  a2 (g, 2t+8)  a3 (g+8, 2t+8)     [row, k]
//   b0 (2t, g)  b1 (2t+8, g)                                  [k, col]
//   d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1)    [row, col]
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#ifdef MMA_NO_CP_ASYNC
    __trap();
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The same from a zero accumulator: d = a * b.
__device__ __forceinline__ void mma_f16_16x8x16_zero(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                     unsigned b1) {
#ifdef MMA_NO_CP_ASYNC
    __trap();
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#endif
}

// ---------------------------------------------------------------------------------------------
// Planes from fp32, and the epilogue's stores.

// X [rows, cols] fp32 (row stride ld floats, 16-byte aligned rows) -> hi [rows, cols] and, where planes == 2,
// lo [rows, cols], with the scale sc. cols % 4 == 0. A grid-stride loop, four values a thread a step.
__device__ __forceinline__ void gemm_f16_planes(const float* __restrict__ X, int ld, unsigned short* __restrict__ hi,
                                                unsigned short* __restrict__ lo, long long rows, int cols, float sc,
                                                int planes) {
    const int c4 = cols >> 2;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows * c4;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / c4;
        const int c = (int)(i % c4) << 2;
        const float4 v = *reinterpret_cast<const float4*>(X + r * ld + c);
        uint2 h, l;
        f16_split2(v.x, v.y, sc, planes, h.x, l.x);
        f16_split2(v.z, v.w, sc, planes, h.y, l.y);
        *reinterpret_cast<uint2*>(hi + r * cols + c) = h;
        if (planes == 2) *reinterpret_cast<uint2*>(lo + r * cols + c) = l;
    }
}

// Outputs (row, col), (row, col + 1) (idx = row N + col, col even, N % 8 == 0): v through the epilogue e_op
// (a GEMM_EPI_*), then to C (fp32) or, where Ch is set, to the planes Ch, Cl with the scale out_s.
__device__ __forceinline__ void gemm_f16_store2(float* C, unsigned short* Ch, unsigned short* Cl, float out_s,
                                                int planes, const float* bias, const float* R, long long idx, int col,
                                                float2 v, int e_op) {
    if (e_op != GEMM_EPI_NONE) {
        const float2 bb = __ldg(reinterpret_cast<const float2*>(bias + col));
        v.x += bb.x, v.y += bb.y;
        if (e_op == GEMM_EPI_GELU) {
            v.x = gelu_tanh(v.x), v.y = gelu_tanh(v.y);
        } else if (e_op == GEMM_EPI_RESIDUAL) {
            const float2 rr = *reinterpret_cast<const float2*>(R + idx);  // (R may be C: read first)
            v.x += rr.x, v.y += rr.y;
        }
    }
    if (Ch != nullptr) {
        unsigned h, l;
        f16_split2(v.x, v.y, out_s, planes, h, l);
        *reinterpret_cast<unsigned*>(Ch + idx) = h;
        if (planes == 2) *reinterpret_cast<unsigned*>(Cl + idx) = l;
    } else {
        *reinterpret_cast<float2*>(C + idx) = v;
    }
}

// Split K's second pass over `tiles` output tiles BM x BN from tile0 on (tile t at rows (t % tiles_m) BM,
// columns (t / tiles_m) BN): epilogue(P[t][0] + ... + P[t][splits - 1] + bias) to C or the planes, each
// tile's partials dense [BM][BN] at P + ((t - tile0) splits + z) BM BN (already divided by the scales),
// summed in z order (deterministic). Two outputs a thread.
__device__ __forceinline__ void gemm_f16_splitk_reduce(const float* __restrict__ P, int splits, int tile0, int tiles,
                                                       int tiles_m, int BM, int BN, const float* __restrict__ bias,
                                                       const float* R, float* C, unsigned short* Ch,
                                                       unsigned short* Cl, const float* out_s, int planes, int M,
                                                       int N, int epi) {
    const long long i2 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_tile = BM * BN / 2;
    if (i2 >= (long long)tiles * per_tile) return;
    const int r = (int)(i2 / per_tile), e = (int)(i2 % per_tile);
    const int lr = e / (BN / 2), lc = (e % (BN / 2)) * 2;
    const int t = tile0 + r;
    const int row = (t % tiles_m) * BM + lr, col = (t / tiles_m) * BN + lc;
    if (row >= M || col >= N) return;
    const float* p = P + (long long)r * splits * BM * BN + lr * BN + lc;
    float2 v = *reinterpret_cast<const float2*>(p);
    for (int z = 1; z < splits; ++z) {
        const float2 q = *reinterpret_cast<const float2*>(p + (long long)z * BM * BN);
        v.x += q.x, v.y += q.y;
    }
    gemm_f16_store2(C, Ch, Cl, Ch != nullptr ? *out_s : 1.0f, planes, bias, R, (long long)row * N + col, col, v,
                    epi);
}

// ---------------------------------------------------------------------------------------------
// The GEMM. One block a (tile, split): the grid is 1-D, block b on output tile tile0 + b / splits (tile t at
// rows (t % tiles_m) BM, columns (t / tiles_m) BN: consecutive blocks share W's columns) and k split
// b % splits. A's planes Ah, Al [M, K] with the scale *sa, W's Wh, Wl [K, N] with *sw (Al, Wl unused at
// PLANES 1). splits == 1: the epilogue epi into C, or into the planes Ch, Cl (scale *out_s) where Ch is set.
// splits > 1: the split's k tiles [z per, (z + 1) per) only, its partial sum / (sa sw) stored dense
// [BM][BN] at P + ((t - tile0) splits + z) BM BN, no epilogue (gemm_f16_splitk_reduce applies it).
template <class T>
__device__ __forceinline__ void gemm_f16_body(const unsigned short* __restrict__ Ah, const unsigned short* __restrict__ Al,
                                              const unsigned short* __restrict__ Wh, const unsigned short* __restrict__ Wl,
                                              const float* __restrict__ sa, const float* __restrict__ sw,
                                              const float* __restrict__ bias, const float* R, float* C,
                                              unsigned short* Ch, unsigned short* Cl, const float* __restrict__ out_s,
                                              int M, int N, int K, int epi, int tile0, int splits, float* P) {
    constexpr int MT = T::MT, NT = T::NT, PL = T::PLANES;
    extern __shared__ float4 gemm_smem4[];
    const unsigned smem0 = smem_u32(gemm_smem4);

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

    // byte offsets in shared memory: stage s's A plane p at s STAGE_BYTES + p A_BYTES, its W planes after A's
    char* const sbase = reinterpret_cast<char*>(gemm_smem4);
    auto a_at = [&](int stage, int p) { return stage * T::STAGE_BYTES + p * T::A_BYTES; };
    auto w_at = [&](int stage, int p) { return stage * T::STAGE_BYTES + PL * T::A_BYTES + p * T::W_BYTES; };

    auto load_stage = [&](int stage, int kt) {
        const int k0 = (kt_first + kt) * T::BK;
        constexpr int A_CHUNKS = T::BM * 4;  // 16-byte chunks a plane
#pragma unroll
        for (int i = 0; i < (A_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (A_CHUNKS % T::THREADS != 0 && c >= A_CHUNKS) break;
            const int r = c >> 2, kc = c & 3;
            const int gr = m0 + r, gk = k0 + 8 * kc;
            const bool ok = gr < M && gk < K;
            const long long off = ok ? (long long)gr * K + gk : 0;
            const unsigned dst = r * 64 + ((kc ^ ((r >> 1) & 3)) << 4);
#pragma unroll
            for (int p = 0; p < PL; ++p)
                cp_async16(sbase + a_at(stage, p) + dst, (p ? Al : Ah) + off, ok ? 16 : 0);
        }
        constexpr int W_CHUNKS = T::BK * (T::BN / 8);
#pragma unroll
        for (int i = 0; i < (W_CHUNKS + T::THREADS - 1) / T::THREADS; ++i) {
            const int c = threadIdx.x + i * T::THREADS;
            if (W_CHUNKS % T::THREADS != 0 && c >= W_CHUNKS) break;
            const int r = c / (T::BN / 8), nc = c % (T::BN / 8);
            const int gk = k0 + r, gn = n0 + 8 * nc;
            const bool ok = gk < K && gn < N;
            const long long off = ok ? (long long)gk * N + gn : 0;
            const unsigned dst = r * (2 * T::BN) + ((nc ^ (r & 7)) << 4);
#pragma unroll
            for (int p = 0; p < PL; ++p)
                cp_async16(sbase + w_at(stage, p) + dst, (p ? Wl : Wh) + off, ok ? 16 : 0);
        }
    };

    float acc[MT][NT][4], accl[PL == 2 ? MT : 1][PL == 2 ? NT : 1][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    if constexpr (PL == 2) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) accl[i][j][e] = 0.0f;
    }

#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }

    // ldmatrix row addresses: A, m16 tile i: row wm WTM + 16 i + (lane % 16), k chunk (lane / 16) (+ 2 per k16);
    // W, n8 tiles 2jj, 2jj + 1: k row (lane % 16) (+ 16 per k16), n chunk (wn WTN + 16 jj) / 8 + lane / 16.
    const int a_r = wm * T::WTM + (lane & 15), a_c = lane >> 4;
    const int w_r = lane & 15, w_c = (wn * T::WTN) / 8 + (lane >> 4);

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<T::STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + T::STAGES - 1;
            if (nk < KT) load_stage(nk % T::STAGES, nk);
            cp_async_commit();
        }
        const int stage = kt % T::STAGES;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {  // the two k16 steps of the stage
            unsigned ah[MT][4], al[PL == 2 ? MT : 1][4], wh[NT][2], wl[PL == 2 ? NT : 1][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r = a_r + 16 * i, c = 2 * kk + a_c;
                const unsigned off = r * 64 + ((c ^ ((r >> 1) & 3)) << 4);
                ldmatrix_x4(ah[i], smem0 + a_at(stage, 0) + off);
                if constexpr (PL == 2) ldmatrix_x4(al[i], smem0 + a_at(stage, 1) + off);
            }
#pragma unroll
            for (int jj = 0; jj < NT / 2; ++jj) {
                const int r = 16 * kk + w_r, c = w_c + 2 * jj;
                const unsigned off = r * (2 * T::BN) + ((c ^ (r & 7)) << 4);
                unsigned q[4];
                ldmatrix_x4_trans(q, smem0 + w_at(stage, 0) + off);
                wh[2 * jj][0] = q[0], wh[2 * jj][1] = q[1], wh[2 * jj + 1][0] = q[2], wh[2 * jj + 1][1] = q[3];
                if constexpr (PL == 2) {
                    ldmatrix_x4_trans(q, smem0 + w_at(stage, 1) + off);
                    wl[2 * jj][0] = q[0], wl[2 * jj][1] = q[1], wl[2 * jj + 1][0] = q[2], wl[2 * jj + 1][1] = q[3];
                }
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if constexpr (PL == 2) {
                        float part[4];
                        mma_f16_16x8x16_zero(part, ah[i], wh[j][0], wh[j][1]);
                        mma_f16_16x8x16(accl[i][j], ah[i], wl[j][0], wl[j][1]);
                        mma_f16_16x8x16(accl[i][j], al[i], wh[j][0], wh[j][1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[i][j][e] += part[e];
                    } else {
                        mma_f16_16x8x16(acc[i][j], ah[i], wh[j][0], wh[j][1]);
                    }
                }
        }
    }
    cp_async_wait<0>();

    const float inv = 1.0f / (*sa * *sw);  // a power of two: exact
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if constexpr (PL == 2) acc[i][j][e] += accl[i][j][e] * F16_LO_UNSCALE;
                acc[i][j][e] *= inv;
            }

    // acc[i][j][e]: row wm WTM + 16 i + g (+ 8 for e >= 2), column wn WTN + 8 j + 2t (+ 1 for odd e)
    if (splits > 1) {  // the partial tile, dense
        float* out = P + ((long long)(tile - tile0) * splits + z) * T::BM * T::BN;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    *reinterpret_cast<float2*>(out + (wm * T::WTM + 16 * i + g + 8 * h) * T::BN + wn * T::WTN + 8 * j +
                                               2 * t) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        return;
    }
    const float os = Ch != nullptr ? *out_s : 1.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * T::WTM + 16 * i + g + 8 * h;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col = n0 + wn * T::WTN + 8 * j + 2 * t;
                if (col < N)
                    gemm_f16_store2(C, Ch, Cl, os, PL, bias, R, (long long)row * N + col, col,
                                    make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]), epi);
            }
        }
}

// lm_screen.cu: the greedy decode step's LM head at batch 1 in two passes, so that it reads an int8
// copy of the head (a quarter of float32's bytes, half of bf16's) and only a few of the exact rows,
// and still gives the token the full head (gemv_*_nt_ln_m1 with its argmax) gives, bit for bit.
// It includes gemv.cu's device code (the LM head's LayerNorm, row order and argmax finish), and must be
// built with the #defines of the full head's build (gpt2block: cuda/build.lm_screen) so that
// its LayerNorm and lanes are the full head's. One build serves one width: LM_SCREEN_J (below).
//
//   lm_screen(x, q, rowp, ln_g, ln_b, eps, N, K, ub, lb_part, h_out)        (pass 1, K <= 256 LM_SCREEN_J)
//     x [1, K] the residual stream; q int8 [N, K] and rowp float4 [N] the screen's table (below);
//     ln_g, ln_b [K] ln_f. Every block forms h = LN(x) exactly as the full head does
//     (gemv_ln_row_block), then for each row n an interval [lb_n, ub_n] that holds both the exact
//     dot product h . w_n and the full head's float32 result for it. Writes ub [N], each block's
//     largest lb into lb_part [gridDim.x], and h into h_out [K] (block 0).
//   lm_rescore_{f32,bf16}(w, h, ub, lb_part, G1, N, K, wpr, <GemvArgmax's six>)  (pass 2)
//     w [N, K] the exact head (float32, or bf16 bits); L = max(lb_part[0 .. G1 - 1]). Every row
//     with ub_n >= L is a candidate: the full head's winner is one of them, since its value is at
//     least every row's, and so at least L. Each candidate's logit is formed exactly as the full
//     head forms it (lm_exact_row: the same h, lanes, order of FMAs, warp sums and slices of wpr),
//     and the first index of the largest wins (argmax.cuh); the argmax's outputs as the full head's
//     (GemvArgmax: out, the decode step's ints, mapped host memory). No logits are written.
//   lm_screen_table_{f32,bf16}(w, N, K, q, rowp)
//     the table below from w [N, K] (float32, or bf16 bits), bit for bit gpt2block.screen.table's.
//
// The table: row n's scale s_n = max(max_k |w_nk| / 127 rounded to a float32, 2^-126) (1 for a row of
// zeros), q_nk = round(w_nk / s_n) in [-127, 127], and rowp[n] = (s_n, d_n, a_n, m_n): d_n =
// max_k |w_nk - s_n q_nk| rounded up to a float32, and up to 2^-126 when it is below (0 stays 0),
// a_n = sum_k |q_nk|, m_n = max_k |w_nk|; d_n = +inf marks a row with a non-finite weight (always a
// candidate). s_n and d_n are normal floats, so that -ftz (which CuPy's builds use) cannot flush them.
// m_n may be subnormal, and then flushed to 0 where the screen widens it to float64: harmless, since every
// weight of such a row is subnormal, so the full head flushes them all and its sum is 0, within
// m_n |h|_1 < 2^-126 |h|_1 of the exact sum, which LM_SCREEN_FTZ's 2^-120 |h|_1 covers.
//
// The bound. h is quantized too, p_k = round(h_k / t) in [-P, P], t = max|h| / P, P the largest
// that keeps 127 P K within an int32 (and at most 32767), so that sum_k q_nk p_k is exact (dp2a:
// int16 x int8 pairs, int32 sums). With h_k = t p_k + e_k (|e_k| <= 0.51 t) and w_nk = s_n q_nk + f_nk:
//   h . w_n = s_n t sum q p + sum_k h_k f_nk + s_n sum_k e_k q_nk,
// so |h . w_n - A_n| <= d_n |h|_1 + 0.51 s_n t a_n with A_n = s_n t sum q p; and the full head's
// float32 sum is within gamma_K sum_k |h_k w_nk| <= gamma_K m_n |h|_1 of h . w_n (gamma_K =
// K u / (1 - K u), u = 2^-24: any order of K float32 FMAs and adds). A_n and the bound are formed in
// float64 and widened by 2^-30 of the bound and 2^-40 of |A_n|; ub is rounded up, lb down to a float32.
// It is widened further for flushed subnormals (LM_SCREEN_FTZ, below). A non-finite h, an h whose largest
// |h_k| is below 2^-100, or a row whose terms could overflow float32 (m_n |h|_1 > 1e37), gives ub = +inf
// and lb = -inf: every row a candidate in the worst case, and the result still the full head's.
//
// Launch recipe: lm_screen: 256 threads, grid G1 >= 1 (any; gpt2block: 2 a SM, at most one per 8 R
// rows, R = LM_SCREEN_ROWS_J(LM_SCREEN_J)), dynamic shared memory 3 K floats + K int16 (h, then ln_f's
// g and b, then the quantized h); K % 8 == 0, K <= 256 LM_SCREEN_J.
// lm_rescore_*: 256 threads, grid G2 >= 1 (any; gpt2block: one a SM), dynamic shared memory K floats;
// wpr the full head's (gemv_nt_plan), so that every candidate's logit has the full head's bits.
// Both take part in programmatic dependent launch: pass 1 reads its table, q and g / b before its
// wait, pass 2 nothing.
// lm_screen_table_*: 256 threads (a warp a row), grid ceil(N / 8), no shared memory; N K < 2^31.

#define GEMV_DEVICE_ONLY
#include "gemv.cu"

// The build's width: the screen holds a lane's share of a table row, 8 bytes of each 256 columns, in
// registers, so it is built for J = ceil(K / 256) (build.py passes it: one J a model, one build). Any
// K <= 256 J is correct; J = 8 takes every K the screen takes (up to 2048), more slowly.
#ifndef LM_SCREEN_J
#error "LM_SCREEN_J is set by gpt2block/backends/cuda/build.py"
#endif

// Table rows a warp loads at once (their int32 sums meet by warp_sums): the bytes in flight are what
// the screen waits on. gpt2 (J = 3) b1 tok/s, one process (docs/PERFORMANCE.md, version 28): 4 rows,
// bf16 6,204-6,213 and fp32 5,216-5,221; 8 rows 6,415-6,421 and 5,320-5,338. From J = 5 on, 8 rows'
// loads spill (ptxas), so wider heads keep 4.
// Build parameters (build.py): LM_SCREEN_ROWS for J <= 4 (K <= 1024), LM_SCREEN_ROWS_WIDE for J > 4.
#ifndef LM_SCREEN_ROWS
#error "LM_SCREEN_ROWS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef LM_SCREEN_ROWS_WIDE
#error "LM_SCREEN_ROWS_WIDE is set by gpt2block/backends/cuda/build.py"
#endif
#define LM_SCREEN_ROWS_J(J) ((J) <= 4 ? LM_SCREEN_ROWS : LM_SCREEN_ROWS_WIDE)
// Bytes of the int8 table kept in the L2 from step to step (evict-last), spread over its rows as
// gemv_lm_keep spreads the full head's. gpt2 b1 at 8 rows a warp, tok/s (version 28): 0 MB bf16
// 6,366-6,379 / fp32 5,411-5,426; 16 MB 6,438-6,461 / 5,408-5,436; 24 MB 6,416-6,432 / 5,327-5,340;
// at 4 rows, 40 MB lost 0.6-1% against 24.
#define LM_SCREEN_PIN_BYTES (16ll << 20)
// Resident blocks per SM the screen's registers must allow (build.py: the host sizes the grid by it).
#ifndef LM_SCREEN_MIN_BLOCKS
#error "LM_SCREEN_MIN_BLOCKS is set by gpt2block/backends/cuda/build.py"
#endif

// Flushed subnormals: CuPy builds every module with -ftz, so each of the full head's FMAs and adds may lose
// up to 2^-126 to a flushed input or result. The interval is widened by LM_SCREEN_FTZ (K (m_n + 1) + |h|_1 + 8),
// which covers K flushed h_k (each |h_k w_nk| <= 2^-126 m_n), the flushed w_nk (sum <= 2^-126 |h|_1) and
// K + 8 flushed sums, with room to spare.
#define LM_SCREEN_FTZ 0x1p-120

// 8 bytes (8 int8 of a table row) before pdl_wait, with an L2 eviction policy (as ld_pre_wait4u).
__device__ __forceinline__ uint2 lm_ld8(const void* p, unsigned long long policy) {
    uint2 v;
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(policy));
    return v;
}

// |h|_1 and max |h_k| of the block's h in shared memory (K4 float4), every thread the same values
// (warp sums, then the warps in order); then h quantized into hq (int16 [K]) with p = round(h / t),
// t = max|h| / P. Returns t (0 when h is all zeros) through t_out and |h|_1 through l1_out.
__device__ __forceinline__ void lm_screen_quantize_h(const float* xs, short* hq, int K, double& l1_out, double& t_out) {
    __shared__ double part_l1[GEMV_NT_WARPS];
    __shared__ float part_max[GEMV_NT_WARPS];
    const int tid = threadIdx.x, warp = tid >> 5, K4 = K >> 2;
    const float4* xs4 = reinterpret_cast<const float4*>(xs);
    double l1 = 0.0;
    float mx = 0.0f;
    for (int k = tid; k < K4; k += GEMV_NT_THREADS) {
        const float4 v = xs4[k];
        l1 += ((double)fabsf(v.x) + (double)fabsf(v.y)) + ((double)fabsf(v.z) + (double)fabsf(v.w));
        mx = fmaxf(fmaxf(mx, fabsf(v.x)), fmaxf(fmaxf(fabsf(v.y), fabsf(v.z)), fabsf(v.w)));
        if (!(fabsf(v.x) <= 3.0e38f && fabsf(v.y) <= 3.0e38f && fabsf(v.z) <= 3.0e38f && fabsf(v.w) <= 3.0e38f))
            l1 = __longlong_as_double(0x7ff0000000000000ll);  // inf or NaN: marks h non-finite (fmaxf drops NaN)
    }
    l1 = warp_sum(l1);
    mx = warp_max(mx);
    if ((tid & 31) == 0) {
        part_l1[warp] = l1;
        part_max[warp] = mx;
    }
    __syncthreads();
    l1 = 0.0;
    mx = 0.0f;
#pragma unroll
    for (int w = 0; w < GEMV_NT_WARPS; ++w) {
        l1 += part_l1[w];
        mx = fmaxf(mx, part_max[w]);
    }
    const int P = min(32767, 2147483647 / (127 * K));
    // bounded only for a finite h whose largest |h_k| is at least 2^-100: below that, P / max|h| could
    // overflow and the full head's flushed subnormals (CuPy builds with -ftz) are no longer small
    // against t; then l1 is set to inf, which makes every row a candidate
    if (!(mx >= 0x1p-100f)) l1 = __longlong_as_double(0x7ff0000000000000ll);
    const bool finite = l1 <= 1.0e300;  // false for inf and NaN
    const float inv = finite ? (float)P / mx : 0.0f;
    for (int k = tid; k < K4; k += GEMV_NT_THREADS) {
        const float4 v = xs4[k];
        const float hv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int c = 0; c < 4; ++c) hq[4 * k + c] = (short)max(-P, min(P, __float2int_rn(hv[c] * inv)));
    }
    l1_out = l1;
    t_out = finite ? (double)mx / (double)P : 0.0;
    __syncthreads();  // hq complete
}

template <int J>
__device__ __forceinline__ void lm_screen_body(const float* __restrict__ x, const signed char* __restrict__ q,
                                               const float4* __restrict__ rowp, const float* __restrict__ ln_g,
                                               const float* __restrict__ ln_b, float eps, int N, int K,
                                               float* __restrict__ ub, float* __restrict__ lb_part,
                                               float* __restrict__ h_out) {
    constexpr int R = LM_SCREEN_ROWS_J(J);
    constexpr int LPR = 32 / R;  // lanes per row sum (warp_sums)
    extern __shared__ float4 gemv_smem4[];
    float* xs = reinterpret_cast<float*>(gemv_smem4);  // h [K], then g, b [2K], then hq int16 [K]
    short* hq = reinterpret_cast<short*>(xs + 3 * K);
    __shared__ float lb_warp[GEMV_NT_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int K8 = K >> 3;  // 8-byte chunks of a table row; lane l takes l, l + 32, ...
    const int rows_blk = GEMV_NT_WARPS * R;

    uint2 wv[J][R];
    const signed char* wrow[R];
    unsigned long long pol = 0;
    auto set_rows = [&](int n0) {
#pragma unroll
        for (int r = 0; r < R; ++r) wrow[r] = q + (long long)min(n0 + r, N - 1) * K;
        pol = l2_policy(gemv_lm_keep(LM_SCREEN_PIN_BYTES, n0, R, N, K, 1));
    };
    auto load_rows = [&]() {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int c = lane + 32 * j;
#pragma unroll
            for (int r = 0; r < R; ++r) wv[j][r] = c < K8 ? lm_ld8(wrow[r] + 8 * c, pol) : make_uint2(0u, 0u);
        }
    };
    // row n0 + (lane / LPR)'s table entry, for the lane that finishes that row
    float4 my_rowp = make_float4(0.f, 0.f, 0.f, 0.f);
    const int e_r = lane / LPR;
    auto load_rowp = [&](int n0) {
        if (lane % LPR == 0 && n0 + e_r < N) {
            const float* p = reinterpret_cast<const float*>(rowp + n0 + e_r);
            my_rowp = ld_pre_wait4(p);
        }
    };

    pdl_trigger();
    const int first = blockIdx.x * rows_blk;
    set_rows(first + warp * R);
    load_rows();  // the table only: before the wait
    load_rowp(first + warp * R);
    gemv_ln_stage_gb(ln_g, ln_b, xs + K, K);
    pdl_wait();
    gemv_ln_row_block(x, xs + K, xs, K, eps);  // h, exactly as the full head's (gemv_nt_body's at one token)
    double l1h, t;
    lm_screen_quantize_h(xs, hq, K, l1h, t);
    if (blockIdx.x == 0)
        for (int k = threadIdx.x; k < K; k += GEMV_NT_THREADS) h_out[k] = xs[k];
    uint4 hv[J];  // this lane's chunks of hq: 8 int16 each
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int c = lane + 32 * j;
        hv[j] = c < K8 ? reinterpret_cast<const uint4*>(hq)[c] : make_uint4(0u, 0u, 0u, 0u);
    }
    const bool h_finite = l1h <= 1.0e300;
    const double gamma = (double)K * 0x1p-24 / (1.0 - (double)K * 0x1p-24);

    float lb_best = NEG_INF_F32;
    for (int n_blk = first; n_blk < N; n_blk += gridDim.x * rows_blk) {  // the same trip count in every warp
        const int n0 = n_blk + warp * R;
        if (n_blk != first) {
            set_rows(n0);
            load_rows();
            load_rowp(n0);
        }
        int acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0;
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                acc[r] = __dp2a_lo((int)hv[j].x, (int)wv[j][r].x, acc[r]);
                acc[r] = __dp2a_hi((int)hv[j].y, (int)wv[j][r].x, acc[r]);
                acc[r] = __dp2a_lo((int)hv[j].z, (int)wv[j][r].y, acc[r]);
                acc[r] = __dp2a_hi((int)hv[j].w, (int)wv[j][r].y, acc[r]);
            }
        const int sum = warp_sums<R>(acc, lane);  // row e_r's (integers: exact in any order)
        const int n = n0 + e_r;
        if (lane % LPR == 0 && n < N) {
            const double s = my_rowp.x, d = my_rowp.y, a = my_rowp.z, m = my_rowp.w;
            float u = __int_as_float(0x7f800000), l = NEG_INF_F32;  // every row a candidate unless bounded
            if (h_finite && d <= 1.0e300 && m * l1h <= 1.0e37) {
                const double A = (double)sum * (s * t);
                const double B = (d * l1h + 0.51 * s * t * a + gamma * m * l1h + LM_SCREEN_FTZ * (K * (m + 1.0) + l1h + 8.0))
                                     * (1.0 + 0x1p-30) + 0x1p-40 * fabs(A);
                u = __double2float_ru(A + B);
                l = __double2float_rd(A - B);
                if ((double)u < A + B) u = 0x1p-126f;  // a subnormal rounded up, then flushed to 0
                if ((double)l > A - B) l = -0x1p-126f;
            }
            ub[n] = u;
            lb_best = fmaxf(lb_best, l);
        }
    }
    lb_best = warp_max(lb_best);
    if (lane == 0) lb_warp[warp] = lb_best;
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = NEG_INF_F32;
#pragma unroll
        for (int w = 0; w < GEMV_NT_WARPS; ++w) b = fmaxf(b, lb_warp[w]);
        lb_part[blockIdx.x] = b;
    }
}

// Row n's logit as the full head (gemv_nt_body, one token, wpr warps a row group) forms it: slice s of
// K is [s k_span, (s + 1) k_span); lane l adds its 16-byte chunks l, l + 32, ... of the slice in order,
// each chunk's CPT products by fmaf in order; the slice's 32 lane sums by the xor butterfly 16, 8, .., 1
// (warp_sums meets them in the same tree); the slices added in order. Every lane returns the sum.
template <bool BF16>
__device__ __forceinline__ float lm_exact_row(const typename GemvW<BF16>::T* __restrict__ wrow, const float* hs,
                                              int K, int wpr, int lane) {
    constexpr int CPT = GemvW<BF16>::CPT;
    constexpr int STEP = 32 * CPT;
    constexpr int U = 4;  // chunks in flight per lane
    typedef GemvRaw<BF16> Raw;
    const int k_span = (((K + wpr - 1) / wpr + CPT - 1) / CPT) * CPT;
    float total = 0.0f;
    for (int s = 0; s < wpr; ++s) {
        const int k_lo = s * k_span, k_hi = min(K, k_lo + k_span);
        float a = 0.0f;
        for (int k0 = k_lo + lane * CPT; k0 < k_hi; k0 += U * STEP) {
            typename Raw::T v[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (k0 + u * STEP < k_hi) v[u] = Raw::template load<false>(wrow + k0 + u * STEP, 0ull);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = k0 + u * STEP;
                if (k >= k_hi) break;
                float wf[CPT];
                unpack16(v[u], wf);
#pragma unroll
                for (int c = 0; c < CPT; ++c) a = fmaf(hs[k + c], wf[c], a);
            }
        }
        const float ss = warp_sum(a);
        total = s == 0 ? ss : total + ss;
    }
    return total;
}

#define LM_RESCORE_TILES 2  // 32-row tiles of ub a warp loads at once
template <bool BF16>
__device__ __forceinline__ void lm_rescore_body(const typename GemvW<BF16>::T* __restrict__ w, const float* h,
                                                const float* ub, const float* lb_part, int G1, int N, int K, int wpr,
                                                GemvArgmax am) {
    extern __shared__ float4 gemv_smem4[];
    float* hs = reinterpret_cast<float*>(gemv_smem4);  // h [K]
    __shared__ float lb_warp[GEMV_NT_WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_trigger();
    pdl_wait();
    for (int k = tid; k < (K >> 2); k += GEMV_NT_THREADS)
        cp_async16(gemv_smem4 + k, reinterpret_cast<const float4*>(h) + k, 16);
    cp_async_commit();
    const long long lo = (long long)N * blockIdx.x / gridDim.x, hi = (long long)N * (blockIdx.x + 1) / gridDim.x;
    constexpr int T = LM_RESCORE_TILES;
    float u[T];
#pragma unroll
    for (int i = 0; i < T; ++i) {
        const long long n = lo + (long long)(warp + GEMV_NT_WARPS * i) * 32 + lane;
        u[i] = n < hi ? __ldcg(ub + n) : NEG_INF_F32;
    }
    float L = NEG_INF_F32;
    for (int i = tid; i < G1; i += GEMV_NT_THREADS) L = fmaxf(L, __ldcg(lb_part + i));
    L = warp_max(L);
    if (lane == 0) lb_warp[warp] = L;
    cp_async_wait<0>();
    __syncthreads();  // h and the warps' maxima
#pragma unroll
    for (int q = 0; q < GEMV_NT_WARPS; ++q) L = fmaxf(L, lb_warp[q]);

    float best_v = NEG_INF_F32;
    int best_i = ARGMAX_NONE;
    for (long long base = lo; base < hi; base += (long long)GEMV_NT_WARPS * 32 * T) {
        if (base != lo) {
#pragma unroll
            for (int i = 0; i < T; ++i) {
                const long long n = base + (long long)(warp + GEMV_NT_WARPS * i) * 32 + lane;
                u[i] = n < hi ? __ldcg(ub + n) : NEG_INF_F32;
            }
        }
#pragma unroll
        for (int i = 0; i < T; ++i) {
            const long long tile = base + (long long)(warp + GEMV_NT_WARPS * i) * 32;
            unsigned mask = __ballot_sync(0xffffffffu, u[i] >= L && tile + lane < hi);
            while (mask) {
                const int r = __ffs(mask) - 1;
                mask &= mask - 1;
                const int n = (int)(tile + r);
                const float v = lm_exact_row<BF16>(w + (long long)n * K, hs, K, wpr, lane);
                if (argmax_better(v, n, best_v, best_i)) {
                    best_v = v;
                    best_i = n;
                }
            }
        }
    }
    gemv_argmax_finish<1>(am, best_v, best_i, 1, lane, warp);
}

extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS, LM_SCREEN_MIN_BLOCKS)
    lm_screen(const float* __restrict__ x, const signed char* __restrict__ q, const float4* __restrict__ rowp,
              const float* __restrict__ ln_g, const float* __restrict__ ln_b, float eps, int N, int K,
              float* __restrict__ ub, float* __restrict__ lb_part, float* __restrict__ h_out) {
    lm_screen_body<LM_SCREEN_J>(x, q, rowp, ln_g, ln_b, eps, N, K, ub, lb_part, h_out);
}

#define LM_RESCORE_KERNEL(name, bf16)                                                                          \
    extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS)                                              \
        name(const GemvW<bf16>::T* __restrict__ w, const float* h, const float* ub, const float* lb_part,      \
             int G1, int N, int K, int wpr, int* am_out, float* am_part_v, int* am_part_i, int* am_counter,    \
             int* am_step, int* am_host_out) {                                                                 \
        const GemvArgmax am{am_out, am_part_v, am_part_i, am_counter, am_step, am_host_out};                  \
        lm_rescore_body<bf16>(w, h, ub, lb_part, G1, N, K, wpr, am);                                           \
    }
LM_RESCORE_KERNEL(lm_rescore_f32, false)
LM_RESCORE_KERNEL(lm_rescore_bf16, true)

// ---------------------------------------------------------------------------------------------
// The table (gpt2block.screen.table's, bit for bit), a warp a row. The weights are taken by their bits,
// never by float arithmetic, wherever -ftz could flush a subnormal: max |w| as the largest magnitude's
// bits, each w_nk widened to float64 exactly (lm_exact_f64). Everything else is float64, as NumPy's.

// w's value as a float64, exactly: a subnormal from its integer significand (a plain cvt.f64.f32 may
// flush it under -ftz).
__device__ __forceinline__ double lm_exact_f64(unsigned bits) {
    const unsigned mag = bits & 0x7fffffffu;
    const double v = mag < 0x00800000u ? (double)(int)mag * 0x1p-149 : (double)__uint_as_float(mag);
    return (bits >> 31) ? -v : v;
}

template <bool BF16>
__device__ __forceinline__ unsigned lm_w_bits(const typename GemvW<BF16>::T* row, int k);
template <>
__device__ __forceinline__ unsigned lm_w_bits<false>(const float* row, int k) { return __float_as_uint(row[k]); }
template <>
__device__ __forceinline__ unsigned lm_w_bits<true>(const unsigned short* row, int k) { return (unsigned)row[k] << 16; }

template <bool BF16>
__device__ __forceinline__ void lm_screen_table_body(const typename GemvW<BF16>::T* __restrict__ w, int N, int K,
                                                     signed char* __restrict__ q, float4* __restrict__ rowp) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * GEMV_NT_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;  // the whole warp
    const typename GemvW<BF16>::T* row = w + (long long)n * K;
    unsigned mx = 0u;  // the largest |w_nk|'s bits (magnitudes order as their bits do)
    bool finite = true;
    for (int k = lane; k < K; k += 32) {
        const unsigned mag = lm_w_bits<BF16>(row, k) & 0x7fffffffu;
        finite = finite && mag < 0x7f800000u;
        mx = max(mx, mag);
    }
    finite = __all_sync(0xffffffffu, finite);
    mx = finite ? __reduce_max_sync(0xffffffffu, mx) : 0u;  // a non-finite row: as a row of zeros, d = inf
    // s: max|w| / 127 rounded to a float32, at least 2^-126 (a normal float); 1 for a row of zeros
    const float s = mx == 0u ? 1.0f : fmaxf(__double2float_rn(lm_exact_f64(mx) / 127.0), 0x1p-126f);
    const double sd = s;
    double err = 0.0;
    int a = 0;
    for (int k = lane; k < K; k += 32) {
        const double v = finite ? lm_exact_f64(lm_w_bits<BF16>(row, k)) : 0.0;
        const double qq = fmin(fmax(rint(v / sd), -127.0), 127.0);
        err = fmax(err, fabs(v - sd * qq));  // exact: s q has at most 31 significant bits
        a += abs((int)qq);
        q[(long long)n * K + k] = (signed char)(int)qq;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) err = fmax(err, __shfl_xor_sync(0xffffffffu, err, o));
    a = __reduce_add_sync(0xffffffffu, a);
    if (lane == 0) {
        // d: err rounded up to a float32, and up to 2^-126 when below (a normal float, or 0)
        const float d = !finite ? __int_as_float(0x7f800000) : err == 0.0 ? 0.0f
                        : err < 0x1p-126 ? 0x1p-126f : __double2float_ru(err);
        rowp[n] = make_float4(s, d, (float)a, __uint_as_float(mx));
    }
}

#define LM_SCREEN_TABLE_KERNEL(name, bf16)                                                                     \
    extern "C" __global__ void __launch_bounds__(GEMV_NT_THREADS)                                              \
        name(const GemvW<bf16>::T* __restrict__ w, int N, int K, signed char* __restrict__ q,                  \
             float4* __restrict__ rowp) {                                                                      \
        lm_screen_table_body<bf16>(w, N, K, q, rowp);                                                          \
    }
LM_SCREEN_TABLE_KERNEL(lm_screen_table_f32, false)
LM_SCREEN_TABLE_KERNEL(lm_screen_table_bf16, true)

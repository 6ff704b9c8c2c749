// common.cuh: device helpers shared by every kernel file of gpt2block.
// Included (and inlined once by gpt2block/kernel_source.py) at the top of each .cu file.
// Only static inline device code here: no kernels, no host code, so every
// translation unit (NVRTC module or the one-file export) may include it.
#pragma once

#define HEAD_DIM 64  // every GPT-2 size: head dim 64
#define ATTN_SCALE 0.125f  // 1 / sqrt(64): a power of two, so pre-scaling q is exact

// Sum / max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sums over the warp's 32 lanes of N values at once (N a power of two, at most 32; e.g. the
// tokens of one output row): log2 N halving steps trade half the values with the lane 16, 8, ...
// apart (N - 1 shuffles in all), then full sums over the remaining lane bits (log2(32 / N)
// shuffles), against 5 N for N separate warp_sum. Lane l returns the sum of v[l / (32 / N)].
// A fixed order, so results repeat bit for bit.
template <int N, typename T>
__device__ __forceinline__ T warp_sums(T (&v)[N], int lane) {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "warp_sums: N a power of two up to 32");
    constexpr int LOG2N = N >= 32 ? 5 : N >= 16 ? 4 : N >= 8 ? 3 : N >= 4 ? 2 : N >= 2 ? 1 : 0;
#pragma unroll
    for (int step = 0; step < LOG2N; ++step) {  // (one induction variable: fully unrolled, v stays in registers)
        const int h = N >> (step + 1), mask = 16 >> step;
        const bool upper = lane & mask;
#pragma unroll
        for (int i = 0; i < h; ++i) {
            const T keep = upper ? v[i + h] : v[i];
            const T send = upper ? v[i] : v[i + h];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
        }
    }
    T s = v[0];
#pragma unroll
    for (int step = LOG2N; step < 5; ++step) s += __shfl_xor_sync(0xffffffffu, s, 16 >> step);
    return s;
}

// A LayerNorm row's statistics and its normalization. The sums s = sum x and q = sum x^2 are float64 (exact
// enough for rows in the thousands); inv_n = 1 / n (ln_inv_n) is worked out once, off the critical path.
// The mean goes on as two floats (hi + lo) and 1/std as a float from rsqrtf refined by one float32
// Newton step (within about an ulp of 1 / sqrt(var); a float64 step, as before version 24, measured
// 0.8-1.4% slower at gpt2 bf16 b1, where the one-token GEMVs wait on this chain): the normalization
// is then float32 alone, x - hi exact where x is near the mean, and within about an ulp of the float64
// formula elsewhere.
struct LnRow {
    float mean_hi, mean_lo, rstd;
};

// 1 / n in float64 without a division: the float reciprocal and one Newton step (error ~1e-15).
__device__ __forceinline__ double ln_inv_n(int n) {
    const double r = 1.0f / (float)n;
    return r * (2.0 - (double)n * r);
}

__device__ __forceinline__ LnRow ln_row_stats(double s, double q, double inv_n, float eps) {
    const double mean = s * inv_n, var = fmax(fma(-mean, mean, q * inv_n), 0.0) + (double)eps;
    const float vf = (float)var, r0 = rsqrtf(vf);
    LnRow st;
    st.rstd = r0 * fmaf(-0.5f * vf * r0, r0, 1.5f);
    st.mean_hi = (float)mean;
    st.mean_lo = (float)(mean - (double)st.mean_hi);
    return st;
}

__device__ __forceinline__ float4 ln_apply4(const float4& v, const LnRow& st, const float4& g, const float4& b) {
    return make_float4(fmaf(((v.x - st.mean_hi) - st.mean_lo) * st.rstd, g.x, b.x),
                       fmaf(((v.y - st.mean_hi) - st.mean_lo) * st.rstd, g.y, b.y),
                       fmaf(((v.z - st.mean_hi) - st.mean_lo) * st.rstd, g.z, b.z),
                       fmaf(((v.w - st.mean_hi) - st.mean_lo) * st.rstd, g.w, b.w));
}

// Sum over a whole thread block (blockDim.x a multiple of 32, at most 1024).
// scratch: __shared__ float[32]. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// GPT-2's GELU, tanh form (Hugging Face "gelu_new"):
// 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). tanhf, not the fast intrinsic: fp32 accuracy.
__device__ __forceinline__ float gelu_tanh(float z) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * z * (1.0f + tanhf(k * (z + 0.044715f * z * z * z)));
}

// Programmatic dependent launch (sm_90; no-ops when compiled for older targets). A kernel
// launched with the programmatic-serialization attribute (cuda/modules.launch(...,
// programmatic=True)) may start while the kernel before it in the stream is still running:
//   pdl_trigger()  this block lets the next kernel start launching (it still waits, below);
//   pdl_wait()     returns once every kernel before this one has finished and its writes are
//                  visible. Nothing a predecessor writes may be read, and nothing a predecessor
//                  reads may be written, before it; read-only data (weights) may be, and so may
//                  data written only by work that finished before the last plain (not
//                  programmatic) launch ahead of this kernel (attention_decode_f32's lengths and
//                  older keys: a decode step starts with a plain launch). Such reads must use
//                  ld_pre_wait* (below), or ptxas may move them past the wait.
// Without the attribute the wait returns at once: the kernel is correct under a plain launch.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Softmax helpers of the attention kernels.
__device__ __forceinline__ float attn_neg_inf() { return __int_as_float(0xff800000); }

// exp(s - m) for the online softmax; m == -inf (nothing seen yet) uses 0 so that -inf - -inf never happens.
__device__ __forceinline__ float attn_safe_max(float m) { return m == attn_neg_inf() ? 0.0f : m; }

// q . k over a head's 64 dims held as one float4 per lane by a group of 16 lanes (decode
// attention); every lane of the group gets the sum. half_mask names exactly the group's lanes.
__device__ __forceinline__ float attn_dot16(const float4& q, const float4& k, unsigned half_mask) {
    float d = q.x * k.x;
    d = fmaf(q.y, k.y, d);
    d = fmaf(q.z, k.z, d);
    d = fmaf(q.w, k.w, d);
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) d += __shfl_xor_sync(half_mask, d, off);
    return d;
}

// N keys' scores at once, each as attn_dot16 forms it (the same products and butterfly, so the same
// bits), the N butterflies interleaved: a lane's N dot products, then each shuffle level for all N.
// Every lane of the warp must call it (full mask; the xor offsets stay inside each 16-lane group).
// attention_decode_f32 scored its 8 keys one at a time before, each butterfly behind the last: about
// 0.5 us of a 1.2-us round at one token (docs/PERFORMANCE.md, version 24).
template <int N>
__device__ __forceinline__ void attn_dots16(const float4& q, const float4 (&k)[N], float (&d)[N]) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
        d[j] = q.x * k[j].x;
        d[j] = fmaf(q.y, k[j].y, d[j]);
        d[j] = fmaf(q.z, k[j].z, d[j]);
        d[j] = fmaf(q.w, k[j].w, d[j]);
    }
#pragma unroll
    for (int off = 8; off > 0; off >>= 1)
#pragma unroll
        for (int j = 0; j < N; ++j) d[j] += __shfl_xor_sync(0xffffffffu, d[j], off);
}

// Decode attention's combine of one (row, head)'s n splits, in split order: dim d of
// sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s, M the largest m_s. ml: [n][2] (max m, sum l),
// acc: [n][64] unnormalised; written by other blocks of the launch, so read through L2.
__device__ __forceinline__ float attn_combine_splits(const float* ml, const float* acc, int n, int d) {
    float mm = attn_neg_inf();
#pragma unroll 8
    for (int s = 0; s < n; ++s) mm = fmaxf(mm, __ldcg(ml + 2 * s));
    const float base = attn_safe_max(mm);
    float L = 0.f, A = 0.f;
#pragma unroll 8
    for (int s = 0; s < n; ++s) {
        const float w = expf(__ldcg(ml + 2 * s) - base);
        L = fmaf(__ldcg(ml + 2 * s + 1), w, L);
        A = fmaf(__ldcg(acc + s * HEAD_DIM + d), w, A);
    }
    return A / L;
}

// P V of a decode attention split for the 16-lane group grp of ngroups: the group's keys are
// grp, grp + ngroups, ... below n; p[i] their probabilities (shared memory), v[j] the lane's
// float4 of key grp + ngroups * j's value.
template <int PER_GROUP>
__device__ __forceinline__ float4 attn_pv16(const float* p, const float4 (&v)[PER_GROUP], int grp, int ngroups,
                                            int n) {
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < PER_GROUP; ++j) {
        const int i = grp + ngroups * j;
        if (i >= n) break;
        const float pi = p[i];
        o.x = fmaf(pi, v[j].x, o.x);
        o.y = fmaf(pi, v[j].y, o.y);
        o.z = fmaf(pi, v[j].z, o.z);
        o.w = fmaf(pi, v[j].w, o.w);
    }
    return o;
}

// Loads issued before pdl_wait(): weights, and data written only by work that finished before
// the last plain launch ahead of the kernel (so the usual kernel-boundary visibility covers them;
// nothing still running writes them). ptxas moves read-only loads (ld.global.nc, __ldg) past griddepcontrol.wait, even
// from a volatile asm: in the SASS every weight load of the projection GEMVs came after the wait
// (docs/PERFORMANCE.md, version 17). It keeps a plain ld.global before it ("ld.relaxed.gpu.global", served
// from L2, measured 1-2% slower).
__device__ __forceinline__ float ld_pre_wait(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ float4 ld_pre_wait4(const void* p) {
    float4 v;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ld_pre_wait4u(const void* p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
// The same with an L2 eviction policy (l2_policy) on the load.
__device__ __forceinline__ float4 ld_pre_wait4(const void* p, unsigned long long policy) {
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    return v;
}
__device__ __forceinline__ uint4 ld_pre_wait4u(const void* p, unsigned long long policy) {
    uint4 v;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
    return v;
}

// An L2 cache policy for .L2::cache_hint accesses: evict-last (keep) or evict-first.
__device__ __forceinline__ unsigned long long l2_policy(bool keep) {
    unsigned long long pol;
    if (keep)
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
    else
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}

// 16 bytes of weights as floats: 4 float32, or 8 bf16 (stored as the upper halves of float32s,
// so bf16 -> float32 is a 16-bit shift).
__device__ __forceinline__ void unpack16(const float4& v, float (&w)[4]) {
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}
__device__ __forceinline__ void unpack16(const uint4& v, float (&w)[8]) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        w[2 * i] = __uint_as_float(u[i] << 16);
        w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

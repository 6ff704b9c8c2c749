// attention_decode.cuh: the pieces of one-query decode attention shared by attention_decode_f32
// (attention.cu) and attention_decode_qkv_bf16 (attention_qkv.cu): the cluster barrier halves, a store
// into another block's shared memory, a round's keys and values into registers (attn_dec_load) and
// the round folded into the online softmax (attn_dec_fold).
//
// A round is a chunk of ATTN_DEC_CHUNK = 64 keys scored by GROUPS groups of 16 lanes (a float4 of the
// head's 64 dims per lane): group grp = threadIdx.x / 16 takes keys grp, grp + GROUPS, ... of the
// chunk, so a block of 16 GROUPS threads holds 64 / GROUPS keys and values per group in registers.
// attention_decode_f32 runs 8 groups (128 threads), the fused QKV + attention kernel 16 (256 threads).
#pragma once
#include "common.cuh"

#define ATTN_DEC_THREADS 128
#define ATTN_DEC_CHUNK 64  // keys per decode round: 8 per 16-lane group, all loaded at once
#ifndef ATTN_DEC_CLUSTER
#define ATTN_DEC_CLUSTER 8  // blocks per (row, head) of the decode kernel: one cluster on sm_90
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && ATTN_DEC_CLUSTER > 1
#define ATTN_DEC_CLUSTER_DIMS __cluster_dims__(ATTN_DEC_CLUSTER, 1, 1)
#define ATTN_DEC_RANKS ATTN_DEC_CLUSTER
#else
#define ATTN_DEC_CLUSTER_DIMS
#define ATTN_DEC_RANKS 1
#endif

// Cluster barrier halves and a store into another block's shared memory (sm_90; with one block
// per (b, h) on older targets none of them is reached).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// *p = v, where p is this block's shared address of a variable and the store goes to the same
// variable of the cluster's block `rank`.
__device__ __forceinline__ void st_cluster_f32(float* p, int rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned local = (unsigned)__cvta_generic_to_shared(p);
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
#else
    *p = v;
#endif
}

// A round's keys and values in registers: group grp takes keys grp + GROUPS j of [k0, k0 + n), all in
// flight at once (k, v: the head's columns of key 0, lane16's float4 already added; row stride D).
// (A plain `i < n` test: the compiler predicates the loads; any further condition on them made
// it branch around each, which measured slower.) ISSUED: each load by ld_pre_wait4 (common.cuh),
// so that it stays where it is written, before pdl_wait (read-only loads are moved past it).
#define ATTN_DEC_PER_GROUP (ATTN_DEC_CHUNK / 8)  // attention_decode_f32's 8 groups
template <bool ISSUED, int GROUPS = 8>
__device__ __forceinline__ void attn_dec_load(const float* __restrict__ k, const float* __restrict__ v, int D,
                                              int k0, int n, float4 (&kr)[ATTN_DEC_CHUNK / GROUPS],
                                              float4 (&vr)[ATTN_DEC_CHUNK / GROUPS]) {
    const int grp = threadIdx.x >> 4;
#pragma unroll
    for (int j = 0; j < ATTN_DEC_CHUNK / GROUPS; ++j) {
        const int i = grp + GROUPS * j;
        if (i < n) {
            const size_t off = (size_t)(k0 + i) * D;
            kr[j] = ISSUED ? ld_pre_wait4(k + off) : *reinterpret_cast<const float4*>(k + off);
            vr[j] = ISSUED ? ld_pre_wait4(v + off) : *reinterpret_cast<const float4*>(v + off);
        }
    }
}

// One round on keys [k0, k0 + n) already loaded (attn_dec_load), folded into the running max m,
// sum l and this group's P V o with the online softmax. q pre-scaled by 1/8; blockDim.x = 16 GROUPS;
// sc [64], scratch [32], stat [16 GROUPS / 32]: shared. Ends with a barrier, so the next round may
// reuse sc and stat.
template <int GROUPS = 8>
__device__ __forceinline__ void attn_dec_fold(const float4& qv, const float4 (&kr)[ATTN_DEC_CHUNK / GROUPS],
                                              const float4 (&vr)[ATTN_DEC_CHUNK / GROUPS], int n, float* sc,
                                              float* scratch, float* stat, float& m_run, float& l_run,
                                              float4& o) {
    constexpr int PER = ATTN_DEC_CHUNK / GROUPS, THREADS = 16 * GROUPS, WARPS = THREADS / 32;
    const int tid = threadIdx.x, lane16 = tid & 15, grp = tid >> 4;
    // every key slot scored (slots past n hold zeros or an earlier round's keys; their scores are
    // not stored), so that the PER butterflies run side by side
    float d[PER];
    attn_dots16(qv, kr, d);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int i = grp + GROUPS * j;
        if (lane16 == 0 && i < n) sc[i] = d[j];
    }
    __syncthreads();

    float mx = attn_neg_inf();
    for (int i = tid; i < n; i += THREADS) mx = fmaxf(mx, sc[i]);
    mx = warp_max(mx);
    if ((tid & 31) == 0) stat[tid >> 5] = mx;
    __syncthreads();
    float t[WARPS];  // the warps' maxima, by a pairwise tree
#pragma unroll
    for (int w = 0; w < WARPS; ++w) t[w] = stat[w];
#pragma unroll
    for (int s = 1; s < WARPS; s *= 2)
#pragma unroll
        for (int w = 0; w < WARPS; w += 2 * s) t[w] = fmaxf(t[w], t[w + s]);
    const float m_new = fmaxf(m_run, t[0]);
    const float base = attn_safe_max(m_new);
    const float alpha = m_run == attn_neg_inf() ? 0.f : expf(m_run - base);  // rescales the rounds before
    float sum = 0.f;
    for (int i = tid; i < n; i += THREADS) {
        const float p = expf(sc[i] - base);
        sc[i] = p;
        sum += p;
    }
    sum = block_sum(sum, scratch);  // block_sum syncs before returning values
    __syncthreads();                // sc (probabilities) visible to all, scratch free again
    l_run = fmaf(l_run, alpha, sum);
    m_run = m_new;
    const float4 pv = attn_pv16(sc, vr, grp, GROUPS, n);
    o = make_float4(fmaf(o.x, alpha, pv.x), fmaf(o.y, alpha, pv.y), fmaf(o.z, alpha, pv.z), fmaf(o.w, alpha, pv.w));
    __syncthreads();  // sc and stat free for the next round
}


// ---------------------------------------------------------------------------------------------
// The same round with a softmax of the group's own (ATTN_DEC_GROUP_SOFTMAX, version 31): each group of
// 16 lanes keeps its own running max m_g, sum l_g and P V o over its own keys, so a round needs no
// shared memory, no barrier and no shuffle past the dot products' butterflies (every lane of a group
// holds its keys' scores after attn_dots16). The groups meet once, after the last round
// (attn_dec_groups_meet), where each is rescaled by exp(m_g - M) as the cluster's ranks are.
// attn_dec_fold above needs the round's max over the whole block before any exponent: two barriers,
// a block sum and three warp butterflies in every round (about 1 us of a decode attention kernel's
// 1.5 us at gpt2's lengths, version 31's trace).
#ifndef ATTN_DEC_GROUP_SOFTMAX
#define ATTN_DEC_GROUP_SOFTMAX 1
#endif

// One round on keys [k0, k0 + n) already loaded: the group's keys grp + GROUPS j below n folded into its
// (m_g, l_g, o). Every lane of the warp must call it (attn_dots16's full-mask shuffles); a group with no
// key so far keeps m_g = -inf, l_g = 0, o = 0.
template <int GROUPS>
__device__ __forceinline__ void attn_dec_fold_group(const float4& qv, const float4 (&kr)[ATTN_DEC_CHUNK / GROUPS],
                                                    const float4 (&vr)[ATTN_DEC_CHUNK / GROUPS], int n, float& m_g,
                                                    float& l_g, float4& o) {
    constexpr int PER = ATTN_DEC_CHUNK / GROUPS;
    const int grp = threadIdx.x >> 4;
    float d[PER];
    attn_dots16(qv, kr, d);
    float mx = m_g;
#pragma unroll
    for (int j = 0; j < PER; ++j)
        if (grp + GROUPS * j < n) mx = fmaxf(mx, d[j]);
    if (mx == attn_neg_inf()) return;  // no key of this group yet (or only NaN scores: NaN stays out of max)
    const float alpha = m_g == attn_neg_inf() ? 0.f : expf(m_g - mx);  // rescales the group's rounds before
    float sum = 0.f;
    float4 pv = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        if (grp + GROUPS * j < n) {
            const float p = expf(d[j] - mx);
            sum += p;
            pv.x = fmaf(p, vr[j].x, pv.x);
            pv.y = fmaf(p, vr[j].y, pv.y);
            pv.z = fmaf(p, vr[j].z, pv.z);
            pv.w = fmaf(p, vr[j].w, pv.w);
        }
    }
    l_g = fmaf(l_g, alpha, sum);
    o = make_float4(fmaf(o.x, alpha, pv.x), fmaf(o.y, alpha, pv.y), fmaf(o.z, alpha, pv.z), fmaf(o.w, alpha, pv.w));
    m_g = mx;
}

// The block's groups met, in group order: for dim tid < 64, A = sum_g exp(m_g - M) o_g[tid] and
// L = sum_g exp(m_g - M) l_g with M the largest m_g (the block's unnormalised P V, its max and sum, as one
// rank's partial). os [GROUPS][64], ml [GROUPS][2]: shared; one barrier inside; every thread must call it.
template <int GROUPS>
__device__ __forceinline__ void attn_dec_groups_meet(float m_g, float l_g, const float4& o, float (*os)[HEAD_DIM],
                                                     float (*ml)[2], float& A, float& M, float& L) {
    const int tid = threadIdx.x, lane16 = tid & 15, grp = tid >> 4;
    *reinterpret_cast<float4*>(&os[grp][lane16 * 4]) = o;
    if (lane16 == 0) {
        ml[grp][0] = m_g;
        ml[grp][1] = l_g;
    }
    __syncthreads();
    A = L = 0.f;
    M = attn_neg_inf();
    if (tid < HEAD_DIM) {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) M = fmaxf(M, ml[g][0]);
        const float base = attn_safe_max(M);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            const float w = ml[g][0] == attn_neg_inf() ? 0.f : expf(ml[g][0] - base);
            L = fmaf(ml[g][1], w, L);
            A = fmaf(os[g][tid], w, A);
        }
    }
}

// Rank 0 of a cluster: the ranks' partials (part[s] = (A [64], M, L), in rank order) combined into dim tid.
__device__ __forceinline__ float attn_dec_ranks_meet(const float (*part)[HEAD_DIM + 2], int n_active, int tid) {
    float mm = attn_neg_inf();
    for (int s = 0; s < n_active; ++s) mm = fmaxf(mm, part[s][HEAD_DIM]);
    const float base = attn_safe_max(mm);
    float L = 0.f, A = 0.f;
    for (int s = 0; s < n_active; ++s) {
        const float w = part[s][HEAD_DIM] == attn_neg_inf() ? 0.f : expf(part[s][HEAD_DIM] - base);
        L = fmaf(part[s][HEAD_DIM + 1], w, L);
        A = fmaf(part[s][tid], w, A);
    }
    return A / L;
}

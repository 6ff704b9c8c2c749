// attention_split.cuh: what the prefill attention kernels (attention.cu's mma.sync kernels and
// attention_wgmma.cu's) share: which key tiles a query tile visits, and the split-key scratch with
// its deterministic combine.
#pragma once
#include "common.cuh"

// The split-key prefill's scratch: per (64-query tile, head, split) a partial: o [64 rows][64 dims]
// unnormalised, (m, l) [64 rows][2]; per (64-query tile, head) a ticket.
struct AttnSplit {
    int chunk;        // key tiles per split, at most: a block's n key tiles make ceil(n / chunk)
                      // splits of balanced length (0: no splitting, the plain kernels)
    float* part_o;    // [q tiles][H][gridDim.z][64][64]
    float* part_ml;   // [q tiles][H][gridDim.z][64][2]
    int* counters;    // [q tiles][H], zero before a launch and left zero after it
};

// Number of keys the queries [q0, q0 + rows) (clipped to s_q) must visit.
__device__ __forceinline__ int attn_keys_needed(int q0, int s_q, int s_kv, int q_start, int causal, int rows = 64) {
    if (!causal) return s_kv;
    const int last_q = min(q0 + rows, s_q) - 1;
    return min(s_kv, q_start + last_q + 1);
}

// The last split of a 64-query tile to finish: rows q0 + rl, rl = r_base and r_base + 8 (this thread's two
// rows), dims 8j + 2t, + 1 (j = 0..7), from the nsplit partials at slots slot0 .. slot0 + nsplit - 1, added in
// split order; each pair of outputs handed to store(row, j, v) (dims 8j + 2t, 8j + 2t + 1).
template <class Store>
__device__ __forceinline__ void attn_split_combine_to(const AttnSplit& split, long long slot0, int nsplit, int q0,
                                                      int s_q, int r_base, int t, Store store) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int rl = r_base + 8 * hf, row = q0 + rl;
        if (row >= s_q) continue;
        float mx = attn_neg_inf();
        for (int sp = 0; sp < nsplit; ++sp) mx = fmaxf(mx, __ldcg(split.part_ml + (slot0 + sp) * 128 + rl * 2));
        const float base = attn_safe_max(mx);
        float lt = 0.f, acc[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[i] = 0.f;
        for (int sp = 0; sp < nsplit; ++sp) {
            const float2 ml = __ldcg(reinterpret_cast<const float2*>(split.part_ml + (slot0 + sp) * 128 + rl * 2));
            const float w = ml.x == attn_neg_inf() ? 0.f : expf(ml.x - base);
            lt += ml.y * w;
            const float* po = split.part_o + (slot0 + sp) * 64 * 64 + rl * 64 + 2 * t;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 ov = __ldcg(reinterpret_cast<const float2*>(po + 8 * j));
                acc[2 * j] = fmaf(ov.x, w, acc[2 * j]);
                acc[2 * j + 1] = fmaf(ov.y, w, acc[2 * j + 1]);
            }
        }
        const float inv = 1.0f / lt;
#pragma unroll
        for (int j = 0; j < 8; ++j) store(row, j, make_float2(acc[2 * j] * inv, acc[2 * j + 1] * inv));
    }
}

// The same into out [s_q][D] (fp32), head columns col0 ...
__device__ __forceinline__ void attn_split_combine(const AttnSplit& split, long long slot0, int nsplit, float* out,
                                                   int D, int col0, int q0, int s_q, int r_base, int t) {
    attn_split_combine_to(split, slot0, nsplit, q0, s_q, r_base, t, [&](int row, int j, const float2& v) {
        *reinterpret_cast<float2*>(out + (size_t)row * D + col0 + 2 * t + 8 * j) = v;
    });
}

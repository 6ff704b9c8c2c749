// attention.cu: multi-head attention of GPT-2 (head dim 64, H = D / 64 heads, any H).
//
//   out[i, h*64 : h*64+64] = sum_j softmax_j(q_i . k_j / 8) v_j      over the keys j visible to query i
//
// Prefill (one sequence, flash style: online softmax over key tiles of 64, no S x S matrix,
// shared memory independent of the sequence length) and decode (one new query per row over
// the KV cache, keys split across the blocks of a cluster, partials combined in its rank 0).
//
// ---------------------------------------------------------------------------------------------
// LAUNCH RECIPES (every integer argument is a 32-bit int unless marked long long)
//
// attention_prefill_f32      FFMA, fp32 throughout
//     grid  (ceil(s_q / 64), H, 1)      block (256, 1, 1)
//     dynamic shared memory ATTN_F32_SMEM_BYTES = 52,224 bytes: above 48 KB, so before the first
//     launch: cudaFuncSetAttribute(attention_prefill_f32,
//                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 52224)
// attention_prefill_tf32x3f  tensor cores, mma.sync m16n8k8 TF32 with the 3-pass hi/lo split ("x3"),
//                            each 8-wide mma step summed from zero, then added in fp32 ("f": fresh)
//     grid  (ceil(s_q / 64), H, 1)      block (128, 1, 1)
//     dynamic shared memory ATTN_MMA_F_SMEM_BYTES = 102,400 bytes (cudaFuncSetAttribute, 102400)
// attention_prefill_tf32     1 pass, long sums inside the tensor core (TF32 accuracy, about 1e-3 relative)
//     grid  (ceil(s_q / 64), H, 1)      block (128, 1, 1)
//     dynamic shared memory ATTN_MMA_SMEM_BYTES = 69,632 bytes (cudaFuncSetAttribute as above, 69632)
//   (a 3-pass kernel with long tensor-core sums measured up to 3.7x torch fp32's error: not kept)
//   all three prefill kernels take the same arguments:
//     (const float* q, int q_stride, const float* k, const float* v, int kv_stride,
//      float* out, int D, int s_q, int s_kv, int q_start, int causal)
//     q:   [s_q, >= D]  row i at q + i * q_stride (head h at columns h*64 .. h*64+63)
//     k,v: [s_kv, >= D] row j at k + j * kv_stride, v + j * kv_stride
//     out: [s_q, D]     contiguous, must not overlap q, k, v
//     query i sits at position q_start + i; causal != 0: it sees keys 0 .. q_start + i (and < s_kv);
//     causal == 0: all s_kv keys.  Requirements: D = 64 * H; q, k, v 16-byte aligned; q_stride and
//     kv_stride multiples of 4 and >= D; s_q, s_kv >= 1.
// attention_prefill_varlen_tf32x3f / _tf32   the two mma kernels over packed segments of several cache rows
//     (const float* q, int q_stride, const float* k_cache, const float* v_cache, long long cache_batch_stride,
//      float* out, int D, const int* tiles)
//     grid (entries of tiles, H, 1), block (128, 1, 1), shared memory as their one-sequence kernels;
//     tiles: int32 [entries][5] {q_row0, len, past, row, qt} (see the kernels); causal, queries at
//     positions past .. past + len - 1 of cache row ``row`` over its keys 0 .. past + len - 1.
//   solve() (LeetGPU block, no mask): q = qkv, k = qkv + D, v = qkv + 2 * D, q_stride = kv_stride = 3 * D,
//     s_q = s_kv = seq_len, q_start = 0, causal = 0.
//
// attention_decode_f32       one query per row over the KV cache, keys split across the blocks of a
//                            cluster, combined through distributed shared memory
//     (const float* q, int q_stride, const float* k_cache, const float* v_cache,
//      long long cache_batch_stride, const int* lengths, float* out, int D, int max_len,
//      const int* slots)
//     sm_90: grid (ATTN_DEC_CLUSTER, H, B), clusters of (ATTN_DEC_CLUSTER, 1, 1) compiled in
//     (__cluster_dims__, so a plain launch forms them; gpt2block builds 8, 4, 2 or 1 and picks one
//     per (B, H): cuda/attention.decode_ranks); older targets: grid (1, H, B), ATTN_DEC_CLUSTER 1.
//     The ranks set the summation order, so a row's output bits depend on the batch it runs in.
//     block (128, 1, 1), no dynamic shared memory (static 4.4 KB at 8 ranks).
//     q: row b at q + b * q_stride; key t of row b at k_cache + s * cache_batch_stride + t * D (v likewise),
//     s = slots[b] (slots: [B] int32 on the device, each a row of the cache; NULL: s = b, the cache's
//     rows in order; a decode step over some rows of a larger cache passes its seq);
//     lengths: [B] int32 on the device, 1 <= lengths[b] <= max_len (otherwise the row's output is NaN);
//     out: [B, D] contiguous.  Chunk c (keys [64 c, 64 c + 64)) goes to rank c % ranks: a
//     short row costs its own keys, not max_len's, and max_len only bounds the lengths.
//     Takes part in programmatic dependent launch (common.cuh): before pdl_wait() it reads lengths,
//     slots and the keys / values at positions 0 .. lengths[b] - 2, so those must not be written by any
//     kernel that may still be running (the decode step: earlier steps wrote them, and the step's
//     ints were complete before its first kernel started); position lengths[b] - 1 and q after it.
//     The partials are combined in rank order: bit-exact run to run.
// ---------------------------------------------------------------------------------------------
#include "common.cuh"
#include "mma.cuh"
#include "attention_split.cuh"

// Build parameters (gpt2block/backends/cuda/build.py; the host sizes shared memory and grids by the same
// values): ATTN_LDS the shared row stride (floats) of a 64-wide tile (68: 16-byte rows, no bank
// conflicts), ATTN_DEC_THREADS the decode kernel's block, ATTN_DEC_CLUSTER its blocks per (row, head): one
// cluster on sm_90, ATTN_VARLEN_FIELDS the ints per entry of the packed prefill's tile table.
#ifndef ATTN_LDS
#error "ATTN_LDS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef ATTN_DEC_THREADS
#error "ATTN_DEC_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef ATTN_DEC_CLUSTER
#error "ATTN_DEC_CLUSTER is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef ATTN_VARLEN_FIELDS
#error "ATTN_VARLEN_FIELDS is set by gpt2block/backends/cuda/build.py"
#endif
#define ATTN_TILE_FLOATS (64 * ATTN_LDS)  // one 64 x 64 tile
#define ATTN_F32_SMEM_BYTES (3 * ATTN_TILE_FLOATS * 4)   // Q, K (reused for P), V
#define ATTN_MMA_SMEM_BYTES (4 * ATTN_TILE_FLOATS * 4)   // K and V, double-buffered
#define ATTN_MMA_F_SMEM_BYTES (ATTN_MMA_SMEM_BYTES + 4 * 8 * 2 * 32 * 16)  // + Q fragments (tf32x3f)
#define ATTN_DEC_CHUNK 64  // keys per decode round: 8 per 16-lane group, all loaded at once

extern __shared__ __align__(16) float attn_smem[];  // dynamic shared memory of the prefill kernels

// Copy rows [row0, row0 + 64) of a [rows, >= D] matrix (head columns col0 .. col0 + 63) into a
// 64 x ATTN_LDS shared tile; rows >= n_rows become zeros (so 0-probability keys never meet garbage).
template <int NTHREADS>
__device__ __forceinline__ void attn_load_tile(float* tile, const float* __restrict__ src, int stride,
                                               int row0, int n_rows, int col0) {
#pragma unroll
    for (int it = 0; it < 1024 / NTHREADS; ++it) {
        const int idx = threadIdx.x + it * NTHREADS;  // 1024 chunks of 16 bytes
        const int r = idx >> 4, c4 = (idx & 15) * 4;
        const bool valid = row0 + r < n_rows;
        const float* g = src + (size_t)(valid ? row0 + r : 0) * stride + col0 + c4;
        cp_async16(tile + r * ATTN_LDS + c4, g, valid ? 16 : 0);
    }
}

// o[0..3] += p * v
__device__ __forceinline__ void attn_axpy4(float (&o)[4], float p, float4 v) {
    o[0] = fmaf(p, v.x, o[0]);
    o[1] = fmaf(p, v.y, o[1]);
    o[2] = fmaf(p, v.z, o[2]);
    o[3] = fmaf(p, v.w, o[3]);
}

// =============================================================================================
// attention_prefill_f32: 256 threads, a 64-query x 64-key tile per step.
// Thread (ty = tid / 16, tx = tid % 16): query rows ty*4 .. ty*4+3; scores for keys tx + 16c
// (c = 0..3); output dims tx*4 .. tx*4+3. A row's 16 threads are one half-warp.
// =============================================================================================
extern "C" __global__ void __launch_bounds__(256, 1)
attention_prefill_f32(const float* __restrict__ q, int q_stride,    // q: [s_q, >= D]
                      const float* __restrict__ k,                  // k: [s_kv, >= D]
                      const float* __restrict__ v, int kv_stride,   // v: [s_kv, >= D]
                      float* __restrict__ out,                      // out: [s_q, D]
                      int D, int s_q, int s_kv, int q_start, int causal) {
    float* Qs = attn_smem;                         // [64][ATTN_LDS], pre-scaled by 1/8
    float* Ks = attn_smem + ATTN_TILE_FLOATS;      // [64][ATTN_LDS] keys, then P [64 rows][64 keys]
    float* Vs = attn_smem + 2 * ATTN_TILE_FLOATS;  // [64][ATTN_LDS]

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int qt = gridDim.x - 1 - blockIdx.x;  // heavy (late) causal tiles first
    const int q0 = qt * 64, h = blockIdx.y, col0 = h * 64;

#pragma unroll
    for (int it = 0; it < 4; ++it) {  // Q tile: 64 rows x 16 float4
        const int idx = tid + it * 256, r = idx >> 4, c4 = (idx & 15) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < s_q) x = *reinterpret_cast<const float4*>(q + (size_t)(q0 + r) * q_stride + col0 + c4);
        x.x *= ATTN_SCALE; x.y *= ATTN_SCALE; x.z *= ATTN_SCALE; x.w *= ATTN_SCALE;
        *reinterpret_cast<float4*>(Qs + r * ATTN_LDS + c4) = x;
    }

    float o[4][4], m[4], l[4];  // o[row][dim]; m: running max; l: this thread's partial row sum
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        m[r] = attn_neg_inf(); l[r] = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) o[r][e] = 0.f;
    }

    const int n_keys = attn_keys_needed(q0, s_q, s_kv, q_start, causal);
    for (int kt0 = 0; kt0 < n_keys; kt0 += 64) {
        attn_load_tile<256>(Ks, k, kv_stride, kt0, s_kv, col0);
        attn_load_tile<256>(Vs, v, kv_stride, kt0, s_kv, col0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();

        float s[4][4];  // s[row][c]: query ty*4+row, key kt0 + tx + 16c
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[r][c] = 0.f;
#pragma unroll 4
        for (int d = 0; d < 64; d += 4) {
            float4 qa[4], kb[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) qa[r] = *reinterpret_cast<const float4*>(Qs + (ty * 4 + r) * ATTN_LDS + d);
#pragma unroll
            for (int c = 0; c < 4; ++c) kb[c] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * c) * ATTN_LDS + d);
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    float a = s[r][c];
                    a = fmaf(qa[r].x, kb[c].x, a);
                    a = fmaf(qa[r].y, kb[c].y, a);
                    a = fmaf(qa[r].z, kb[c].z, a);
                    a = fmaf(qa[r].w, kb[c].w, a);
                    s[r][c] = a;
                }
        }

        const bool edge = kt0 + 64 > s_kv || (causal && kt0 + 63 > q_start + q0);
        if (edge) {
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int key = kt0 + tx + 16 * c, qpos = q_start + q0 + ty * 4 + r;
                    if (key >= s_kv || (causal && key > qpos)) s[r][c] = attn_neg_inf();
                }
        }
        __syncthreads();  // every thread is done reading Ks: it becomes P

#pragma unroll
        for (int r = 0; r < 4; ++r) {
            float mx = fmaxf(fmaxf(s[r][0], s[r][1]), fmaxf(s[r][2], s[r][3]));
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m[r], mx), base = attn_safe_max(m_new);
            const float alpha = expf(m[r] - base);
            m[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float p = expf(s[r][c] - base);
                sum += p;
                Ks[(ty * 4 + r) * ATTN_LDS + tx + 16 * c] = p;
            }
            l[r] = l[r] * alpha + sum;
#pragma unroll
            for (int e = 0; e < 4; ++e) o[r][e] *= alpha;
        }
        __syncthreads();

#pragma unroll 4
        for (int j = 0; j < 64; j += 4) {
            float4 pa[4], vb[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) pa[r] = *reinterpret_cast<const float4*>(Ks + (ty * 4 + r) * ATTN_LDS + j);
#pragma unroll
            for (int u = 0; u < 4; ++u) vb[u] = *reinterpret_cast<const float4*>(Vs + (j + u) * ATTN_LDS + tx * 4);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                attn_axpy4(o[r], pa[r].x, vb[0]);
                attn_axpy4(o[r], pa[r].y, vb[1]);
                attn_axpy4(o[r], pa[r].z, vb[2]);
                attn_axpy4(o[r], pa[r].w, vb[3]);
            }
        }
        __syncthreads();  // Ks / Vs are overwritten by the next tile
    }

#pragma unroll
    for (int r = 0; r < 4; ++r) {
        float lt = l[r];
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) lt += __shfl_xor_sync(0xffffffffu, lt, off);
        const int row = q0 + ty * 4 + r;
        if (row < s_q) {
            const float inv = 1.0f / lt;
            float4 y = make_float4(o[r][0] * inv, o[r][1] * inv, o[r][2] * inv, o[r][3] * inv);
            *reinterpret_cast<float4*>(out + (size_t)row * D + col0 + tx * 4) = y;
        }
    }
}

// =============================================================================================
// Tensor-core prefill: mma.sync.m16n8k8 TF32, fp32 accumulate. 4 warps, warp w owns query rows
// 16w .. 16w+15 of the block's 64; key tiles of 64 stream through double-buffered shared memory.
// NPASS == 3: every operand x = hi + lo (hi = tf32(x), lo = tf32(x - hi)); a.b ~ a_lo b_hi + a_hi b_lo
// + a_hi b_hi (the a_lo b_lo term is below fp32 rounding). NPASS == 1: plain TF32.
// Fragments (g = lane / 4, t = lane % 4):  A 16x8: a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4);
// B 8x8: b0 (k = t, n = g) b1 (k = t+4, n = g);  C 16x8: c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1).
// P (in C layout after the softmax) is fed straight back as A with the keys of each 8-key step
// permuted (logical k = t <-> key 2t, k = t+4 <-> key 2t+1); V's B fragment is read with the same
// permutation, so the sum over keys is unchanged.
// =============================================================================================
// c += a * b with a = (ah, al), b = (bh0/bl0, bh1/bl1), small terms first.
template <int NPASS>
__device__ __forceinline__ void attn_mma_split(float (&c)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                               float b0, float b1) {
    if (NPASS == 3) {
        unsigned bh0, bl0, bh1, bl1;
        split_tf32_fast(b0, bh0, bl0);  // every warp splits every K / V element it reads: the cheap split
        split_tf32_fast(b1, bh1, bl1);
        mma_tf32_16x8x8(c, al, bh0, bh1);
        mma_tf32_16x8x8(c, ah, bl0, bl1);
        mma_tf32_16x8x8(c, ah, bh0, bh1);
    } else {
        mma_tf32_16x8x8(c, ah, f32_to_tf32(b0), f32_to_tf32(b1));
    }
}

template <int NPASS, bool FRESH>
__device__ __forceinline__ void attn_prefill_mma(const float* __restrict__ q, int q_stride,
                                                 const float* __restrict__ k, const float* __restrict__ v,
                                                 int kv_stride, float* __restrict__ out, int D, int s_q, int s_kv,
                                                 int q_start, int causal, int qt,
                                                 AttnSplit split = AttnSplit{0, 0, 0, 0}) {
    // attn_smem: Ks[2], Vs[2], [64][ATTN_LDS] each; this block: query tile qt (queries 64 qt ..), head blockIdx.y
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int q0 = qt * 64, h = blockIdx.y, col0 = h * 64;
    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;  // this thread's two query rows

    const int n_keys = attn_keys_needed(q0, s_q, s_kv, q_start, causal);
    const int n_all = (n_keys + 63) / 64;  // key tiles of this query tile
    int nsplit = 1, kt_begin = 0, kt_end = n_all;
    if (split.chunk > 0) {  // this block: split blockIdx.z of nsplit, key tiles [kt_begin, kt_end)
        nsplit = (n_all + split.chunk - 1) / split.chunk;
        if ((int)blockIdx.z >= nsplit) return;  // (the whole block: before any barrier)
        kt_begin = blockIdx.z * n_all / nsplit;
        kt_end = (blockIdx.z + 1) * n_all / nsplit;
    }
    attn_load_tile<128>(attn_smem, k, kv_stride, kt_begin * 64, s_kv, col0);
    attn_load_tile<128>(attn_smem + 2 * ATTN_TILE_FLOATS, v, kv_stride, kt_begin * 64, s_kv, col0);
    cp_async_commit();

    // Q fragments (A operand, 8 k-steps over the 64 dims), scaled by 1/8, split hi / lo.
    // Q fragments (A operand, 8 k-steps over the 64 dims), scaled by 1/8, split hi / lo. !FRESH keeps
    // them in registers; FRESH (short of registers) keeps them in shared memory after the K / V
    // buffers, per warp and lane: qf[((warp * 8 + kk) * 2 + hi/lo) * 32 + lane] = 4 words.
    unsigned qh[8][4], ql[8][4];
    uint4* qf = reinterpret_cast<uint4*>(attn_smem + 4 * ATTN_TILE_FLOATS) + warp * 8 * 2 * 32 + lane;
    {
        const float* q0p = q + (size_t)min(r0, s_q - 1) * q_stride + col0;
        const float* q1p = q + (size_t)min(r1, s_q - 1) * q_stride + col0;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            const float x[4] = {q0p[8 * kk + t], q1p[8 * kk + t], q0p[8 * kk + t + 4], q1p[8 * kk + t + 4]};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (NPASS == 3) split_tf32(x[e] * ATTN_SCALE, qh[kk][e], ql[kk][e]);
                else { qh[kk][e] = f32_to_tf32(x[e] * ATTN_SCALE); ql[kk][e] = 0u; }
            }
            if (FRESH) {
                qf[(kk * 2) * 32] = make_uint4(qh[kk][0], qh[kk][1], qh[kk][2], qh[kk][3]);
                qf[(kk * 2 + 1) * 32] = make_uint4(ql[kk][0], ql[kk][1], ql[kk][2], ql[kk][3]);
            }
        }
    }
    // (each lane reads back only what it wrote: no barrier needed)

    float o[8][4];  // output rows r0 (c0, c1) and r1 (c2, c3), dims 8j + 2t, 8j + 2t + 1
    float m[2] = {attn_neg_inf(), attn_neg_inf()}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.f;

    for (int kt = kt_begin; kt < kt_end; ++kt) {
        const int kt0 = kt * 64, buf = (kt - kt_begin) & 1;
        const float* Ks = attn_smem + buf * ATTN_TILE_FLOATS;
        const float* Vs = attn_smem + (2 + buf) * ATTN_TILE_FLOATS;
        if (kt + 1 < kt_end) {
            float* nb = attn_smem + (buf ^ 1) * ATTN_TILE_FLOATS;
            attn_load_tile<128>(nb, k, kv_stride, kt0 + 64, s_kv, col0);
            attn_load_tile<128>(nb + 2 * ATTN_TILE_FLOATS, v, kv_stride, kt0 + 64, s_kv, col0);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        // S = (Q / 8) K^T for 16 rows x 64 keys: s[j] covers keys kt0 + 8j .. 8j + 7.
        float s[8][4];
        if (FRESH) {  // k-step outer: each 8-dim step summed from zero, added in fp32 (round to nearest)
#pragma unroll
            for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const uint4 h4 = qf[(kk * 2) * 32], l4 = qf[(kk * 2 + 1) * 32];
                const unsigned ah[4] = {h4.x, h4.y, h4.z, h4.w}, al[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float* kr = Ks + (8 * j + g) * ATTN_LDS + t + 8 * kk;
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    attn_mma_split<NPASS>(c, ah, al, kr[0], kr[4]);
                    s[j][0] += c[0]; s[j][1] += c[1]; s[j][2] += c[2]; s[j][3] += c[3];
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
                const float* kr = Ks + (8 * j + g) * ATTN_LDS + t;
#pragma unroll
                for (int kk = 0; kk < 8; ++kk) attn_mma_split<NPASS>(s[j], qh[kk], ql[kk], kr[8 * kk], kr[8 * kk + 4]);
            }
        }

        const bool edge = kt0 + 64 > s_kv || (causal && kt0 + 63 > q_start + q0);
        if (edge) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = kt0 + 8 * j + 2 * t + (e & 1), qpos = q_start + (e < 2 ? r0 : r1);
                    if (key >= s_kv || (causal && key > qpos)) s[j][e] = attn_neg_inf();
                }
        }

        // Online softmax on rows r0 (half 0: e = 0, 1) and r1 (half 1: e = 2, 3); a row lives in a quad.
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = attn_neg_inf();
#pragma unroll
            for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hf], s[j][2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[hf], mx), base = attn_safe_max(m_new);
            alpha[hf] = expf(m[hf] - base);
            m[hf] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                s[j][2 * hf] = expf(s[j][2 * hf] - base);
                s[j][2 * hf + 1] = expf(s[j][2 * hf + 1] - base);
                sum += s[j][2 * hf] + s[j][2 * hf + 1];
            }
            l[hf] = l[hf] * alpha[hf] + sum;
        }

        // O += P V over this tile's 64 keys. !FRESH: into a fresh tile accumulator (the tensor cores sum
        // at most 64 keys), then o = o * alpha + O_tile in fp32 FMA. FRESH: o *= alpha first, then every
        // 8-key step is summed from zero and added to o in fp32.
        float ot[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (FRESH) {
                o[j][0] *= alpha[0]; o[j][1] *= alpha[0]; o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
            } else {
                ot[j][0] = ot[j][1] = ot[j][2] = ot[j][3] = 0.f;
            }
        }
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            unsigned ph[4], pl[4];
            const float pa[4] = {s[kk][0], s[kk][2], s[kk][1], s[kk][3]};  // keys 2t (a0, a1), 2t+1 (a2, a3)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (NPASS == 3) split_tf32_fast(pa[e], ph[e], pl[e]);
                else { ph[e] = f32_to_tf32(pa[e]); pl[e] = 0u; }
            }
            const float* vr = Vs + (8 * kk + 2 * t) * ATTN_LDS + g;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (FRESH) {
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    attn_mma_split<NPASS>(c, ph, pl, vr[8 * j], vr[ATTN_LDS + 8 * j]);
                    o[j][0] += c[0]; o[j][1] += c[1]; o[j][2] += c[2]; o[j][3] += c[3];
                } else {
                    attn_mma_split<NPASS>(ot[j], ph, pl, vr[8 * j], vr[ATTN_LDS + 8 * j]);
                }
            }
        }
        if (!FRESH) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                o[j][0] = fmaf(o[j][0], alpha[0], ot[j][0]);
                o[j][1] = fmaf(o[j][1], alpha[0], ot[j][1]);
                o[j][2] = fmaf(o[j][2], alpha[1], ot[j][2]);
                o[j][3] = fmaf(o[j][3], alpha[1], ot[j][3]);
            }
        }
        __syncthreads();  // this buffer is refilled two tiles later
    }

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    if (nsplit == 1) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = hf ? r1 : r0;
            if (row < s_q) {
                const float inv = 1.0f / l[hf];
                float* orow = out + (size_t)row * D + col0 + 2 * t;
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    *reinterpret_cast<float2*>(orow + 8 * j) = make_float2(o[j][2 * hf] * inv, o[j][2 * hf + 1] * inv);
            }
        }
        return;
    }

    // A split: store the partial; the last of the query tile's splits to finish combines them all in
    // split order (deterministic) and resets the ticket.
    const size_t tile = (size_t)qt * gridDim.y + h;
    const size_t slot0 = tile * gridDim.z;  // split s of this (query tile, head): slot0 + s
    {
        float* po = split.part_o + (slot0 + blockIdx.z) * 64 * 64;
        float* pml = split.part_ml + (slot0 + blockIdx.z) * 64 * 2;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int rl = warp * 16 + g + 8 * hf;  // row within the tile
#pragma unroll
            for (int j = 0; j < 8; ++j)
                *reinterpret_cast<float2*>(po + rl * 64 + 8 * j + 2 * t) = make_float2(o[j][2 * hf], o[j][2 * hf + 1]);
            if (t == 0) *reinterpret_cast<float2*>(pml + rl * 2) = make_float2(m[hf], l[hf]);
        }
    }
    __threadfence();
    __syncthreads();
    __shared__ int attn_is_last;
    if (threadIdx.x == 0) attn_is_last = atomicAdd(split.counters + tile, 1) == nsplit - 1;
    __syncthreads();
    if (!attn_is_last) return;
    __threadfence();
    attn_split_combine(split, slot0, nsplit, out, D, col0, q0, s_q, warp * 16 + g, t);
    if (threadIdx.x == 0) split.counters[tile] = 0;
}

// tf32x3 with every 8-wide mma step accumulated from zero and added to the running sums with fp32
// adds (round to nearest): the tensor cores' internal accumulation rounding then spans 8 products
// only. More ALU work than tf32x3, for accuracy closer to FFMA.
extern "C" __global__ void __launch_bounds__(128)
attention_prefill_tf32x3f(const float* __restrict__ q, int q_stride,   // q: [s_q, >= D]
                          const float* __restrict__ k,                 // k: [s_kv, >= D]
                          const float* __restrict__ v, int kv_stride,  // v: [s_kv, >= D]
                          float* __restrict__ out,                     // out: [s_q, D]
                          int D, int s_q, int s_kv, int q_start, int causal) {
    attn_prefill_mma<3, true>(q, q_stride, k, v, kv_stride, out, D, s_q, s_kv, q_start, causal,
                              gridDim.x - 1 - blockIdx.x);  // heavy (late) causal tiles first
}

extern "C" __global__ void __launch_bounds__(128)
attention_prefill_tf32(const float* __restrict__ q, int q_stride,   // q: [s_q, >= D]
                       const float* __restrict__ k,                 // k: [s_kv, >= D]
                       const float* __restrict__ v, int kv_stride,  // v: [s_kv, >= D]
                       float* __restrict__ out,                     // out: [s_q, D]
                       int D, int s_q, int s_kv, int q_start, int causal) {
    attn_prefill_mma<1, false>(q, q_stride, k, v, kv_stride, out, D, s_q, s_kv, q_start, causal,
                              gridDim.x - 1 - blockIdx.x);  // heavy (late) causal tiles first
}

// The same two kernels with the keys of long query tiles split across blocks (a query tile of n key
// tiles gets ceil(n / chunk) splits, grid.z = the most of any tile): a causal prefill's late tiles no
// longer set its length alone. Extra arguments: chunk, part_o, part_ml, counters (AttnSplit).
extern "C" __global__ void __launch_bounds__(128)
attention_prefill_split_tf32x3f(const float* __restrict__ q, int q_stride, const float* __restrict__ k,
                                const float* __restrict__ v, int kv_stride, float* __restrict__ out, int D,
                                int s_q, int s_kv, int q_start, int causal, int chunk, float* part_o,
                                float* part_ml, int* counters) {
    attn_prefill_mma<3, true>(q, q_stride, k, v, kv_stride, out, D, s_q, s_kv, q_start, causal,
                              gridDim.x - 1 - blockIdx.x, AttnSplit{chunk, part_o, part_ml, counters});
}

extern "C" __global__ void __launch_bounds__(128)
attention_prefill_split_tf32(const float* __restrict__ q, int q_stride, const float* __restrict__ k,
                             const float* __restrict__ v, int kv_stride, float* __restrict__ out, int D,
                             int s_q, int s_kv, int q_start, int causal, int chunk, float* part_o,
                             float* part_ml, int* counters) {
    attn_prefill_mma<1, false>(q, q_stride, k, v, kv_stride, out, D, s_q, s_kv, q_start, causal,
                               gridDim.x - 1 - blockIdx.x, AttnSplit{chunk, part_o, part_ml, counters});
}

// Packed variable-length causal prefill over the KV cache (CudaRunner.prefill_batch): the new tokens of
// several cache rows side by side in q / out, each segment attending causally to its own row's cached
// keys (its past) and to itself. One block per (entry of ``tiles``, head); the host lists the entries
// heaviest first. tiles: int32 [gridDim.x][ATTN_VARLEN_FIELDS = 5], one entry per (segment, 64-query tile):
//   {q_row0: the segment's first row in q / out, len: its new tokens, past: the keys its row held
//    before (its first query sits at position past), row: its cache row, qt: the query tile}
// k_cache, v_cache: key p of cache row r at k_cache + r * cache_batch_stride + p * D (v likewise);
// the segment's own keys must be stored there before the launch (kvcache_store_f32).
template <int NPASS, bool FRESH>
__device__ __forceinline__ void attn_prefill_varlen(const float* __restrict__ q, int q_stride,
                                                    const float* __restrict__ k_cache,
                                                    const float* __restrict__ v_cache, long long cache_batch_stride,
                                                    float* __restrict__ out, int D, const int* __restrict__ tiles) {
    const int* e = tiles + (size_t)blockIdx.x * ATTN_VARLEN_FIELDS;
    const int q_row0 = e[0], len = e[1], past = e[2], row = e[3], qt = e[4];
    attn_prefill_mma<NPASS, FRESH>(q + (size_t)q_row0 * q_stride, q_stride, k_cache + row * cache_batch_stride,
                                   v_cache + row * cache_batch_stride, D, out + (size_t)q_row0 * D, D, len,
                                   past + len, past, 1, qt);
}

extern "C" __global__ void __launch_bounds__(128)
attention_prefill_varlen_tf32x3f(const float* __restrict__ q, int q_stride,  // q: [sum len, >= D] packed
                                 const float* __restrict__ k_cache,          // k_cache: [rows][n_ctx][D] (strided)
                                 const float* __restrict__ v_cache,          // v_cache: likewise
                                 long long cache_batch_stride,               // floats between cache rows
                                 float* __restrict__ out,                    // out: [sum len, D] packed
                                 int D, const int* __restrict__ tiles) {     // tiles: [gridDim.x][FIELDS]
    attn_prefill_varlen<3, true>(q, q_stride, k_cache, v_cache, cache_batch_stride, out, D, tiles);
}

extern "C" __global__ void __launch_bounds__(128)
attention_prefill_varlen_tf32(const float* __restrict__ q, int q_stride, const float* __restrict__ k_cache,
                              const float* __restrict__ v_cache, long long cache_batch_stride,
                              float* __restrict__ out, int D, const int* __restrict__ tiles) {
    attn_prefill_varlen<1, false>(q, q_stride, k_cache, v_cache, cache_batch_stride, out, D, tiles);
}

// =============================================================================================
// attention_decode_f32: block (rank r, head h, row b), 128 threads; on sm_90 the ATTN_DEC_CLUSTER
// blocks of a (b, h) form one thread block cluster. The row's keys come in chunks of 64; chunk c
// belongs to rank c % ranks and is its round c / ranks. A round loads the chunk's keys and values
// into registers at once, scores them by 8 groups of 16 lanes (a float4 of the 64 dims per lane),
// and folds them into the rank's running (max m, sum l, unnormalised P V) with the online
// softmax. A lone rank (len <= 64 with clusters; every length without) writes the output itself;
// otherwise every rank stores its partial into rank 0's shared memory (distributed shared
// memory), arrives at the cluster barrier and leaves, and rank 0 combines the partials in rank
// order: no global scratch, no atomics, bit-exact run to run.
// =============================================================================================
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

// A round's keys and values in registers: group grp takes keys grp + 8j of [k0, k0 + n), all in
// flight at once (k, v: the head's columns of key 0, lane16's float4 already added; row stride D).
// (A plain `i < n` test: the compiler predicates the loads; any further condition on them made
// it branch around each, which measured slower.) ISSUED: each load by ld_pre_wait4 (common.cuh),
// so that it stays where it is written, before pdl_wait (read-only loads are moved past it).
#define ATTN_DEC_PER_GROUP (ATTN_DEC_CHUNK / 8)
template <bool ISSUED>
__device__ __forceinline__ void attn_dec_load(const float* __restrict__ k, const float* __restrict__ v, int D,
                                              int k0, int n, float4 (&kr)[ATTN_DEC_PER_GROUP],
                                              float4 (&vr)[ATTN_DEC_PER_GROUP]) {
    const int grp = threadIdx.x >> 4;
#pragma unroll
    for (int j = 0; j < ATTN_DEC_PER_GROUP; ++j) {
        const int i = grp + 8 * j;
        if (i < n) {
            const size_t off = (size_t)(k0 + i) * D;
            kr[j] = ISSUED ? ld_pre_wait4(k + off) : *reinterpret_cast<const float4*>(k + off);
            vr[j] = ISSUED ? ld_pre_wait4(v + off) : *reinterpret_cast<const float4*>(v + off);
        }
    }
}

// One round of attention_decode_f32 on keys [k0, k0 + n) already loaded (attn_dec_load), folded
// into the running max m, sum l and this group's P V o with the online softmax. q pre-scaled by
// 1/8; sc [64], scratch [32], stat [4]: shared. Ends with a barrier, so the next round may reuse
// sc and stat.
__device__ __forceinline__ void attn_dec_fold(const float4& qv, const float4 (&kr)[ATTN_DEC_PER_GROUP],
                                              const float4 (&vr)[ATTN_DEC_PER_GROUP], int n, float* sc,
                                              float* scratch, float* stat, float& m_run, float& l_run,
                                              float4& o) {
    const int tid = threadIdx.x, lane16 = tid & 15, grp = tid >> 4;
    // every key slot scored (slots past n hold zeros or an earlier round's keys; their scores are
    // not stored), so that the eight butterflies run side by side
    float d[ATTN_DEC_PER_GROUP];
    attn_dots16(qv, kr, d);
#pragma unroll
    for (int j = 0; j < ATTN_DEC_PER_GROUP; ++j) {
        const int i = grp + 8 * j;
        if (lane16 == 0 && i < n) sc[i] = d[j];
    }
    __syncthreads();

    float mx = attn_neg_inf();
    for (int i = tid; i < n; i += ATTN_DEC_THREADS) mx = fmaxf(mx, sc[i]);
    mx = warp_max(mx);
    if ((tid & 31) == 0) stat[tid >> 5] = mx;
    __syncthreads();
    const float m_new = fmaxf(m_run, fmaxf(fmaxf(stat[0], stat[1]), fmaxf(stat[2], stat[3])));
    const float base = attn_safe_max(m_new);
    const float alpha = m_run == attn_neg_inf() ? 0.f : expf(m_run - base);  // rescales the rounds before
    float sum = 0.f;
    for (int i = tid; i < n; i += ATTN_DEC_THREADS) {
        const float p = expf(sc[i] - base);
        sc[i] = p;
        sum += p;
    }
    sum = block_sum(sum, scratch);  // block_sum syncs before returning values
    __syncthreads();                // sc (probabilities) visible to all, scratch free again
    l_run = fmaf(l_run, alpha, sum);
    m_run = m_new;
    const float4 pv = attn_pv16(sc, vr, grp, 8, n);
    o = make_float4(fmaf(o.x, alpha, pv.x), fmaf(o.y, alpha, pv.y), fmaf(o.z, alpha, pv.z), fmaf(o.w, alpha, pv.w));
    __syncthreads();  // sc and stat free for the next round
}

extern "C" __global__ void __launch_bounds__(ATTN_DEC_THREADS) ATTN_DEC_CLUSTER_DIMS
attention_decode_f32(const float* __restrict__ q, int q_stride,         // q: [B, >= D]
                     const float* __restrict__ k_cache,                 // key t of row b at b * cbs + t * D
                     const float* __restrict__ v_cache,                 // value likewise
                     long long cache_batch_stride,                      // cbs, in floats
                     const int* __restrict__ lengths,                   // [B]
                     float* __restrict__ out,                           // [B, D]
                     int D, int max_len,
                     const int* __restrict__ slots) {                   // [B] cache row of each row, or NULL
    __shared__ __align__(16) float sc[ATTN_DEC_CHUNK];       // a round's scores, then probabilities
    __shared__ __align__(16) float red[8][64];               // per-group P V, for the final sum
    __shared__ float stat[ATTN_DEC_THREADS / 32];
    __shared__ float part[ATTN_DEC_RANKS][HEAD_DIM + 2];     // rank 0's: each rank's (P V [64], m, l)

    const int tid = threadIdx.x, lane16 = tid & 15, grp = tid >> 4;
    const int rank = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    constexpr int ranks = ATTN_DEC_RANKS;
    if (rank >= ranks) return;  // a grid wider than the recipe's: the extra blocks have no chunks
    // First half of the barrier's first phase: once every block has arrived, all have started,
    // so rank 0's shared memory exists before anyone stores into it.
    if (ranks > 1) cluster_arrive_relaxed();
    pdl_trigger();  // programmatic dependent launch (common.cuh)
    // Before the wait: the row's length and the keys / values of earlier steps (positions
    // 0 .. len - 2), which no kernel of this step writes (the step's ints and those positions
    // were complete before its first kernel started; see the top). Every block of the cluster
    // reads the same lengths[b], so all agree on n_active (and so on whether rank 0 takes the
    // lone-rank exit while others would store into it).
    const int len = lengths[b];
    const bool bad = len < 1 || len > max_len;
    // Ranks without a chunk leave at once (the cluster barrier waits only for threads that have
    // not exited). A bad length: rank 0 alone writes NaN.
    const int n_chunks = (len + ATTN_DEC_CHUNK - 1) / ATTN_DEC_CHUNK;
    const int n_active = bad ? 1 : min(ranks, n_chunks);
    if (rank >= n_active) return;
    const int slot = slots != nullptr ? slots[b] : b;  // the step's ints, like lengths: complete before the step
    const size_t row_off = (size_t)slot * (size_t)cache_batch_stride + (size_t)h * 64 + lane16 * 4;
    const float* krow = k_cache + row_off;
    const float* vrow = v_cache + row_off;
    // The first round straight-line, later ones (rows longer than 64 x ranks) in a loop: inside a
    // loop the compiler branches around each load of `if (i < n)` instead of predicating it,
    // which measured 0.5 us slower per call.
    const int k0 = rank * ATTN_DEC_CHUNK;
    const int n0 = bad ? 0 : min(ATTN_DEC_CHUNK, len - k0);
    // zeros in the slots a short round leaves unloaded (attn_dec_fold scores every slot)
    float4 kr[ATTN_DEC_PER_GROUP] = {}, vr[ATTN_DEC_PER_GROUP] = {};
    const int i_new = len - 1 - k0;  // this step's key in the first round (if < n0)
    attn_dec_load<true>(krow, vrow, D, k0, min(n0, i_new), kr, vr);  // the keys before it
    pdl_wait();
    float* orow = out + (size_t)b * D + h * 64;
    if (bad) {
        if (tid < 64) orow[tid] = __int_as_float(0x7fc00000);
        return;
    }
    float4 qv = *reinterpret_cast<const float4*>(q + (size_t)b * q_stride + h * 64 + lane16 * 4);
    // this step's key and value (written by the kernel before), where they fall in the first
    // round: one load by its group, then moved into place by selects
    if (i_new < n0 && (i_new & 7) == grp) {
        const float4 kn = *reinterpret_cast<const float4*>(krow + (size_t)(len - 1) * D);
        const float4 vn = *reinterpret_cast<const float4*>(vrow + (size_t)(len - 1) * D);
#pragma unroll
        for (int j = 0; j < ATTN_DEC_PER_GROUP; ++j) {
            if (grp + 8 * j == i_new) { kr[j] = kn; vr[j] = vn; }
        }
    }

    qv.x *= ATTN_SCALE; qv.y *= ATTN_SCALE; qv.z *= ATTN_SCALE; qv.w *= ATTN_SCALE;

    float m_run = attn_neg_inf(), l_run = 0.f;       // the rank's running max and sum (block-uniform)
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);      // this group's P V over the rank's keys, dims 4 lane16 ..
    attn_dec_fold(qv, kr, vr, n0, sc, red[0], stat, m_run, l_run, o);
    for (int c = rank + ranks; c < n_chunks; c += ranks) {
        const int n = min(ATTN_DEC_CHUNK, len - c * ATTN_DEC_CHUNK);
        attn_dec_load<false>(krow, vrow, D, c * ATTN_DEC_CHUNK, n, kr, vr);
        attn_dec_fold(qv, kr, vr, n, sc, red[0], stat, m_run, l_run, o);
    }

    // the 8 groups' P V added in group order; lane16 of group grp owns dims 4 lane16 .. + 3
    *reinterpret_cast<float4*>(&red[grp][lane16 * 4]) = o;
    __syncthreads();
    float a = 0.f;
    if (tid < 64) {
#pragma unroll
        for (int gi = 0; gi < 8; ++gi) a += red[gi][tid];
    }
    if (n_active == 1) {
        if (tid < 64) orow[tid] = a / l_run;
        return;
    }

    cluster_wait_acquire();  // the first phase: every block of the cluster has started
    if (tid < 64) st_cluster_f32(&part[rank][tid], 0, a);
    if (tid == 64) st_cluster_f32(&part[rank][64], 0, m_run);
    if (tid == 65) st_cluster_f32(&part[rank][65], 0, l_run);
    __syncwarp();              // the warps converged again before the .aligned barrier instruction
    cluster_arrive_release();  // the partial is rank 0's to read; the other ranks are done
    if (rank != 0) return;
    cluster_wait_acquire();
    if (tid < 64) {
        float mm = attn_neg_inf();
        for (int s = 0; s < n_active; ++s) mm = fmaxf(mm, part[s][64]);
        const float base = attn_safe_max(mm);
        float L = 0.f, A = 0.f;
        for (int s = 0; s < n_active; ++s) {
            const float w = part[s][64] == attn_neg_inf() ? 0.f : expf(part[s][64] - base);
            L = fmaf(part[s][65], w, L);
            A = fmaf(part[s][tid], w, A);
        }
        orow[tid] = A / L;
    }
}

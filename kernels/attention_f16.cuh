// attention_f16.cuh: the one-file export's attention on sm_80+, sm_90a included (solve.cu, path 2):
//
//   out[i, h*64 : h*64+64] = sum_j softmax_j(q_i . k_j / 8) v_j      over all S keys (no mask)
//
// flash style (online softmax over key tiles of 64), on fp16 tensor cores (mma.sync m16n8k16, fp32
// accumulation) from the fp16 planes of qkv that the QKV GEMM's epilogue writes (gemm_mma_f16.cuh: hi, and lo
// at PLANES 2, one scale s for all of qkv). PLANES 2 (fp32 mode): q.k and p.v each as three products, Ah Bh a
// k16 step at a time summed from zero and added by FADDs, the two lo products accumulated in the tensor
// core (gemm_mma_f16.cuh's header); the softmax weights p (in [0, 1], no scale) split into hi and lo in
// registers. PLANES 1 (tf32 mode): one product, sums in the tensor core. The output goes to its planes
// (the attention projection's A) with qkv's scale.
// Shapes: a block is 64 queries (4 warps, warp w rows 16w .. 16w + 15) of one head (blockIdx.y); its Q planes
// stay in shared memory, K and V tiles of 64 keys stream through two cp.async stages. Each 64 x 64 tile of
// a plane is [64 rows][64 halves], 16-byte chunk c of row r at r * 128 + (c ^ (r & 7)) * 16 bytes (ldmatrix
// conflict-free): Q and K through ldmatrix (A, and B as [key][dim]), V through ldmatrix.trans; p goes from
// the score accumulators straight to the A operand of p.v. Split keys: attention_split.cuh's scratch and
// deterministic combine. Device code only, sm_80+.
#pragma once
#include "attention_split.cuh"
#include "gemm_mma_f16.cuh"

template <int PLANES_>
struct AttnF16 {
    static constexpr int PLANES = PLANES_;
    static constexpr int THREADS = 128;
    static constexpr int TILE_BYTES = 64 * 64 * 2;              // one plane of a 64 x 64 tile
    static constexpr int Q_BYTES = PLANES * TILE_BYTES;         // the block's Q planes
    static constexpr int STAGE_BYTES = 2 * PLANES * TILE_BYTES;  // a key tile's K planes, then its V planes
    static constexpr int SMEM_BYTES = Q_BYTES + 2 * STAGE_BYTES;
};

// Byte offset of 16-byte chunk c (halves 8c .. 8c + 7) of row r in a swizzled 64 x 64 tile.
__device__ __forceinline__ int attn_f16_at(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// Rows row0 .. row0 + 63 (those >= n zero), halves col0 .. col0 + 63, of the [n][ld] plane src -> tile.
template <int THREADS>
__device__ __forceinline__ void attn_f16_load(char* tile, const unsigned short* src, int ld, int row0, int n,
                                              int col0) {
#pragma unroll
    for (int i = threadIdx.x; i < 64 * 8; i += THREADS) {
        const int r = i >> 3, c = i & 7;
        const bool ok = row0 + r < n;
        cp_async16(tile + attn_f16_at(r, c), ok ? src + (long long)(row0 + r) * ld + col0 + 8 * c : src, ok ? 16 : 0);
    }
}

// Query tile qt of head blockIdx.y over the keys of split blockIdx.z (split.chunk 0: all). qkv: planes
// [S][3D] (q at columns 0.., k at D.., v at 2D..), lo at qkv + S 3D; *s_qkv their scale. The output
// (attention's [S][D]) goes to its planes out_h, out_l (lo at PLANES 2) with the same scale: it is a mean of
// v rows, so the bound on |v| holds for it.
template <int PL>
__device__ __forceinline__ void attn_f16_body(const unsigned short* __restrict__ qkv, const float* __restrict__ s_qkv,
                                              unsigned short* out_h, unsigned short* out_l, int D, int S, int qt,
                                              AttnSplit split) {
    typedef AttnF16<PL> A;
    extern __shared__ float4 attn_f16_smem4[];
    char* const sm = reinterpret_cast<char*>(attn_f16_smem4);
    const unsigned sm0 = smem_u32(sm);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int q0 = qt * 64, col0 = blockIdx.y * 64, ld = 3 * D;
    const long long lo_at = (long long)S * ld;  // a lo plane after its hi

    const int n_all = (S + 63) / 64;  // key tiles
    int nsplit = 1, kt_begin = 0, kt_end = n_all;
    if (split.chunk > 0) {  // this block: split blockIdx.z of nsplit, key tiles [kt_begin, kt_end)
        nsplit = (n_all + split.chunk - 1) / split.chunk;
        if ((int)blockIdx.z >= nsplit) return;  // (the whole block: before any barrier)
        kt_begin = blockIdx.z * n_all / nsplit;
        kt_end = (blockIdx.z + 1) * n_all / nsplit;
    }
    auto load_kv = [&](int buf, int kt) {
        char* st = sm + A::Q_BYTES + buf * A::STAGE_BYTES;
#pragma unroll
        for (int p = 0; p < PL; ++p) {
            attn_f16_load<A::THREADS>(st + p * A::TILE_BYTES, qkv + p * lo_at, ld, 64 * kt, S, D + col0);
            attn_f16_load<A::THREADS>(st + (PL + p) * A::TILE_BYTES, qkv + p * lo_at, ld, 64 * kt, S, 2 * D + col0);
        }
    };
#pragma unroll
    for (int p = 0; p < PL; ++p) attn_f16_load<A::THREADS>(sm + p * A::TILE_BYTES, qkv + p * lo_at, ld, q0, S, col0);
    load_kv(0, kt_begin);
    cp_async_commit();

    const float sc = *s_qkv;
    const float qk_scale = ATTN_SCALE / (sc * sc);  // scores = q.k / 8 from the planes' products (exact scaling)
    float o[8][4], ol[PL == 2 ? 8 : 1][4];  // rows g (e 0, 1), g + 8 (e 2, 3) of the warp, dims 8j + 2t (+ 1)
    float m[2] = {attn_neg_inf(), attn_neg_inf()}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.f, ol[PL == 2 ? j : 0][e] = 0.f;

    for (int kt = kt_begin; kt < kt_end; ++kt) {
        const int buf = (kt - kt_begin) & 1;
        if (kt + 1 < kt_end) {
            load_kv(buf ^ 1, kt + 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const unsigned kb = sm0 + A::Q_BYTES + buf * A::STAGE_BYTES, vb = kb + PL * A::TILE_BYTES;

        // S = Q K^T, 16 rows x 64 keys: s[j] covers keys 64 kt + 8j .. 8j + 7
        float s[8][4], sl[PL == 2 ? 8 : 1][4];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = 0.f, sl[PL == 2 ? j : 0][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {  // dims 16 kk .. 16 kk + 15
            unsigned qh[4], ql[4];
            {
                const int off = attn_f16_at(warp * 16 + (lane & 15), 2 * kk + (lane >> 4));
                ldmatrix_x4(qh, sm0 + off);
                if constexpr (PL == 2) ldmatrix_x4(ql, sm0 + A::TILE_BYTES + off);
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {  // keys 16 jj .. 16 jj + 15: n8 tiles 2jj, 2jj + 1
                const int off = attn_f16_at(16 * jj + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1));
                unsigned kh[4], kl[4];
                ldmatrix_x4(kh, kb + off);
                if constexpr (PL == 2) {
                    ldmatrix_x4(kl, kb + A::TILE_BYTES + off);
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int j = 2 * jj + u;
                        float part[4];
                        mma_f16_16x8x16_zero(part, qh, kh[2 * u], kh[2 * u + 1]);
                        mma_f16_16x8x16(sl[j], qh, kl[2 * u], kl[2 * u + 1]);
                        mma_f16_16x8x16(sl[j], ql, kh[2 * u], kh[2 * u + 1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[j][e] += part[e];
                    }
                } else {
                    mma_f16_16x8x16(s[2 * jj], qh, kh[0], kh[1]);
                    mma_f16_16x8x16(s[2 * jj + 1], qh, kh[2], kh[3]);
                }
            }
        }
        const bool edge = 64 * kt + 64 > S;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if constexpr (PL == 2) s[j][e] = fmaf(sl[j][e], F16_LO_UNSCALE, s[j][e]);
                s[j][e] *= qk_scale;
                if (edge && 64 * kt + 8 * j + 2 * t + (e & 1) >= S) s[j][e] = attn_neg_inf();
            }

        // Online softmax on rows g (half 0: e = 0, 1) and g + 8 (half 1: e = 2, 3); a row lives in a quad.
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
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                o[j][e] *= alpha[e >> 1];
                if constexpr (PL == 2) ol[j][e] *= alpha[e >> 1];
            }

        // O += P V: keys 16 kk .. 16 kk + 15 (score tiles 2kk, 2kk + 1 as the A operand), dims in n8 tiles j
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned ph[4], pl[4];
            const float* s0 = s[2 * kk];
            const float* s1 = s[2 * kk + 1];
            f16_split2(s0[0], s0[1], 1.0f, PL, ph[0], pl[0]);
            f16_split2(s0[2], s0[3], 1.0f, PL, ph[1], pl[1]);
            f16_split2(s1[0], s1[1], 1.0f, PL, ph[2], pl[2]);
            f16_split2(s1[2], s1[3], 1.0f, PL, ph[3], pl[3]);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {  // dims 16 jj .. 16 jj + 15: n8 tiles 2jj, 2jj + 1
                const int off = attn_f16_at(16 * kk + (lane & 15), 2 * jj + (lane >> 4));
                unsigned vh[4], vl[4];
                ldmatrix_x4_trans(vh, vb + off);
                if constexpr (PL == 2) {
                    ldmatrix_x4_trans(vl, vb + A::TILE_BYTES + off);
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int j = 2 * jj + u;
                        float part[4];
                        mma_f16_16x8x16_zero(part, ph, vh[2 * u], vh[2 * u + 1]);
                        mma_f16_16x8x16(ol[j], ph, vl[2 * u], vl[2 * u + 1]);
                        mma_f16_16x8x16(ol[j], pl, vh[2 * u], vh[2 * u + 1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) o[j][e] += part[e];
                    }
                } else {
                    mma_f16_16x8x16(o[2 * jj], ph, vh[0], vh[1]);
                    mma_f16_16x8x16(o[2 * jj + 1], ph, vh[2], vh[3]);
                }
            }
        }
        __syncthreads();  // this stage is refilled by the next iteration's load
    }

    const float v_unscale = 1.0f / sc;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if constexpr (PL == 2) o[j][e] = fmaf(ol[j][e], F16_LO_UNSCALE, o[j][e]);
            o[j][e] *= v_unscale;
        }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    }
    // the pair of outputs (row, dims col0 + 8j + 2t, + 1) to the planes
    auto store = [&](int row, int j, const float2& v) {
        unsigned hi, lo;
        f16_split2(v.x, v.y, sc, PL, hi, lo);
        const long long at = (long long)row * D + col0 + 8 * j + 2 * t;
        *reinterpret_cast<unsigned*>(out_h + at) = hi;
        if (PL == 2) *reinterpret_cast<unsigned*>(out_l + at) = lo;
    };
    const int r0 = q0 + warp * 16 + g;
    if (nsplit == 1) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = r0 + 8 * hf;
            if (row < S) {
                const float inv = 1.0f / l[hf];
#pragma unroll
                for (int j = 0; j < 8; ++j) store(row, j, make_float2(o[j][2 * hf] * inv, o[j][2 * hf + 1] * inv));
            }
        }
        return;
    }

    // A split: store the partial; the last of the query tile's splits to finish combines them all in
    // split order (deterministic) and resets the ticket.
    const size_t tile = (size_t)qt * gridDim.y + blockIdx.y;
    const size_t slot0 = tile * gridDim.z;  // split z of this (query tile, head): slot0 + z
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
    __shared__ int attn_f16_is_last;
    if (threadIdx.x == 0) attn_f16_is_last = atomicAdd(split.counters + tile, 1) == nsplit - 1;
    __syncthreads();
    if (!attn_f16_is_last) return;
    __threadfence();
    attn_split_combine_to(split, slot0, nsplit, q0, S, warp * 16 + g, t, store);
    if (threadIdx.x == 0) split.counters[tile] = 0;
}

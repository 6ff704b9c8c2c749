// attention_wgmma.cu: GPT-2's multi-head attention (head dim 64) for prefill and solve() on Hopper's
// warpgroup tensor-core instruction, wgmma (sm_90a only, like gemm_wgmma.cu).
//
//   out[i, h*64 : h*64+64] = sum_j softmax_j(q_i . k_j / 8) v_j      over the keys j visible to query i
//
// Flash style: online softmax over key tiles of 64, no S x S matrix in memory. Two kernels a call.
//
// ---------------------------------------------------------------------------------------------
// attention_wg_kv_planes: K and V of every head as wgmma operand planes, made once per call so that
//   the attention kernel's producer fills a stage with bulk copies and nothing is split twice.
//     (const float* k, const float* v, int kv_stride, float* planes, int s_kv, int passes)
//     grid (KT = ceil(s_kv / 64), H), block 256.
//   planes: [H][KT][ATTN_WG_TILE_FLOATS]; one key tile's 64 KB:
//     K   at float 0:     [plane hi, lo][dim half 0, 1][64 keys][32 dims]  (k-major B of S = Q K^T)
//     V^T at float 8192:  [plane hi, lo][key half 0, 1][64 dims][32 keys]  (k-major B of O = P V)
//   each [64][32] block is 8 KB of 128-byte rows in the 128-byte swizzle (gw_chunk_offset); hi =
//   tf32(x) rounded to nearest, lo = tf32(x - hi) (passes == 3; passes == 1 writes hi only); keys
//   >= s_kv are zeros. V^T's keys are permuted within each group of 8 (position p holds key
//   2 (p % 4) + p / 4): the order in which S's accumulators hand P to wgmma as its A fragment.
//
// attention_wg_tf32x3 / attention_wg_tf32: block = 2 consumer warpgroups (64 queries each, one
//   head) + 1 producer warp (ATTN_WG_THREADS = 288).
//     (const float* q, int q_stride, const float* planes, float* out, int D, int s_q, int s_kv,
//      int q_start, int causal, int chunk, float* part_o, float* part_ml, int* counters)
//     grid (ceil(s_q / 128), H, splits), dynamic shared memory ATTN_WG_SMEM_BYTES(planes) (2 planes
//     for tf32x3: 197,664 bytes; 1 for tf32: 164,896), one block per SM.
//   q: [s_q, >= D], row i at q + i * q_stride (head h at columns 64 h ..), 16-byte aligned, q_stride % 4 == 0;
//   out: [s_q, D] contiguous; query i sits at position q_start + i; causal != 0: it sees keys
//   0 .. q_start + i (and < s_kv); causal == 0: all s_kv keys.
//   chunk > 0: the block's 128 queries' key tiles (n) are cut into ceil(n / chunk) balanced splits,
//   blockIdx.z the split (grid.z = the most of any block); each warpgroup's 64-query tile leaves its
//   partial in part_o [tiles64][H][grid.z][64][64] / part_ml [..][64][2] and the last of its splits
//   to finish (ticket in counters [tiles64][H], zero before and left zero) combines them in split
//   order: deterministic. tiles64 = 2 ceil(s_q / 128). chunk == 0: no split (the scratch unused).
//
//   producer (warp 8, one thread): for each of the block's key tiles it waits for a free ring slot
//     (empty[s], one arrival per consumer warpgroup) and bulk-copies the tile's K and V^T planes
//     into it, counted on full[s].
//   consumer warpgroup w (queries q0 + 64 w ..): Q / 8, split hi / lo into its own shared planes
//     once; then per key tile:
//       S = Q K^T:  tf32x3: the first 32 dims' 12 wgmmas (lo*hi', hi*lo', hi*hi' per k8 step) into
//                   S from zero, the other 32 dims' into `part`, then S += part in fp32 (a tensor-core
//                   sum spans 12 products, as in gemm_wgmma.cu, whose all-K sums measured 95-125x
//                   torch fp32's error); tf32: 8 wgmmas into S.
//       online softmax on S's registers (a row lives in a quad of lanes), O *= alpha;
//       O += P V in two halves of 32 keys: P's hi / lo fragments straight from S's registers
//                   (key 8j + 2t at k position t, 8j + 2t + 1 at t + 4: V^T's permutation matches),
//                   the half's wgmmas into `part` from zero, then O += part in fp32;
//       one arrival on empty[s].
//     While one warpgroup waits for its wgmmas or works on its softmax, the other's keep the
//     tensor cores busy.
// ---------------------------------------------------------------------------------------------
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"
#include "attention_split.cuh"

// Build parameters (build.py; the host lays out the K / V planes and launches by them):
// ATTN_WG_TILE_FLOATS one key tile's planes in global memory (16384: 64 KB), ATTN_WG_THREADS 2 consumer
// warpgroups + the producer warp (288).
#ifndef ATTN_WG_TILE_FLOATS
#error "ATTN_WG_TILE_FLOATS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef ATTN_WG_THREADS
#error "ATTN_WG_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#define ATTN_WG_V_FLOATS 8192              // V^T's offset within it
#define ATTN_WG_BLOCK_BYTES 8192           // one [64][32] plane block
#define ATTN_WG_GROUP 2  // tf32x3: k8 steps per tensor-core sum (6 products); 4 (12 products) measured
                         // up to 3.5x torch fp32's error
#define ATTN_WG_STAGES(planes) ((planes) == 2 ? 2 : 4)
#define ATTN_WG_Q_BYTES(planes) ((planes) * 2 * ATTN_WG_BLOCK_BYTES)      // one warpgroup's Q planes
#define ATTN_WG_STAGE_BYTES(planes) ((planes) * 4 * ATTN_WG_BLOCK_BYTES)  // K and V^T planes of a tile
#define ATTN_WG_SMEM_BYTES(planes) \
    (1024 + 2 * ATTN_WG_Q_BYTES(planes) + ATTN_WG_STAGES(planes) * ATTN_WG_STAGE_BYTES(planes) + 16 * ATTN_WG_STAGES(planes))

// Float offset of element (r, c) (c < 32) of a swizzled [64][32] plane block.
__device__ __forceinline__ int attn_wg_at(int r, int c) { return r * 32 + (((c >> 2) ^ (r & 7)) << 2) + (c & 3); }

__device__ __forceinline__ void attn_wg_split4(float4 x, float4& hi, float4& lo) {
    const float xs[4] = {x.x, x.y, x.z, x.w};
    float h[4], l[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        h[e] = __uint_as_float(tf32_rna_bits(xs[e]));
        l[e] = __uint_as_float(tf32_rna_bits(xs[e] - h[e]));
    }
    hi = make_float4(h[0], h[1], h[2], h[3]);
    lo = make_float4(l[0], l[1], l[2], l[3]);
}

extern "C" __global__ void __launch_bounds__(256) attention_wg_kv_planes(
    const float* __restrict__ k, const float* __restrict__ v, int kv_stride,  // k, v: [s_kv, >= D]
    float* __restrict__ planes, int s_kv, int passes) {
    __shared__ float vs[64][65];  // the tile's V (keys x dims), for the transpose
    const int kt = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    float* base = planes + ((long long)h * gridDim.x + kt) * ATTN_WG_TILE_FLOATS;
#pragma unroll
    for (int it = 0; it < 4; ++it) {  // 64 keys x 16 float4
        const int idx = tid + 256 * it, r = idx >> 4, c4 = idx & 15, key = kt * 64 + r;
        float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
        if (key < s_kv) {
            kx = *reinterpret_cast<const float4*>(k + (long long)key * kv_stride + h * 64 + 4 * c4);
            vx = *reinterpret_cast<const float4*>(v + (long long)key * kv_stride + h * 64 + 4 * c4);
        }
        float4 hi, lo;
        attn_wg_split4(kx, hi, lo);
        const int half = c4 >> 3, at = attn_wg_at(r, 4 * (c4 & 7));
        *reinterpret_cast<float4*>(base + half * 2048 + at) = hi;
        if (passes == 3) *reinterpret_cast<float4*>(base + (2 + half) * 2048 + at) = lo;
        vs[r][4 * c4] = vx.x; vs[r][4 * c4 + 1] = vx.y; vs[r][4 * c4 + 2] = vx.z; vs[r][4 * c4 + 3] = vx.w;
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < 4; ++it) {  // V^T: 64 dims x 16 float4 of key positions
        const int idx = tid + 256 * it, d = idx >> 4, p4 = idx & 15, kh = p4 >> 3;
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int p = 4 * (p4 & 7) + e, q = p & 7;                   // position within the 32-key half
            x[e] = vs[32 * kh + 8 * (p >> 3) + 2 * (q & 3) + (q >> 2)][d];  // key 2 (q % 4) + q / 4 of its 8
        }
        float4 hi, lo;
        attn_wg_split4(make_float4(x[0], x[1], x[2], x[3]), hi, lo);
        const int at = attn_wg_at(d, 4 * (p4 & 7));
        *reinterpret_cast<float4*>(base + ATTN_WG_V_FLOATS + kh * 2048 + at) = hi;
        if (passes == 3) *reinterpret_cast<float4*>(base + ATTN_WG_V_FLOATS + (2 + kh) * 2048 + at) = lo;
    }
}

// Barrier of one consumer warpgroup's 128 threads (named barriers 1 and 2).
__device__ __forceinline__ void attn_wg_sync(int w) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory"); }

template <int PASSES>
__device__ __forceinline__ void attn_wg_body(const float* __restrict__ q, int q_stride, const float* __restrict__ planes,
                                             float* __restrict__ out, int D, int s_q, int s_kv, int q_start,
                                             int causal, AttnSplit split) {
    constexpr int PL = PASSES == 3 ? 2 : 1;  // planes
    constexpr int STAGES = ATTN_WG_STAGES(PL);
    constexpr unsigned QB = ATTN_WG_Q_BYTES(PL), ST = ATTN_WG_STAGE_BYTES(PL), BLK = ATTN_WG_BLOCK_BYTES;
    constexpr unsigned VOFF = PL * 2 * BLK;  // V^T's offset in a stage
    // a plane block's byte offset within a Q area / a stage's K or V^T part: (plane, half)
    auto blk = [](int plane, int half) { return (unsigned)((plane * 2 + half) * BLK); };

    const int tid = threadIdx.x, wg = tid >> 7;
    const int qb = gridDim.x - 1 - blockIdx.x;  // heavy (late) causal blocks first
    const int q0 = qb * 128, h = blockIdx.y, H = gridDim.y;
    const int KT = (s_kv + 63) / 64;

    const int n_all = (attn_keys_needed(q0, s_q, s_kv, q_start, causal, 128) + 63) / 64;
    int nsplit = 1, kt_begin = 0, kt_end = n_all;
    if (split.chunk > 0) {
        nsplit = (n_all + split.chunk - 1) / split.chunk;
        if ((int)blockIdx.z >= nsplit) return;  // the whole block, before any barrier
        kt_begin = blockIdx.z * n_all / nsplit;
        kt_end = (blockIdx.z + 1) * n_all / nsplit;
    }

    extern __shared__ float4 attn_wg_smem4[];
    const unsigned raw = smem_u32(attn_wg_smem4);
    const unsigned qarea = raw + ((1024u - (raw & 1023u)) & 1023u);  // Q planes of warpgroups 0, 1
    const unsigned ring = qarea + 2 * QB;
    const unsigned bars = ring + STAGES * ST;
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);   // the producer's arrival (+ its copies' bytes)
            mbar_init(empty(s), 2);  // one arrival per consumer warpgroup
        }
        GW_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 2) {
        // ---- producer: one thread ----
        if (tid != 256) return;
        const float* head = planes + (long long)h * KT * ATTN_WG_TILE_FLOATS;
        for (int i = 0; i < kt_end - kt_begin; ++i) {
            const int s = i % STAGES;
            if (i >= STAGES) mbar_wait(empty(s), ((i / STAGES) + 1) & 1);
            const float* src = head + (long long)(kt_begin + i) * ATTN_WG_TILE_FLOATS;
            const unsigned dst = ring + s * ST;
            mbar_arrive_expect_tx(full(s), ST);
            bulk_copy_g2s(dst, src, PL * 2 * BLK, full(s));                                // K planes
            bulk_copy_g2s(dst + VOFF, src + ATTN_WG_V_FLOATS, PL * 2 * BLK, full(s));      // V^T planes
        }
        return;
    }

    // ---- consumer warpgroup wg: queries q0w .. q0w + 63 ----
    const int ct = tid & 127, warp = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
    const int q0w = q0 + 64 * wg;
    const bool rows_live = q0w < s_q;
    const int n_wg = rows_live ? (attn_keys_needed(q0w, s_q, s_kv, q_start, causal) + 63) / 64 : 0;
    const unsigned qa = qarea + wg * QB;

    // Q / 8 into this warpgroup's planes (rows >= s_q: zeros)
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int idx = ct + 128 * it, r = idx >> 4, c4 = idx & 15;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0w + r < s_q) x = *reinterpret_cast<const float4*>(q + (long long)(q0w + r) * q_stride + h * 64 + 4 * c4);
        x.x *= ATTN_SCALE; x.y *= ATTN_SCALE; x.z *= ATTN_SCALE; x.w *= ATTN_SCALE;
        float4 hi, lo;
        attn_wg_split4(x, hi, lo);
        const unsigned at = 4u * attn_wg_at(r, 4 * (c4 & 7)), half = c4 >> 3;
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(qa + blk(0, half) + at), "f"(hi.x), "f"(hi.y),
                     "f"(hi.z), "f"(hi.w) : "memory");
        if (PASSES == 3)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(qa + blk(1, half) + at), "f"(lo.x),
                         "f"(lo.y), "f"(lo.z), "f"(lo.w) : "memory");
    }
    fence_proxy_async_smem();  // the generic-proxy writes above, seen by wgmma
    attn_wg_sync(wg);

    // Accumulator layout (m64n64, f32): warp `warp` holds rows 16 warp + g (+ 8); element 4j + 2hf + e
    // is (row 16 warp + g + 8 hf, column 8j + 2t + e): a key of S, a dim of O.
    float o[32], sacc[32], part[32];
    float m[2] = {attn_neg_inf(), attn_neg_inf()}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i] = 0.f;

    for (int i = 0; i < kt_end - kt_begin; ++i) {
        const int s = i % STAGES, kt = kt_begin + i, kt0 = kt * 64;
        mbar_wait(full(s), (i / STAGES) & 1);
        if (kt >= n_wg) {  // no key of this tile is visible to this warpgroup's queries
            if (ct == 0) mbar_arrive(empty(s));
            continue;
        }
        const unsigned kb = ring + s * ST, vb = kb + VOFF;

        // S = (Q / 8) K^T. tf32x3: ATTN_WG_GROUP k8 steps (3 products each) per tensor-core sum, the
        // first group into S, each later one into `part` and added to S in fp32.
        if (PASSES == 3) {
            auto s_group = [&](float (&d)[32], int grp) {
#pragma unroll
                for (int u = 0; u < ATTN_WG_GROUP; ++u) {
                    const int kk = grp * ATTN_WG_GROUP + u, hf = kk >> 2;
                    const unsigned off = GW_K8_STEP * (kk & 3);
                    wgmma_tf32_ss_m64n64k8(d, wgmma_desc(qa + blk(1, hf) + off), wgmma_desc(kb + blk(0, hf) + off),
                                           u == 0 ? 0 : 1);  // lo * hi'
                    wgmma_tf32_ss_m64n64k8(d, wgmma_desc(qa + blk(0, hf) + off), wgmma_desc(kb + blk(1, hf) + off), 1);
                    wgmma_tf32_ss_m64n64k8(d, wgmma_desc(qa + blk(0, hf) + off), wgmma_desc(kb + blk(0, hf) + off), 1);
                }
            };
            wgmma_fence();
            wgmma_pin(sacc);
            s_group(sacc, 0);
            wgmma_commit();
#pragma unroll
            for (int grp = 1; grp < 8 / ATTN_WG_GROUP; ++grp) {
                wgmma_fence();  // part was read by the adds since its last wgmma
                wgmma_pin(part);
                s_group(part, grp);
                wgmma_commit();
                wgmma_wait<0>();
                wgmma_pin(sacc);
                wgmma_pin(part);
#pragma unroll
                for (int e = 0; e < 32; ++e) sacc[e] += part[e];
            }
        } else {
            wgmma_fence();
            wgmma_pin(sacc);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int k8 = 0; k8 < 4; ++k8) {
                    const unsigned off = GW_K8_STEP * k8;
                    wgmma_tf32_ss_m64n64k8(sacc, wgmma_desc(qa + blk(0, hf) + off), wgmma_desc(kb + blk(0, hf) + off),
                                           hf == 0 && k8 == 0 ? 0 : 1);
                }
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_pin(sacc);
        }

        // mask, then the online softmax of rows 16 warp + g (hf = 0) and + 8 (hf = 1)
        const int rbase = q_start + q0w + 16 * warp + g;
        if (kt0 + 64 > s_kv || (causal && kt0 + 63 > q_start + q0w)) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = kt0 + 8 * j + 2 * t + (e & 1);
                    if (key >= s_kv || (causal && key > rbase + 8 * (e >> 1))) sacc[4 * j + e] = attn_neg_inf();
                }
        }
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float mx = attn_neg_inf();
#pragma unroll
            for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(sacc[4 * j + 2 * hf], sacc[4 * j + 2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[hf], mx), base = attn_safe_max(m_new);
            alpha[hf] = expf(m[hf] - base);
            m[hf] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sacc[4 * j + 2 * hf] = expf(sacc[4 * j + 2 * hf] - base);
                sacc[4 * j + 2 * hf + 1] = expf(sacc[4 * j + 2 * hf + 1] - base);
                sum += sacc[4 * j + 2 * hf] + sacc[4 * j + 2 * hf + 1];
            }
            l[hf] = l[hf] * alpha[hf] + sum;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            o[4 * j] *= alpha[0]; o[4 * j + 1] *= alpha[0];
            o[4 * j + 2] *= alpha[1]; o[4 * j + 3] *= alpha[1];
        }

        // O += P V, NG k8 steps (8 keys each) per tensor-core sum into `part`, added to O in fp32
        constexpr int NG = PASSES == 3 ? ATTN_WG_GROUP : 4;
#pragma unroll
        for (int grp = 0; grp < 8 / NG; ++grp) {
            unsigned ph[NG][4], pl[NG][4];
#pragma unroll
            for (int u = 0; u < NG; ++u) {
                const int j = grp * NG + u;
                // fragment register hf + 2e: row + 8 hf, k position t + 4e <-> key 8j + 2t + e
                const float pa[4] = {sacc[4 * j], sacc[4 * j + 2], sacc[4 * j + 1], sacc[4 * j + 3]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (PASSES == 3) split_tf32(pa[e], ph[u][e], pl[u][e]);
                    else ph[u][e] = tf32_rna_bits(pa[e]);
                }
            }
            wgmma_fence();
            wgmma_pin(part);
#pragma unroll
            for (int u = 0; u < NG; ++u) {
                const int j = grp * NG + u, kh = j >> 2;
                const unsigned off = GW_K8_STEP * (j & 3);
                if (PASSES == 3) {
                    wgmma_tf32_rs_m64n64k8(part, pl[u], wgmma_desc(vb + blk(0, kh) + off), u == 0 ? 0 : 1);
                    wgmma_tf32_rs_m64n64k8(part, ph[u], wgmma_desc(vb + blk(1, kh) + off), 1);
                    wgmma_tf32_rs_m64n64k8(part, ph[u], wgmma_desc(vb + blk(0, kh) + off), 1);
                } else {
                    wgmma_tf32_rs_m64n64k8(part, ph[u], wgmma_desc(vb + blk(0, kh) + off), u == 0 ? 0 : 1);
                }
            }
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_pin(part);
#pragma unroll
            for (int e = 0; e < 32; ++e) o[e] += part[e];
        }
        if (ct == 0) mbar_arrive(empty(s));  // the tile's wgmmas are done with its stage
    }

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    }
    if (!rows_live) return;
    const int col0 = h * 64;
    if (nsplit == 1) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = q0w + 16 * warp + g + 8 * hf;
            if (row < s_q) {
                const float inv = 1.0f / l[hf];
                float* orow = out + (long long)row * D + col0 + 2 * t;
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    *reinterpret_cast<float2*>(orow + 8 * j) =
                        make_float2(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
            }
        }
        return;
    }

    // A split: the partial of this warpgroup's 64-query tile; the last of the tile's splits to
    // finish combines them all in split order (deterministic) and resets the ticket.
    const long long tile = (long long)(2 * qb + wg) * H + h;
    const long long slot0 = tile * gridDim.z;
    {
        float* po = split.part_o + (slot0 + blockIdx.z) * 64 * 64;
        float* pml = split.part_ml + (slot0 + blockIdx.z) * 64 * 2;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int rl = 16 * warp + g + 8 * hf;
#pragma unroll
            for (int j = 0; j < 8; ++j)
                *reinterpret_cast<float2*>(po + rl * 64 + 8 * j + 2 * t) = make_float2(o[4 * j + 2 * hf], o[4 * j + 2 * hf + 1]);
            if (t == 0) *reinterpret_cast<float2*>(pml + rl * 2) = make_float2(m[hf], l[hf]);
        }
    }
    __threadfence();
    attn_wg_sync(wg);
    __shared__ int attn_wg_is_last[2];
    if (ct == 0) attn_wg_is_last[wg] = atomicAdd(split.counters + tile, 1) == nsplit - 1;
    attn_wg_sync(wg);
    if (!attn_wg_is_last[wg]) return;
    __threadfence();
    attn_split_combine(split, slot0, nsplit, out, D, col0, q0w, s_q, 16 * warp + g, t);
    if (ct == 0) split.counters[tile] = 0;
}

extern "C" __global__ void __launch_bounds__(ATTN_WG_THREADS, 1)
attention_wg_tf32x3(const float* __restrict__ q, int q_stride, const float* __restrict__ planes,
                    float* __restrict__ out, int D, int s_q, int s_kv, int q_start, int causal, int chunk,
                    float* part_o, float* part_ml, int* counters) {
    attn_wg_body<3>(q, q_stride, planes, out, D, s_q, s_kv, q_start, causal, AttnSplit{chunk, part_o, part_ml, counters});
}

extern "C" __global__ void __launch_bounds__(ATTN_WG_THREADS, 1)
attention_wg_tf32(const float* __restrict__ q, int q_stride, const float* __restrict__ planes,
                  float* __restrict__ out, int D, int s_q, int s_kv, int q_start, int causal, int chunk,
                  float* part_o, float* part_ml, int* counters) {
    attn_wg_body<1>(q, q_stride, planes, out, D, s_q, s_kv, q_start, causal, AttnSplit{chunk, part_o, part_ml, counters});
}

// decode_cluster.cu: every transformer block of a one-token decode step (batch 1, bf16 weights, one
// width per build: DC_D, gpt2's 768) in one persistent kernel of thread block clusters, one cluster
// of DC_C = 8 blocks per head.
//
// Why: at batch 1 the five-kernel chain (gemv.cu, attention.cu) is a chain of handoffs, each a kernel
// boundary of 1.5-2.9 us, five a layer, 10.6 us (docs/PERFORMANCE.md, versions 32 and 34). Here a layer has
// two handoffs through global memory and three inside a cluster (distributed shared memory and
// barrier.cluster, 0.5-1.8 us in version 34's probes): 9.15 us a layer at gpt2 (version 36's trace; gpt2
// bf16 b1 7,540-7,562 tok/s, the chain 6,631-6,700 in version 35). Cluster c owns head c from its LayerNorm
// to its share of the projections:
//
//   phase  block r of cluster c computes                                   hands off by
//   A      h = LN1(x); q, k, v dims [8r, 8r + 8) of head c; K, V -> cache    DSMEM to the 8 blocks, cluster barrier
//   B      head c's attention over keys p = 16 (8 i + r) + g (g: 16-lane     DSMEM partials (m, l, acc[64]),
//          group), combined in the block, then over the cluster          cluster barrier
//   C      part1[c][n] = att_c . W_attn^T[n, 64c : 64c + 64], n in r's 96     global, grid counter
//   D      x1 = x + b_attn + sum_c part1[c] (every block, fixed order);     DSMEM to the 8 blocks,
//          f = gelu(LN2(x1) @ W_fc^T + b) for FC rows 256c + 32r + [0, 32)   cluster barrier
//   E      part2[c][n] = f_c . W_proj^T[n, 256c : 256c + 256], n in r's 96  global, grid counter
//   (next layer's A starts with x = x1 + b_proj + sum_c part2[c], every block, fixed order)
//
// The global handoffs: a block's thread 0 adds one to a grid counter with release semantics once the
// block's partials are written (after a block barrier); a reader's thread 0 polls it with acquire loads, and
// then the block reads the partials. A block writes part1 (part2) again only after it has summed every
// block's part2 (part1) of the phase before, which each block wrote after summing the part1 (part2) it is
// about to overwrite: one buffer each. (Version 35 measured the partials as 64-bit words, each float with a
// flag naming the launch and phase, polled by every reader thread: 1,978-2,230 tok/s; the same words behind
// the counter 5,813-5,859; float partials behind it 6,956-7,044: docs/PERFORMANCE.md.)
// Every block keeps the whole residual stream x [D] in shared memory (the gathers are the same sums in
// the same order in every block, so the copies agree bit for bit), so the LayerNorms need no handoff.
// Weights: a block's share of a layer is one contiguous stretch of the packed copy (below), 144 KB at
// D = 768, in four shared-memory slots, one a matrix, each refilled by one bulk copy (evict-first in the
// L2) with the next layer's share once this layer is done with it: the copies run ahead of the arithmetic,
// across the barriers. FC's refill waits for the next layer's first gather (below), because a grid
// arrival's release waits for the block's copies in flight (version 36: 9.6 -> 9.15 us a layer). The layer's
// vectors (LayerNorm gains and shifts, the projections' biases) come by a bulk copy into two slots (this
// layer's and the next); the QKV and FC bias slices by plain loads.
//
// decode_cluster_bf16(wpk, vecs, bqf, n_layer, eps, x, kv, batch_stride, layer_stride, n_ctx, seq, pos,
//                     lengths, part1, part2, sync)
//   wpk      bf16 bits, [n_layer][H][DC_C][DC_E]: block (c, r)'s share of a layer, in the order
//            QKV [3][8][D] (q, k, v rows 64c + 8r + j of W_qkv^T), W_attn [96][64] (rows 96r + i of
//            W_attn^T, columns 64c + j), W_fc [32][D] (rows 256c + 32r + i of W_fc^T), W_proj [96][256]
//            (rows 96r + i of W_proj^T, columns 256c + j): gpt2block/backends/cuda/decode_paths.py packs it
//   vecs     float32 [n_layer][6][D]: ln1_g, ln1_b, b_attn, ln2_g, ln2_b, b_proj
//   bqf      float32 [n_layer][7D]: b_qkv [3D], b_fc [4D]
//   x        [D] the residual stream, updated in place (the embedding of the new token on entry)
//   kv       the KV cache as the runner keeps it: key p of cache row s, layer l at
//            kv + s * batch_stride + l * layer_stride + p * D, its value n_ctx * D further on
//   seq, pos, lengths [1] int32: the token goes to cache row seq[0] at position pos[0] and attends to
//            lengths[0] keys. The caller keeps seq[0] a row of the cache (gpt2block: Cache.check_room);
//            lengths[0] outside [1, n_ctx] or pos[0] outside [0, n_ctx) reads no key, writes no cache row
//            and gives a NaN attention (so NaN logits)
//   part1, part2  float32 [H][D] scratch (each fully written before it is read)
//   sync     [2] uint32: the grid counter and the blocks out; zero before the first launch, and each
//            launch leaves them zero
// Launch: grid (H * DC_C) with clusters of DC_C (compiled in), block DC_THREADS, dynamic shared memory
// DC_SMEM bytes; every cluster must be resident at once (gpt2block checks the device's count of
// co-resident clusters first; a grid counter that never fills traps after about ten seconds).
// Programmatic dependent launch: the first layer's weights and vectors are fetched before pdl_wait();
// the dependents are released at the start of the last layer. Results repeat bit for bit (fixed orders,
// no float atomics). sm_90a (kernel_source.ARCH_SPECIFIC): bulk copies and clusters; built for another
// target the kernel traps, and gpt2block does not launch it there.

#include "common.cuh"
#include "wgmma.cuh"  // mbarrier and bulk-copy helpers (GW_ASM: sm_90a)

// Build parameters (gpt2block/backends/cuda/build.py; the host packs the weights and sizes the shared memory
// by the same values): DC_D the width (gpt2's 768), DC_C blocks per cluster (per head), DC_THREADS,
// DC_PART floats of an attention partial: acc[64], m, l (and padding).
#ifndef DC_D
#error "DC_D is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DC_C
#error "DC_C is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DC_THREADS
#error "DC_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DC_PART
#error "DC_PART is set by gpt2block/backends/cuda/build.py"
#endif
#define DC_H (DC_D / HEAD_DIM)       // heads = clusters
#define DC_WARPS (DC_THREADS / 32)
#define DC_QR (HEAD_DIM / DC_C)      // 8: dims of q (k, v) a block forms
#define DC_OR (DC_D / DC_C)          // 96: projection outputs a block forms
#define DC_FH (4 * HEAD_DIM)         // 256: FC outputs a cluster forms (4D / H)
#define DC_FR (DC_FH / DC_C)         // 32: FC outputs a block forms
#define DC_E_QKV (3 * DC_QR * DC_D)  // bf16 elements of a block's share, by matrix
#define DC_E_O (DC_OR * HEAD_DIM)
#define DC_E_FC (DC_FR * DC_D)
#define DC_E_PR (DC_OR * DC_FH)
#define DC_E (DC_E_QKV + DC_E_O + DC_E_FC + DC_E_PR)
#define DC_V (6 * DC_D)              // floats of a layer's vectors
#define DC_GROUPS (DC_THREADS / 16)  // 16-lane attention groups of a block
#define DC_SPINS (1u << 24)          // polls of the grid counter before giving up (__trap)
// Where thread 0 issues each slot's refill (the next layer's share of that matrix). A grid arrival's release
// waits for the block's bulk copies in flight, and a gather is slower beside them (version 35), so the point
// decides which handoff a copy slows. QKV's refill goes out after the QKV cluster barrier, W_attn's after the
// attention projection's arrival, W_proj's after the MLP projection's arrival (each as soon as its slot is
// free), and FC's once the next layer's first gather is done, so that the MLP arrival no longer waits for its
// 48 KB (after the FC cluster barrier, as soon as free: slower). gpt2 bf16 b1 on the H200, tok/s in one
// process (docs/PERFORMANCE.md, version 36, which also lists the other points measured, all slower or no
// faster): FC after the FC barrier 7,175-7,215, after the next layer's first gather 7,540-7,562.
// The dependent kernel is released at the last layer's start; the weights' bulk copies are evict-first in
// the L2 (each byte is read once a step), so that they stream past what later kernels keep there (the LM
// screen's rows).

// Dynamic shared memory, in this order: weights [DC_E] bf16; vectors [2][DC_V]; x [D]; h [D]; qkv [192];
// group partials [DC_GROUPS][DC_PART]; cluster partials [DC_C][DC_PART]; att [64]; f [256];
// LayerNorm sums [2][DC_WARPS] double; mbarriers [6] (4 matrices, 2 vector slots).
#define DC_SMEM_FLOATS (2 * DC_V + 2 * DC_D + 3 * HEAD_DIM + (DC_GROUPS + DC_C) * DC_PART + HEAD_DIM + DC_FH)
#define DC_SMEM (2 * DC_E + 4 * DC_SMEM_FLOATS + 8 * 2 * DC_WARPS + 8 * 6)

static_assert(DC_D % DC_THREADS == 0, "decode_cluster: D a multiple of 256");
static_assert((3 * DC_QR) % DC_WARPS == 0 && 3 * DC_QR / DC_WARPS <= 4, "decode_cluster: QKV rows per warp");
static_assert(DC_FR % DC_WARPS == 0 && DC_FR / DC_WARPS <= 4, "decode_cluster: FC rows per warp");
static_assert(DC_OR == 12 * DC_WARPS, "decode_cluster: 12 projection rows a warp");
static_assert(DC_FH == 8 * 32, "decode_cluster: a projection row's slice is 8 bf16 a lane");

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define DC_CLUSTER_DIMS __cluster_dims__(DC_C, 1, 1)
#else
#define DC_CLUSTER_DIMS
#endif

// ---- clusters, the grid counter ----

__device__ __forceinline__ unsigned dc_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned dc_cluster_id() {
    unsigned c;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(c));
    return c;
}
// Every thread of every block of the cluster: writes before it (shared, distributed or global) are
// seen by every thread of the cluster after it.
__device__ __forceinline__ void dc_cluster_sync() {
    GW_ASM("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// v into the same shared-memory float of every block of the cluster (distributed shared memory).
__device__ __forceinline__ void dc_broadcast(float* local, float v) {
    const unsigned a = smem_u32(local);
#pragma unroll
    for (unsigned rank = 0; rank < DC_C; ++rank) {
        unsigned ra;
        GW_ASM("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
        GW_ASM("st.shared::cluster.f32 [%0], %1;\n" ::"r"(ra), "f"(v) : "memory");
        (void)ra;  // (built for another target GW_ASM drops its operands)
    }
}
// The grid counter: a block's arrival once its partials are written (after a block barrier, so thread 0's
// release publishes every thread's stores) ...
__device__ __forceinline__ void dc_grid_arrive(unsigned* counter) {
    __syncthreads();
    if (threadIdx.x == 0) GW_ASM("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}
// ... and a reader's wait for target arrivals (every block's, this phase); the block barrier hands what
// thread 0 acquired to every thread.
__device__ __forceinline__ void dc_grid_wait(const unsigned* counter, unsigned target) {
    if (threadIdx.x == 0) {
        unsigned v = 0, spins = 0;
        for (;;) {
            GW_ASM("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
            if (v >= target) break;
            if (++spins > DC_SPINS) __trap();  // a block never came: the clusters were not all resident
        }
    }
    __syncthreads();
}

// ---- arithmetic ----

__device__ __forceinline__ float dc_bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float dc_bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// acc + w[0..8) . (a, b), in order.
__device__ __forceinline__ float dc_dot8(const uint4& w, const float4& a, const float4& b, float acc) {
    acc = fmaf(dc_bf_lo(w.x), a.x, acc);
    acc = fmaf(dc_bf_hi(w.x), a.y, acc);
    acc = fmaf(dc_bf_lo(w.y), a.z, acc);
    acc = fmaf(dc_bf_hi(w.y), a.w, acc);
    acc = fmaf(dc_bf_lo(w.z), b.x, acc);
    acc = fmaf(dc_bf_hi(w.z), b.y, acc);
    acc = fmaf(dc_bf_lo(w.w), b.z, acc);
    acc = fmaf(dc_bf_hi(w.w), b.w, acc);
    return acc;
}

// R rows of a warp (R <= 4), each w[row][0..D) . h: lane l returns row l / 8's sum (rows >= R: 0).
template <int R>
__device__ __forceinline__ float dc_rows_d(const unsigned short* w, const float* h, int lane) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < DC_D / 256; ++i) {
        const int k = i * 256 + lane * 8;
        const float4 a = *reinterpret_cast<const float4*>(h + k);
        const float4 b = *reinterpret_cast<const float4*>(h + k + 4);
#pragma unroll
        for (int j = 0; j < R; ++j)
            acc[j] = dc_dot8(*reinterpret_cast<const uint4*>(w + j * DC_D + k), a, b, acc[j]);
    }
    return warp_sums<4>(acc, lane);
}

// A warp's 12 projection rows, each 2 * PAIRS bf16 a lane (row length 64 PAIRS) against a [64 PAIRS]:
// row i's sum into part[i], rows 0..11 (lanes 4 i of the first 8 rows, 8 (i - 8) of the last 4).
template <int PAIRS>
__device__ __forceinline__ void dc_rows_proj(const unsigned short* w, const float* a, float* part, int lane) {
    constexpr int LEN = 64 * PAIRS;
    float acc8[8], acc4[4];
    float av[2 * PAIRS];
#pragma unroll
    for (int j = 0; j < 2 * PAIRS; ++j) av[j] = a[lane * 2 * PAIRS + j];
#pragma unroll
    for (int row = 0; row < 12; ++row) {
        const unsigned* wr = reinterpret_cast<const unsigned*>(w + row * LEN + lane * 2 * PAIRS);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < PAIRS; ++j) {
            const unsigned u = wr[j];
            s = fmaf(dc_bf_lo(u), av[2 * j], s);
            s = fmaf(dc_bf_hi(u), av[2 * j + 1], s);
        }
        if (row < 8) acc8[row] = s;
        else acc4[row - 8] = s;
    }
    const float s8 = warp_sums<8>(acc8, lane), s4 = warp_sums<4>(acc4, lane);
    if ((lane & 3) == 0) __stcg(part + (lane >> 2), s8);
    if ((lane & 7) == 0) __stcg(part + 8 + (lane >> 3), s4);
}

// x[k] += bias[k] + sum_c part[c][k] (c in order) for the thread's columns (after the grid counter's wait):
// all 3 H loads are asked for at once.
__device__ __forceinline__ void dc_gather(float* xs, const float* part, const float* bias) {
    constexpr int NK = DC_D / DC_THREADS;
    float p[NK][DC_H];
#pragma unroll
    for (int i = 0; i < NK; ++i)
#pragma unroll
        for (int c = 0; c < DC_H; ++c) p[i][c] = __ldcg(part + c * DC_D + threadIdx.x + i * DC_THREADS);
#pragma unroll
    for (int i = 0; i < NK; ++i) {
        const int k = threadIdx.x + i * DC_THREADS;
        float s = bias[k];
#pragma unroll
        for (int c = 0; c < DC_H; ++c) s += p[i][c];
        xs[k] += s;
    }
}

// h = LN(x; g, b) over the block (the thread's columns of x are the ones it wrote last). Ends with a
// block barrier: h is complete.
// (Version 35 measured each warp forming the LayerNorm of its own columns in registers instead, with no
// block barrier: 6,600-6,631 tok/s against 6,956-6,966.)
__device__ __forceinline__ void dc_layernorm(const float* xs, float* hs, const float* g, const float* b,
                                             double* red, float eps) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float v[DC_D / DC_THREADS];
    double s = 0.0, q = 0.0;
#pragma unroll
    for (int i = 0; i < DC_D / DC_THREADS; ++i) {
        v[i] = xs[tid + i * DC_THREADS];
        s += (double)v[i];
        q = fma((double)v[i], (double)v[i], q);
    }
    s = warp_sum(s);
    q = warp_sum(q);
    if (lane == 0) {
        red[warp] = s;
        red[DC_WARPS + warp] = q;
    }
    __syncthreads();
    s = 0.0;
    q = 0.0;
#pragma unroll
    for (int w = 0; w < DC_WARPS; ++w) {
        s += red[w];
        q += red[DC_WARPS + w];
    }
    const LnRow st = ln_row_stats(s, q, ln_inv_n(DC_D), eps);
#pragma unroll
    for (int i = 0; i < DC_D / DC_THREADS; ++i) {
        const int k = tid + i * DC_THREADS;
        hs[k] = fmaf(((v[i] - st.mean_hi) - st.mean_lo) * st.rstd, g[k], b[k]);
    }
    __syncthreads();
}

// ---- the weights' slots ----

__device__ __forceinline__ int dc_w_off(int m) {  // matrix m's slot (0 QKV, 1 W_attn, 2 W_fc, 3 W_proj)
    return m == 0 ? 0 : m == 1 ? DC_E_QKV : m == 2 ? DC_E_QKV + DC_E_O : DC_E_QKV + DC_E_O + DC_E_FC;
}
__device__ __forceinline__ unsigned dc_w_bytes(int m) {
    return 2u * (m == 0 ? DC_E_QKV : m == 1 ? DC_E_O : m == 2 ? DC_E_FC : DC_E_PR);
}
// Thread 0: matrix m of the block's share `src` (one layer) into its slot, counted on bars[m].
__device__ __forceinline__ void dc_fetch_matrix(unsigned short* w_s, const unsigned short* src, int m,
                                                unsigned long long* bars) {
    const unsigned bar = smem_u32(bars + m), bytes = dc_w_bytes(m);
    mbar_arrive_expect_tx(bar, bytes);
    bulk_copy_g2s(smem_u32(w_s + dc_w_off(m)), src + dc_w_off(m), bytes, bar, l2_policy(false));
}
// Thread 0: layer l's vectors into slot l & 1, counted on bars[4 + (l & 1)].
__device__ __forceinline__ void dc_fetch_vectors(float* vec_s, const float* vecs, int l, unsigned long long* bars) {
    const unsigned bar = smem_u32(bars + 4 + (l & 1));
    mbar_arrive_expect_tx(bar, 4u * DC_V);
    bulk_copy_g2s(smem_u32(vec_s + (l & 1) * DC_V), vecs + (long long)l * DC_V, 4u * DC_V, bar);
}

extern "C" __global__ void DC_CLUSTER_DIMS __launch_bounds__(DC_THREADS, 1)
decode_cluster_bf16(const unsigned short* __restrict__ wpk, const float* __restrict__ vecs,
                    const float* __restrict__ bqf, int n_layer, float eps, float* x, float* kv,
                    long long batch_stride, long long layer_stride, int n_ctx, const int* seq, const int* pos,
                    const int* lengths, float* part1, float* part2, unsigned* sync) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char dc_smem[];
    unsigned short* w_s = reinterpret_cast<unsigned short*>(dc_smem);
    float* vec_s = reinterpret_cast<float*>(dc_smem + 2 * DC_E);  // [2][DC_V]
    float* xs = vec_s + 2 * DC_V;                                 // [D]
    float* hs = xs + DC_D;                                        // [D]
    float* qkv_s = hs + DC_D;                                     // [3][64]
    float* gpart = qkv_s + 3 * HEAD_DIM;                          // [DC_GROUPS][DC_PART]
    float* cpart = gpart + DC_GROUPS * DC_PART;                   // [DC_C][DC_PART]
    float* att_s = cpart + DC_C * DC_PART;                        // [64]
    float* f_s = att_s + HEAD_DIM;                                // [256]
    double* red = reinterpret_cast<double*>(f_s + DC_FH);         // [2][DC_WARPS]
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(red + 2 * DC_WARPS);  // [6]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int r = (int)dc_cluster_rank(), c = (int)dc_cluster_id();
    const long long w_layer = (long long)DC_H * DC_C * DC_E;
    const unsigned short* w_blk = wpk + ((long long)c * DC_C + r) * DC_E;

    if (tid == 0) {
        for (int i = 0; i < 6; ++i) mbar_init(smem_u32(bars + i), 1);
        GW_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int m = 0; m < 4; ++m) dc_fetch_matrix(w_s, w_blk, m, bars);
        dc_fetch_vectors(vec_s, vecs, 0, bars);
        if (n_layer > 1) dc_fetch_vectors(vec_s, vecs, 1, bars);
    }
    dc_cluster_sync();  // every block of the cluster has started (before any distributed store)
    pdl_wait();

    const int row_s = seq[0], p_new = pos[0], len = lengths[0];
    unsigned target = 0;  // the grid counter's (sync[0]) arrivals to wait for
    // a length or position the cache cannot hold reads no key, writes no cache row and gives NaN
    const bool len_ok = len >= 1 && len <= n_ctx && p_new >= 0 && p_new < n_ctx;
    const int len_keys = len_ok ? len : 0;
    float* kv_row = kv + (long long)row_s * batch_stride;
#pragma unroll
    for (int i = 0; i < DC_D / DC_THREADS; ++i) xs[tid + i * DC_THREADS] = x[tid + i * DC_THREADS];

    // the warp's rows: QKV rows 3 warp + (lane >> 3), FC rows 4 warp + (lane >> 3)
    const int qj = 3 * warp + (lane >> 3), qt = qj / DC_QR, qd = r * DC_QR + qj % DC_QR;
    const bool q_lane = (lane & 7) == 0 && (lane >> 3) < 3;
    const int fj = r * DC_FR + 4 * warp + (lane >> 3);  // FC output within the cluster's 256
    const bool f_lane = (lane & 7) == 0;
    const int g = tid >> 4, l16 = tid & 15;
    const unsigned half_mask = (tid & 16) ? 0xffff0000u : 0x0000ffffu;

    for (int l = 0; l < n_layer; ++l) {
        const float* vec = vec_s + (l & 1) * DC_V;
        const float* bq = bqf + (long long)l * 7 * DC_D;
        float* kv_l = kv_row + (long long)l * layer_stride;
        const float b_q = q_lane ? __ldg(bq + qt * DC_D + c * HEAD_DIM + qd) : 0.0f;
        const float b_f = f_lane ? __ldg(bq + 3 * DC_D + c * DC_FH + fj) : 0.0f;
        if (l == n_layer - 1) pdl_trigger();

        // A: x = x + b_proj + sum part2 (the layer before's), h = LN1(x), this block's q, k, v
        const int p0 = r * DC_GROUPS + g;  // the group's first key, fetched before the wait for x
        float4 k0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v0 = k0;
        if (p0 < len_keys && p0 != p_new) {
            k0 = __ldcg(reinterpret_cast<const float4*>(kv_l + (long long)p0 * DC_D + c * HEAD_DIM + 4 * l16));
            v0 = __ldcg(reinterpret_cast<const float4*>(kv_l + (long long)(n_ctx + p0) * DC_D + c * HEAD_DIM + 4 * l16));
        }
        if (l > 0) {
            dc_grid_wait(sync, target += gridDim.x);
            dc_gather(xs, part2, vec_s + ((l - 1) & 1) * DC_V + 5 * DC_D);
            if (tid == 0) dc_fetch_matrix(w_s, w_blk + l * w_layer, 2, bars);  // this layer's FC
        }
        mbar_wait(smem_u32(bars + 4 + (l & 1)), (l >> 1) & 1);
        dc_layernorm(xs, hs, vec, vec + DC_D, red, eps);
        if (tid == 0 && l > 0 && l + 1 < n_layer) dc_fetch_vectors(vec_s, vecs, l + 1, bars);  // into the slot of l - 1
        mbar_wait(smem_u32(bars + 0), l & 1);
        {
            const float s = dc_rows_d<3 * DC_QR / DC_WARPS>(w_s + 3 * warp * DC_D, hs, lane);
            if (q_lane) {
                const float v = s + b_q;
                dc_broadcast(qkv_s + qt * HEAD_DIM + qd, v);
                if (qt > 0 && len_ok) kv_l[(long long)(qt - 1) * n_ctx * DC_D + (long long)p_new * DC_D + c * HEAD_DIM + qd] = v;
            }
        }
        dc_cluster_sync();
        if (tid == 0 && l + 1 < n_layer) dc_fetch_matrix(w_s, w_blk + (l + 1) * w_layer, 0, bars);

        // B: attention of head c, keys p = 16 (8 i + r) + g
        {
            const float4 qv = *reinterpret_cast<const float4*>(qkv_s + 4 * l16);
            const float4 q4 = make_float4(qv.x * ATTN_SCALE, qv.y * ATTN_SCALE, qv.z * ATTN_SCALE, qv.w * ATTN_SCALE);
            float m = attn_neg_inf(), lsum = 0.0f;
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float* kl = kv_l + c * HEAD_DIM + 4 * l16;
            const long long vo = (long long)n_ctx * DC_D;
            for (int p = p0; p < len_keys; p += DC_C * DC_GROUPS) {
                float4 k4, v4;
                if (p == p_new) {
                    k4 = *reinterpret_cast<const float4*>(qkv_s + HEAD_DIM + 4 * l16);
                    v4 = *reinterpret_cast<const float4*>(qkv_s + 2 * HEAD_DIM + 4 * l16);
                } else if (p == p0) {
                    k4 = k0;
                    v4 = v0;
                } else {
                    k4 = __ldcg(reinterpret_cast<const float4*>(kl + (long long)p * DC_D));
                    v4 = __ldcg(reinterpret_cast<const float4*>(kl + vo + (long long)p * DC_D));
                }
                const float s = attn_dot16(q4, k4, half_mask);
                const float m_new = fmaxf(m, s);
                const float alpha = expf(m - m_new), e = expf(s - m_new);
                lsum = fmaf(lsum, alpha, e);
                acc = make_float4(fmaf(acc.x, alpha, e * v4.x), fmaf(acc.y, alpha, e * v4.y),
                                  fmaf(acc.z, alpha, e * v4.z), fmaf(acc.w, alpha, e * v4.w));
                m = m_new;
            }
            *reinterpret_cast<float4*>(gpart + g * DC_PART + 4 * l16) = acc;
            if (l16 == 0) {
                gpart[g * DC_PART + HEAD_DIM] = m;
                gpart[g * DC_PART + HEAD_DIM + 1] = lsum;
            }
            __syncthreads();
            if (tid < HEAD_DIM + 2) {  // the block's 16 groups: acc[tid] (tid < 64), or m / l
                float mb = attn_neg_inf();
                for (int j = 0; j < DC_GROUPS; ++j) mb = fmaxf(mb, gpart[j * DC_PART + HEAD_DIM]);
                const float base = attn_safe_max(mb);
                float v = 0.0f;
                for (int j = 0; j < DC_GROUPS; ++j) {
                    const float e = expf(gpart[j * DC_PART + HEAD_DIM] - base);
                    v = fmaf(gpart[j * DC_PART + (tid < HEAD_DIM ? tid : HEAD_DIM + 1)], e, v);
                }
                dc_broadcast(cpart + r * DC_PART + tid, tid == HEAD_DIM ? mb : v);
            }
            dc_cluster_sync();
            if (tid < HEAD_DIM) {  // the cluster's 8 blocks
                float mc = attn_neg_inf();
                for (int j = 0; j < DC_C; ++j) mc = fmaxf(mc, cpart[j * DC_PART + HEAD_DIM]);
                const float base = attn_safe_max(mc);
                float a = 0.0f, ls = 0.0f;
                for (int j = 0; j < DC_C; ++j) {
                    const float e = expf(cpart[j * DC_PART + HEAD_DIM] - base);
                    a = fmaf(cpart[j * DC_PART + tid], e, a);
                    ls = fmaf(cpart[j * DC_PART + HEAD_DIM + 1], e, ls);
                }
                att_s[tid] = len_ok ? a / ls : __int_as_float(0x7fc00000);
            }
            __syncthreads();
        }

        // C: part1[c][96 r + i] = att . W_attn^T slice
        mbar_wait(smem_u32(bars + 1), l & 1);
        dc_rows_proj<1>(w_s + dc_w_off(1) + 12 * warp * HEAD_DIM, att_s, part1 + c * DC_D + r * DC_OR + 12 * warp,
                        lane);
        dc_grid_arrive(sync);  // (a block barrier: every warp is done with the slot)
        if (tid == 0 && l + 1 < n_layer) dc_fetch_matrix(w_s, w_blk + (l + 1) * w_layer, 1, bars);

        // D: x1 = x + b_attn + sum part1, h = LN2(x1), this block's FC outputs
        dc_grid_wait(sync, target += gridDim.x);
        dc_gather(xs, part1, vec + 2 * DC_D);
        dc_layernorm(xs, hs, vec + 3 * DC_D, vec + 4 * DC_D, red, eps);
        mbar_wait(smem_u32(bars + 2), l & 1);
        {
            const float s = dc_rows_d<DC_FR / DC_WARPS>(w_s + dc_w_off(2) + 4 * warp * DC_D, hs, lane);
            if (f_lane) dc_broadcast(f_s + fj, gelu_tanh(s + b_f));
        }
        dc_cluster_sync();

        // E: part2[c][96 r + i] = f . W_proj^T slice
        mbar_wait(smem_u32(bars + 3), l & 1);
        dc_rows_proj<4>(w_s + dc_w_off(3) + 12 * warp * DC_FH, f_s, part2 + c * DC_D + r * DC_OR + 12 * warp,
                        lane);
        dc_grid_arrive(sync);  // (a block barrier: every warp is done with the slot)
        if (tid == 0 && l + 1 < n_layer) dc_fetch_matrix(w_s, w_blk + (l + 1) * w_layer, 3, bars);
    }

    // the last layer's residual: cluster 0 writes x
    dc_grid_wait(sync, target += gridDim.x);
    dc_gather(xs, part2, vec_s + ((n_layer - 1) & 1) * DC_V + 5 * DC_D);
    __syncthreads();  // xs[k] was summed by thread k % DC_THREADS
    if (c == 0) {
        for (int k = tid; k < DC_OR; k += DC_THREADS) x[r * DC_OR + k] = xs[r * DC_OR + k];
    }
    if (tid == 0) {  // the last block out leaves the grid counter at zero for the next launch
        if (atomicAdd(sync + 1, 1u) == gridDim.x - 1) {
            sync[0] = 0u;
            sync[1] = 0u;
        }
    }
#else
    __trap();
#endif
}

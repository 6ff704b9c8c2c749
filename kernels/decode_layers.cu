// decode_layers.cu: every transformer block of one decode step (M <= 8 new tokens) in a single
// persistent kernel: decode_layers_f32 (float32 weights) and decode_layers_bf16 (bf16 weights).
//
// Why one kernel: at batch 1 a gpt2 block's four matrices are 28 MB of float32, 7 us at the
// H200's copy rate, but as five kernels a block took 23 us: each kernel ramps up, waits a full
// memory round trip for its first weights, drains, and the next one waits for it. Here one thread
// block per SM runs all the layers. Each block streams its share of every weight matrix through
// a ring of shared-memory stages that keeps going across phase boundaries (weights depend on
// nothing the step computes, so the copies for the next phase are in flight while the blocks
// wait for each other), and the blocks meet at a grid barrier between the phases of a layer.
// Measured (docs/PERFORMANCE.md, versions 4 and 10): 22 us a layer at gpt2 batch 1 and 37 us
// at batch 8, slightly slower than the five kernels at gpt2 width, as each phase's own latency
// (activations from L2, LayerNorm, the warps' arithmetic) and five grid barriers of 1-2 us a
// layer remain; at gpt2-xl as fast in fp32 and faster in bf16, so the runner uses it from
// n_embd 1600 (cuda.py, fused_decode="auto").
//
//   phase   computes                                        split over the blocks by
//   QKV     qkv = LN1(x) @ Wqkv^T + b; K, V -> the cache    rows of Wqkv [3D, D]
//   ATT     att = softmax(q K^T / 8) V, per head            (token, head, 64-key split) tasks
//   PROJ    x = x + att @ Wo^T + b                          rows of Wo [D, D]
//   FC      hid = gelu(LN2(x) @ Wfc^T + b)                  rows of Wfc [4D, D]
//   PROJ2   x = x + hid @ Wpr^T + b                         rows of Wpr [D, 4D]
//
// (the matrices are the decode copies: transposed, [N, K], one contiguous row per output; the
// four matrix phases are numbered 0..3 = QKV, PROJ, FC, PROJ2 below, ATT has no weights).
// A matrix phase's arithmetic has three variants, by the step's tokens (dl_matrix_phase):
//   1 token   the activations in each warp's registers, each warp its own LayerNorm
//             (dl_matrix_phase_1; float32 weights up to D = 768, bf16 up to 1792);
//   5-8 bf16  the tensor cores, a stage against the tokens (dl_matrix_phase_tc);
//   else      the FMA units, a warp per row, the tokens' sums by shuffles (dl_matrix_phase_m).
//
// decode_layers_{f32,bf16}(const DecodeLayer* layers, int n_layer, int M, int D, float eps,
//     float* x, float* qkv, float* att, float* hid,
//     float* kv, long long batch_stride, long long layer_stride, int n_ctx,
//     const int* seq, const int* pos, const int* lengths,
//     float* part_acc, float* part_ml, int* tickets, unsigned* barrier, int n_stages)
//   layers   [n_layer] DecodeLayer (device pointers; gpt2block/backends/cuda/decode_layers.py packs them)
//   x        [M, D] residual stream, updated in place (the embedding of the new tokens on entry)
//   qkv [M, 3D], att [M, D], hid [M, 4D]: scratch activations (qkv holds the last layer's on exit)
//   kv       the KV cache: key p of cache row s, layer l at kv + s * batch_stride + l * layer_stride
//            + p * D, its value n_ctx * D further on (CudaCache.kv [B, n_layer, 2, n_ctx, D])
//   seq, pos, lengths [M] int32: token m goes to cache row seq[m] at position pos[m] and attends
//            to lengths[m] keys (pos + 1); 1 <= lengths[m] <= n_ctx, else its attention is NaN
//   part_acc [M * H * ceil(n_ctx / 64) * 64], part_ml [same / 32]: attention partials (scratch)
//   tickets  [M * H] int32 and barrier [1] uint32: ZERO before the first launch, left zero by each
//   n_stages 2 .. DL_MAX_STAGES weight stages in the ring
// sm_90 and later (bulk copies into shared memory counted on mbarriers); built for an older
// target the kernel only traps, and gpt2block does not launch it there.
// Launch: grid = (G, 1, 1) with every block resident at once (gpt2block: one per SM; the grid
//   barrier would wait forever otherwise, so it traps after about ten seconds instead),
//   block = (DL_THREADS + 32, 1, 1) (8 compute warps and the producer warp), dynamic shared
//   memory 4 * (M * (4D + DL_PAD) + r4(M * rmax) + r4(rmax) + 2D) bytes (activations, residual
//   and bias slices, LayerNorm gain and shift; rmax = ceil(4D / G), r4 rounds up to a multiple
//   of 4) + n_stages * DL_ROWS * (D + DL_PAD) * sizeof(weight) (the ring).
// Requirements: 1 <= M <= 8, D % 64 == 0, D <= 8 * DL_THREADS, rmax <= DL_THREADS,
//   n_layer <= DL_MAX_LAYERS, 16-byte aligned matrices and LayerNorm vectors.
// Programmatic dependent launch (common.cuh): the first weight stages are fetched before
// pdl_wait(); the dependents are released in the last layer, once every block is resident.
// Results repeat bit for bit: every sum has a fixed order (no float atomics).

#include "common.cuh"
#include "mma.cuh"  // smem_u32

// Build parameters (gpt2block/backends/cuda/build.py; the host sizes the shared memory, scratch and
// layer table by them): DL_THREADS compute threads (the block has a producer warp besides), DL_PAD
// elements after each weight row of a stage and each activation row (bank spread), DL_MAX_M tokens,
// DL_MAX_STAGES ring stages, DL_MAX_LAYERS layers (gpt2-xl's 48), DL_KEYS keys per attention task.
#ifndef DL_THREADS
#error "DL_THREADS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DL_PAD
#error "DL_PAD is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DL_MAX_M
#error "DL_MAX_M is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DL_MAX_STAGES
#error "DL_MAX_STAGES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DL_MAX_LAYERS
#error "DL_MAX_LAYERS is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef DL_KEYS
#error "DL_KEYS is set by gpt2block/backends/cuda/build.py"
#endif
#define DL_WARPS (DL_THREADS / 32)
#define DL_ROWS DL_WARPS  // weight rows per stage: one per warp
#define DL_CHUNK 2  // weight stages a warp works on at once, at most (the matrix phase's CHUNK)
#define DL_GROUPS (DL_THREADS / 16)  // 16-lane groups of an attention task
#define DL_BARRIER_SPINS (1u << 24)  // polls before a grid barrier gives up (__trap)

// One block's weights, as cuda/decode_layers.py packs them (12 device pointers).
struct DecodeLayer {
    const void* w[4];      // phase p's matrix [N_p, K_p], float32 or bf16 bits
    const float* bias[4];  // [N_p]
    const float* ln1_g;    // [D]
    const float* ln1_b;
    const float* ln2_g;
    const float* ln2_b;
};

// The step's buffers and sizes, as the kernel received them.
struct DlStep {
    const DecodeLayer* layers;
    int n_layer, M, D;
    float eps;
    float *x, *qkv, *att, *hid, *kv;
    long long batch_stride, layer_stride;
    int n_ctx;
    const int *seq, *pos, *lengths;
    float *part_acc, *part_ml;
    int* tickets;
};

// Matrix phase p (0 QKV, 1 PROJ, 2 FC, 3 PROJ2): outputs N and depth K; the block's rows
// [lo, hi) of it (contiguous, balanced to one row), in stages of DL_ROWS rows x D columns.
// Worked out once per launch into shared memory (dl_geo), so that no 64-bit division is left in the loops.
__device__ __forceinline__ int dl_n(int p, int D) { return p == 0 ? 3 * D : p == 2 ? 4 * D : D; }
__device__ __forceinline__ int dl_k(int p, int D) { return p == 3 ? 4 * D : D; }

struct DlGeo {
    int lo, hi;
};
__shared__ DlGeo dl_geo[4];
__shared__ DecodeLayer dl_layers[DL_MAX_LAYERS];  // the layer table, copied at the start
__shared__ int dl_seq[DL_MAX_M], dl_pos[DL_MAX_M], dl_len[DL_MAX_M];  // the step's ints

__device__ __forceinline__ void dl_geo_init(int D) {  // before the block's first barrier
    if (threadIdx.x < 4) {
        const int p = threadIdx.x, n = dl_n(p, D);
        const int lo = (int)((long long)blockIdx.x * n / gridDim.x);
        const int hi = (int)((long long)(blockIdx.x + 1) * n / gridDim.x);
        dl_geo[p] = DlGeo{lo, hi};
    }
}

// 16 bytes of weights: float4 (4 float32) or uint4 (8 bf16).
template <typename T>
struct DlPiece {
    typedef float4 type;
};
template <>
struct DlPiece<unsigned short> {
    typedef uint4 type;
};

// Barrier of the 256 compute threads only (named barrier 1): the producer warp never joins.
__device__ __forceinline__ void dl_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(DL_THREADS) : "memory"); }

// mbarrier and bulk-copy (TMA) helpers, sm_90. Addresses are shared-memory offsets (smem_u32).
__device__ __forceinline__ void dl_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void dl_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void dl_mbar_expect(unsigned bar, unsigned bytes) {  // arrive, and bytes to come
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void dl_mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
// bytes (a multiple of 16) from global src to shared dst, counted on the mbarrier bar.
__device__ __forceinline__ void dl_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// The weight ring: n_stages slots of DL_ROWS x D weights, each with a "full" mbarrier (the
// producer's arrival plus the bytes of its copies) and an "empty" one (one arrival per compute
// warp). One producer thread walks the block's stages in order, (layer, phase, rows, segment),
// from the kernel's first instruction to its last: it waits for a slot to be empty and fills it
// with one bulk copy per row. Weights depend on nothing the step computes, so the copies run
// ahead across grid barriers, the attention and the LayerNorms, as deep as the ring allows.
template <typename T>
struct DlRing {
    T* slots;
    unsigned long long* bars;  // [2][n_stages]: full, then empty
    int n_stages, D, rs;  // rs = D + DL_PAD: a stage's row stride, elements
    int slot, parity;  // the compute side: the next stage's slot and its phase parity

    __device__ unsigned full(int s) const { return smem_u32(bars + s); }
    __device__ unsigned empty(int s) const { return smem_u32(bars + n_stages + s); }

    __device__ void init() {  // one thread, before the block's first barrier
        for (int s = 0; s < n_stages; ++s) {
            dl_mbar_init(full(s), 1);
            dl_mbar_init(empty(s), DL_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }

    // The producer: every stage of every layer (one thread).
    __device__ void produce(int n_layer) {
        int s = 0, round = 0;
        for (int layer = 0; layer < n_layer; ++layer) {
            for (int p = 0; p < 4; ++p) {
                const DlGeo geo = dl_geo[p];
                const int K = dl_k(p, D), nseg = K / D;
                const T* w = reinterpret_cast<const T*>(dl_layers[layer].w[p]);
                for (int row0 = geo.lo; row0 < geo.hi; row0 += DL_ROWS) {
                    const int nr = min(DL_ROWS, geo.hi - row0);
                    for (int seg = 0; seg < nseg; ++seg) {
                        if (round > 0) dl_mbar_wait(empty(s), (round - 1) & 1);
                        const unsigned row_bytes = D * sizeof(T);
                        dl_mbar_expect(full(s), nr * row_bytes);
                        const unsigned dst = smem_u32(slots + (long long)s * DL_ROWS * rs);
                        const T* src = w + (long long)row0 * K + seg * D;
                        for (int r = 0; r < nr; ++r)
                            dl_bulk_copy(dst + r * rs * sizeof(T), src + (long long)r * K, row_bytes, full(s));
                        if (++s == n_stages) {
                            s = 0;
                            ++round;
                        }
                    }
                }
            }
        }
    }

    // The compute side: the next n stages (n <= n_stages), landed (every compute thread waits);
    // stage j of them is at stage(j), [DL_ROWS][rs] (D weights a row).
    __device__ void acquire(int n) {
        for (int j = 0; j < n; ++j) {
            const int s = slot + j;
            dl_mbar_wait(full(s < n_stages ? s : s - n_stages), s < n_stages ? parity : parity ^ 1);
        }
    }
    __device__ const T* stage(int j) const {
        const int s = slot + j;
        return slots + (long long)(s < n_stages ? s : s - n_stages) * DL_ROWS * rs;
    }
    // ... and handed back once this warp is done with them (every compute thread calls it).
    __device__ void release(int n) {
        __syncwarp();
        if ((threadIdx.x & 31) == 0) {
            for (int j = 0; j < n; ++j) {
                const int s = slot + j;
                dl_mbar_arrive(empty(s < n_stages ? s : s - n_stages));
            }
        }
        slot += n;
        if (slot >= n_stages) {
            slot -= n_stages;
            parity ^= 1;
        }
    }
};

// Grid barrier: every block arrives and waits until all have. Thread 0 arrives with a release
// add (after the block barrier, so it publishes every thread's writes) and polls with acquire
// loads (then the block barrier hands what it saw to every thread); no __threadfence, which
// would also wait for the thread's weight copies in flight. The counter only grows within a
// launch; target follows it (G per barrier).
__device__ __forceinline__ unsigned dl_load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void dl_grid_sync(unsigned* barrier, unsigned& target) {
    dl_sync();
    target += gridDim.x;
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(barrier) : "memory");
        unsigned spins = 0;
        while (dl_load_acquire(barrier) < target) {
            if (++spins > DL_BARRIER_SPINS) __trap();  // a block never came: not all resident
        }
    }
    dl_sync();
}

// The block's shared memory besides the weight ring: the phase's input rows, its slice of the
// residual stream and of the bias, the LayerNorm's gain and shift. (The layer table and the
// step's ints are static shared arrays: dl_layers, dl_seq, dl_pos, dl_len.)
struct DlSmem {
    float* act;  // [M][K + DL_PAD] the current phase's input rows (LayerNorm applied where it has one)
    float* res;  // [M][rmax] x[m][lo + j], the residual of the PROJ / PROJ2 outputs of this block
    float* bias; // [rmax] bias[lo + j]
    float* ln_g; // [D]
    float* ln_b; // [D]
    int rmax;    // rows per block and phase at most: ceil(4D / G)
};

// A matrix phase's parameters in flight (fetched into registers before a grid barrier with loads
// that stay where they are written, used after it): thread t holds bias[lo + t] and, for the phases with a
// LayerNorm, float4 t and t + DL_THREADS of its gain and shift (D <= 8 * DL_THREADS).
struct DlParams {
    float bias;
    float4 g[2], b[2];
};

__device__ __forceinline__ void dl_params_fetch(int layer, int P, int D, DlParams& q) {
    const DecodeLayer& L = dl_layers[layer];
    const DlGeo geo = dl_geo[P];
    const int n = geo.lo + threadIdx.x;
    if (n < geo.hi) q.bias = ld_nc_issued(L.bias[P] + n);
    if (P == 0 || P == 2) {
        const float* g = P == 0 ? L.ln1_g : L.ln2_g;
        const float* b = P == 0 ? L.ln1_b : L.ln2_b;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int k = 4 * (threadIdx.x + j * DL_THREADS);
            if (k < D) {
                q.g[j] = ld_nc_issued4(g + k);
                q.b[j] = ld_nc_issued4(b + k);
            }
        }
    }
}

__device__ __forceinline__ void dl_params_store(int P, int D, const DlParams& q, const DlSmem& sm) {
    const DlGeo geo = dl_geo[P];
    if (geo.lo + (int)threadIdx.x < geo.hi) sm.bias[threadIdx.x] = q.bias;
    if (P == 0 || P == 2) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int k = 4 * (threadIdx.x + j * DL_THREADS);
            if (k < D) {
                *reinterpret_cast<float4*>(sm.ln_g + k) = q.g[j];
                *reinterpret_cast<float4*>(sm.ln_b + k) = q.b[j];
            }
        }
    }
}

// The start of matrix phase P after its grid barrier: the parameters fetched before the barrier
// into shared memory, src [M][K] (written by other blocks this launch: read through L2, never
// L1) into act, and for the projections this block's slice of the residual stream x.
__device__ __forceinline__ void dl_phase_inputs(const DlStep& st, int P, const DlParams& q, const DlSmem& sm,
                                                const float* src) {
    const int D = st.D, K = dl_k(P, D);
    dl_params_store(P, D, q, sm);
    float4* a4 = reinterpret_cast<float4*>(sm.act);
    const float4* s4 = reinterpret_cast<const float4*>(src);
    const int n4 = st.M * K / 4;
    const DlGeo geo = dl_geo[P];
    const int rows = geo.hi - geo.lo, nres = P == 1 || P == 3 ? st.M * rows : 0;
    // the loads in batches of 4 float4 per thread (the residual slice with the first), each
    // batch issued before its stores: one round trip to L2 per batch, not per load
    const int i = threadIdx.x, m = i / max(rows, 1), j = i - m * rows;
    // float4 e of src is row e / K4's: it goes to e + row * DL_PAD / 4 (the row division by a
    // multiply: exact for e < 2^32 / K4)
    const unsigned K4 = K / 4, magic = 0xffffffffu / K4 + 1u;
    for (int base = 0; base < n4; base += 4 * DL_THREADS) {
        float4 v[4];
        float r = 0.0f;
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (base + i + u * DL_THREADS < n4) v[u] = __ldcg(s4 + base + i + u * DL_THREADS);
        if (base == 0 && i < nres) r = __ldcg(st.x + (long long)m * D + geo.lo + j);
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (base + i + u * DL_THREADS < n4) {
                const unsigned e = base + i + u * DL_THREADS;
                a4[e + __umulhi(e, magic) * (DL_PAD / 4)] = v[u];
            }
        if (base == 0 && i < nres) sm.res[m * sm.rmax + j] = r;
    }
    for (int t = i + DL_THREADS; t < nres; t += DL_THREADS) {  // (more than a load per thread: small grids)
        const int mt = t / rows, jt = t - mt * rows;
        sm.res[mt * sm.rmax + jt] = __ldcg(st.x + (long long)mt * D + geo.lo + jt);
    }
    dl_sync();
}

// act [M][D] <- LayerNorm(act; ln_g, ln_b) in place. Warp m forms row m's float64 sums (the
// lanes' sums meet by shuffles in a fixed order) and its statistics (ln_row_stats);
// then the block normalizes in float32 (ln_apply4). inv_d = 1 / D.
__device__ __forceinline__ void dl_layernorm_act(const DlSmem& sm, int M, int D, double inv_d, float eps) {
    __shared__ LnRow stat[DL_MAX_M];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, D4 = D / 4;
    float4* a4 = reinterpret_cast<float4*>(sm.act);
    const int AS4 = D4 + DL_PAD / 4;  // a row's stride in float4
    for (int m = warp; m < M; m += DL_WARPS) {
        double s = 0.0, q = 0.0;
        for (int k = lane; k < D4; k += 32) {
            const float4 v = a4[m * AS4 + k];
            const double p = v.x, r = v.y, t = v.z, u = v.w;
            s += (p + r) + (t + u);
            q += (p * p + r * r) + (t * t + u * u);
        }
        s = warp_sum(s);
        q = warp_sum(q);
        if (lane == 0) stat[m] = ln_row_stats(s, q, inv_d, eps);
    }
    dl_sync();
    const float4* g4 = reinterpret_cast<const float4*>(sm.ln_g);
    const float4* b4 = reinterpret_cast<const float4*>(sm.ln_b);
    for (int m = 0; m < M; ++m) {
        const LnRow st = stat[m];
        for (int k = threadIdx.x; k < D4; k += DL_THREADS) a4[m * AS4 + k] = ln_apply4(a4[m * AS4 + k], st, g4[k], b4[k]);
    }
    dl_sync();
}

// The epilogue of output (m, n) of matrix phase P: sum + bias, then the phase's own end.
template <int P>
__device__ __forceinline__ void dl_store_output(const DlStep& st, const DlSmem& sm, int layer, int m, int n, int r0,
                                                float sum) {
    const int D = st.D;
    const float v = sum + sm.bias[n - r0];
    if (P == 0) {  // q | k | v; keys and values also into the cache
        st.qkv[(long long)m * 3 * D + n] = v;
        if (n >= D) {
            const int part = n >= 2 * D;  // 0: key, 1: value
            st.kv[dl_seq[m] * st.batch_stride + layer * st.layer_stride + (long long)part * st.n_ctx * D +
                  (long long)dl_pos[m] * D + (n - D - part * D)] = v;
        }
    } else if (P == 2) {
        st.hid[(long long)m * 4 * D + n] = gelu_tanh(v);
    } else {  // the residual adds: x = x + (sum + bias), as the unfused GEMVs add them
        st.x[(long long)m * D + n] = v + sm.res[m * sm.rmax + (n - r0)];
    }
}


// Matrix phase P for this block's rows [r0, r1), MP >= M tokens (1, 2, 4 or 8). The rows come in
// row groups of DL_ROWS, one per stage and segment (K = nseg * D); warp w takes row w of each
// group, its lanes 16-byte pieces of the row (lane l: pieces l, l + 32, ...) against the
// activations act [M][K] in shared memory. From 4 tokens on a warp holds two stages at once
// (CHUNK), so that their arithmetic and sums overlap instead of following one another:
//   K = D (QKV, PROJ, FC): a chunk is up to CHUNK row groups (the warp's rows w, w + 8, ...),
//     each activation piece loaded once for both;
//   K = 4D (PROJ2): a chunk is up to CHUNK segments of one row group, each with its own
//     partial sum (added in segment order at the end of the row).
// Then each row's MP sums meet by warp_sums and the lanes of token m store output (m, row).
template <typename T, int P, int MP>
__device__ __forceinline__ void dl_matrix_phase_m(const DlStep& st, DlRing<T>& ring, const DlSmem& sm, int layer) {
    constexpr int CPT = 16 / sizeof(T);
    typedef typename DlPiece<T>::type Piece;
    const int D = st.D, M = st.M, K = dl_k(P, D), nseg = K / D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = dl_geo[P].lo, r1 = dl_geo[P].hi;
    const int ngroups = (r1 - r0 + DL_ROWS - 1) / DL_ROWS;
    // Stages at once: 2 from 4 tokens on (measured, gpt2 fp32: batch 8 13,141 -> 13,753 tok/s
    // against one), 1 below (batch 1: 3,005 against 2,903 with 2; 4 stages lost at both).
    constexpr int CHUNK = MP >= 4 ? 2 : 1;
    const int cmax = min(CHUNK, ring.n_stages);
    const float* act = sm.act;
    float carry[MP];  // K = 4D: the row's sum over the chunks so far
#pragma unroll
    for (int m = 0; m < MP; ++m) carry[m] = 0.0f;
    for (int g = 0, seg0 = 0; g < ngroups;) {
        // this chunk: c stages, from row group g (K = D: groups g .. g + c - 1) or from segment seg0
        // of row group g (K = 4D: segments seg0 .. seg0 + c - 1)
        const int c = nseg == 1 ? min(cmax, ngroups - g) : min(cmax, nseg - seg0);
        bool ok[DL_CHUNK];  // stage j's row is one of the block's (warp-uniform)
#pragma unroll
        for (int j = 0; j < DL_CHUNK; ++j) ok[j] = j < c && r0 + (g + (nseg == 1 ? j : 0)) * DL_ROWS + warp < r1;
        float acc[DL_CHUNK][MP];
#pragma unroll
        for (int j = 0; j < DL_CHUNK; ++j)
#pragma unroll
            for (int m = 0; m < MP; ++m) acc[j][m] = 0.0f;
        ring.acquire(c);
        const T* w[DL_CHUNK];
#pragma unroll
        for (int j = 0; j < DL_CHUNK; ++j) w[j] = ring.stage(j < c ? j : 0) + warp * ring.rs;
        for (int k = lane * CPT; ok[0] && k < D; k += 32 * CPT) {  // (ok[j] implies ok[0])
            float wf[DL_CHUNK][CPT];  // stage j's piece of the warp's row
#pragma unroll
            for (int j = 0; j < DL_CHUNK; ++j)
                if (ok[j]) unpack16(*reinterpret_cast<const Piece*>(w[j] + k), wf[j]);
#pragma unroll
            for (int m = 0; m < MP; ++m) {
                if (m >= M) break;
                float4 a[CPT / 4];  // token m's activations at this piece (of stage j's segment)
#pragma unroll
                for (int j = 0; j < DL_CHUNK; ++j) {
                    if (!ok[j]) break;
                    if (j == 0 || nseg > 1) {
                        const float* ak = act + m * (K + DL_PAD) + (seg0 + (nseg > 1 ? j : 0)) * D + k;
#pragma unroll
                        for (int q = 0; q < CPT / 4; ++q) a[q] = *reinterpret_cast<const float4*>(ak + 4 * q);
                    }
#pragma unroll
                    for (int q = 0; q < CPT / 4; ++q) {
                        acc[j][m] = fmaf(a[q].x, wf[j][4 * q], acc[j][m]);
                        acc[j][m] = fmaf(a[q].y, wf[j][4 * q + 1], acc[j][m]);
                        acc[j][m] = fmaf(a[q].z, wf[j][4 * q + 2], acc[j][m]);
                        acc[j][m] = fmaf(a[q].w, wf[j][4 * q + 3], acc[j][m]);
                    }
                }
            }
        }
        ring.release(c);

        const int tok = lane / (32 / MP);
        const bool writer = lane % (32 / MP) == 0 && tok < M;
        if (nseg == 1) {  // c whole rows
#pragma unroll
            for (int j = 0; j < DL_CHUNK; ++j) {
                if (!ok[j]) continue;
                const float s = warp_sums<MP>(acc[j], lane);
                if (writer) dl_store_output<P>(st, sm, layer, tok, r0 + (g + j) * DL_ROWS + warp, r0, s);
            }
            g += c;
        } else {  // segments of one row: their partial sums into carry, in segment order
#pragma unroll
            for (int j = 0; j < DL_CHUNK; ++j)
#pragma unroll
                for (int m = 0; m < MP; ++m)
                    if (j < c) carry[m] += acc[j][m];
            seg0 += c;
            if (seg0 < nseg) continue;  // the row goes on in the next chunk (a ring of < nseg stages)
            if (ok[0]) {
                const float s = warp_sums<MP>(carry, lane);
                if (writer) dl_store_output<P>(st, sm, layer, tok, r0 + g * DL_ROWS + warp, r0, s);
            }
#pragma unroll
            for (int m = 0; m < MP; ++m) carry[m] = 0.0f;
            seg0 = 0;
            ++g;
        }
    }
}

// Matrix phase P at one token (M = 1), the activations in registers. A warp's row dot product
// from shared memory is bound by shared-memory bytes and latency, not arithmetic: measured on
// its own (8 warps, a 768-float row), 400 cycles with the activations re-read from shared memory
// for every row and one accumulator, 160 more for the warp's sum. So here every warp holds the
// token's activations in registers (lane l: pieces l, l + 32, ... of 16 weight bytes, NP at most),
// normalizes them itself where the phase has a LayerNorm (statistics from the warps' slices,
// one block barrier), and takes DL_CHUNK1 of its stages at once (1: measured faster than 2 or
// 4, docs/PERFORMANCE.md version 11): K = D, one row per stage (rows w, w + 8, ...), their sums in
// one warp_sums; K = 4D (PROJ2), the row's segments, each against its activations read from
// shared memory. Four accumulators per row.
#define DL_CHUNK1 1

__shared__ double2 dl_ln_part[DL_WARPS];  // the warps' LayerNorm sums (dl_layernorm_regs)

template <int NP, int V>
__device__ __forceinline__ void dl_layernorm_regs(const DlSmem& sm, float4 (&a)[NP][V], int npc, double inv_d,
                                                  float eps) {
    double2* part = dl_ln_part;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double s = 0.0, q = 0.0;  // this warp's slice: piece columns i = warp, warp + 8, ...
#pragma unroll
    for (int i = 0; i < NP; ++i) {
        if (i % DL_WARPS != warp || lane + 32 * i >= npc) continue;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const double p = a[i][v].x, r = a[i][v].y, t = a[i][v].z, u = a[i][v].w;
            s += (p + r) + (t + u);
            q += (p * p + r * r) + (t * t + u * u);
        }
    }
    s = warp_sum(s);
    q = warp_sum(q);
    if (lane == 0) part[warp] = make_double2(s, q);
    dl_sync();
    double ss = 0.0, qq = 0.0;
#pragma unroll
    for (int w = 0; w < DL_WARPS; ++w) {
        const double2 pw = part[w];
        ss += pw.x;
        qq += pw.y;
    }
    const LnRow st = ln_row_stats(ss, qq, inv_d, eps);
    const float4* g4 = reinterpret_cast<const float4*>(sm.ln_g);
    const float4* b4 = reinterpret_cast<const float4*>(sm.ln_b);
#pragma unroll
    for (int i = 0; i < NP; ++i) {
        const int pc = lane + 32 * i;
        if (pc >= npc) break;
#pragma unroll
        for (int v = 0; v < V; ++v) a[i][v] = ln_apply4(a[i][v], st, g4[pc * V + v], b4[pc * V + v]);
    }
}

template <typename T, int P, int NP>
__device__ __forceinline__ void dl_matrix_phase_1(const DlStep& st, DlRing<T>& ring, const DlSmem& sm, int layer,
                                                  double inv_d) {
    constexpr int CPT = 16 / sizeof(T), V = CPT / 4;
    typedef typename DlPiece<T>::type Piece;
    const int D = st.D, K = dl_k(P, D), nseg = K / D, npc = D / CPT;  // pieces of a row segment
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = dl_geo[P].lo, r1 = dl_geo[P].hi;
    const int ngroups = (r1 - r0 + DL_ROWS - 1) / DL_ROWS;
    const float4* act4 = reinterpret_cast<const float4*>(sm.act);
    float4 a[NP][V];  // K = D: the token's activations at the lane's pieces (zero past the row)
    if (nseg == 1) {
#pragma unroll
        for (int i = 0; i < NP; ++i)
#pragma unroll
            for (int v = 0; v < V; ++v)
                a[i][v] = lane + 32 * i < npc ? act4[(lane + 32 * i) * V + v] : make_float4(0.f, 0.f, 0.f, 0.f);
        if (P == 0 || P == 2) dl_layernorm_regs<NP, V>(sm, a, npc, inv_d, st.eps);
    }
    const int cmax = min(DL_CHUNK1, ring.n_stages);
    float carry = 0.0f;  // K = 4D: the row's sum over the chunks so far
    for (int g = 0, seg0 = 0; g < ngroups;) {
        const int c = nseg == 1 ? min(cmax, ngroups - g) : min(cmax, nseg - seg0);
        ring.acquire(c);
        float acc[DL_CHUNK1];
#pragma unroll
        for (int j = 0; j < DL_CHUNK1; ++j) {
            acc[j] = 0.0f;
            if (j >= c || r0 + (g + (nseg == 1 ? j : 0)) * DL_ROWS + warp >= r1) continue;  // warp-uniform
            const T* w = ring.stage(j) + warp * ring.rs;
            const float4* as = act4 + (seg0 + j) * (D / 4);  // K = 4D: segment seg0 + j's activations
            float c4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < NP; ++i) {
                const int pc = lane + 32 * i;
                if (pc >= npc) break;
                float wf[CPT];
                unpack16(*reinterpret_cast<const Piece*>(w + pc * CPT), wf);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const float4 x = nseg == 1 ? a[i][v] : as[pc * V + v];
                    c4[0] = fmaf(x.x, wf[4 * v], c4[0]);
                    c4[1] = fmaf(x.y, wf[4 * v + 1], c4[1]);
                    c4[2] = fmaf(x.z, wf[4 * v + 2], c4[2]);
                    c4[3] = fmaf(x.w, wf[4 * v + 3], c4[3]);
                }
            }
            acc[j] = (c4[0] + c4[1]) + (c4[2] + c4[3]);
        }
        ring.release(c);
        if (nseg == 1) {  // c rows: lane l has row l / 8's sum
            const float s = warp_sums<DL_CHUNK1>(acc, lane);
            const int j = lane / (32 / DL_CHUNK1), row = r0 + (g + j) * DL_ROWS + warp;
            if (lane % (32 / DL_CHUNK1) == 0 && j < c && row < r1) dl_store_output<P>(st, sm, layer, 0, row, r0, s);
            g += c;
        } else {  // segments of one row, added in segment order
#pragma unroll
            for (int j = 0; j < DL_CHUNK1; ++j)
                if (j < c) carry += acc[j];
            seg0 += c;
            if (seg0 < nseg) continue;
            const int row = r0 + g * DL_ROWS + warp;
            if (row < r1) {
                const float s = warp_sum(carry);
                if (lane == 0) dl_store_output<P>(st, sm, layer, 0, row, r0, s);
            }
            carry = 0.0f;
            seg0 = 0;
            ++g;
        }
    }
}

// Matrix phase P for 2 to 8 tokens on the tensor cores (mma.sync m16n8k8, TF32 inputs, float32
// sums; dl_matrix_phase gives it 5 to 8 tokens of bf16 weights, where it was measured faster). With the tokens' sums on the FMA units (dl_matrix_phase_m) every 16 weight bytes cost
// M activation loads from shared memory, which bound the phase (batch 8: 18 us of a layer's
// arithmetic). Here a stage (8 rows x D) is the A operand, rows 8..15 zero, and the M tokens'
// activations the B operand (token n = column n; columns past M repeat token M - 1 and are not
// stored): each weight and activation element is read once per stage. The K range is split
// over the warps (warp w: 16-element pieces w, w + 8, ...), and a piece's four elements per lane
// (row g = lane / 4 at 4 (lane % 4), and token g's same four) serve two k-steps, the k order
// being a permutation that A and B share. Float32 weights go in as hi + lo TF32 halves against
// the activations' (three products, the lo x lo one dropped: about 2^-22 relative, as the
// 3xTF32 GEMMs); bf16 weights are exact in TF32, so two. The warps' partial sums meet in shared
// memory and are added in warp order. Row strides D + DL_PAD (weights) and K + DL_PAD
// (activations) keep the lanes' loads on distinct banks.
#define DL_CHUNK_TC 2
#define DL_TC_UNROLL 2
__shared__ __align__(16) float dl_red[2][DL_CHUNK_TC][DL_WARPS][64];  // [chunk parity][stage][warp][row x token]

template <typename T>
struct DlTcPiece;
template <>
struct DlTcPiece<float> {  // four float32 weights
    __device__ static float4 load(const float* p) { return *reinterpret_cast<const float4*>(p); }
};
template <>
struct DlTcPiece<unsigned short> {  // four bf16 weights (8 bytes)
    __device__ static float4 load(const unsigned short* p) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                           __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
};

// acc[0..2] += w (rows g, zeros below) x a (token g) over one k-step's two elements per lane.
template <typename T>
__device__ __forceinline__ void dl_tc_step(float (&acc)[3][4], float w0, float w1, float a0, float a1) {
    unsigned ah0, al0, ah1, al1;
    split_tf32(a0, ah0, al0);
    split_tf32(a1, ah1, al1);
    if (sizeof(T) == 4) {
        unsigned wh0, wl0, wh1, wl1;
        split_tf32(w0, wh0, wl0);
        split_tf32(w1, wh1, wl1);
        mma_tf32_16x8x8(acc[0], {wh0, 0u, wh1, 0u}, ah0, ah1);
        mma_tf32_16x8x8(acc[1], {wh0, 0u, wh1, 0u}, al0, al1);
        mma_tf32_16x8x8(acc[2], {wl0, 0u, wl1, 0u}, ah0, ah1);
    } else {
        const unsigned wb0 = __float_as_uint(w0), wb1 = __float_as_uint(w1);
        mma_tf32_16x8x8(acc[0], {wb0, 0u, wb1, 0u}, ah0, ah1);
        mma_tf32_16x8x8(acc[1], {wb0, 0u, wb1, 0u}, al0, al1);
    }
}

template <typename T, int P>
__device__ __forceinline__ void dl_matrix_phase_tc(const DlStep& st, DlRing<T>& ring, const DlSmem& sm, int layer) {
    constexpr int CH = DL_CHUNK_TC, TC_UNROLL = DL_TC_UNROLL;  // stages at once; the K loop's unroll
    float (*red)[DL_CHUNK_TC][DL_WARPS][64] = dl_red;
    const int D = st.D, M = st.M, K = dl_k(P, D), nseg = K / D, npiece = D / 16;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = dl_geo[P].lo, r1 = dl_geo[P].hi;
    const int ngroups = (r1 - r0 + DL_ROWS - 1) / DL_ROWS;
    const float* actg = sm.act + min(g, M - 1) * (K + DL_PAD) + 4 * t;  // token g's row at this lane
    const int cmax = min(CH, ring.n_stages);
    float acc[CH][3][4];  // K = 4D: kept over a row group's segments
#pragma unroll
    for (int j = 0; j < CH; ++j)
#pragma unroll
        for (int q = 0; q < 3; ++q) acc[j][q][0] = acc[j][q][1] = acc[j][q][2] = acc[j][q][3] = 0.0f;
    for (int g0 = 0, seg0 = 0, parity = 0; g0 < ngroups; parity ^= 1) {
        const int c = nseg == 1 ? min(cmax, ngroups - g0) : min(cmax, nseg - seg0);
        ring.acquire(c);
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            if (j >= c) break;
            const int q = nseg == 1 ? j : 0;  // K = 4D: every segment into stage slot 0's sums
            const T* w = ring.stage(j) + g * ring.rs + 4 * t;
            const float* a = actg + (nseg == 1 ? 0 : (seg0 + j) * D);
#pragma unroll TC_UNROLL
            for (int pc = warp; pc < npiece; pc += DL_WARPS) {
                const float4 wv = DlTcPiece<T>::load(w + 16 * pc);
                const float4 av = *reinterpret_cast<const float4*>(a + 16 * pc);
                dl_tc_step<T>(acc[q], wv.x, wv.y, av.x, av.y);
                dl_tc_step<T>(acc[q], wv.z, wv.w, av.z, av.w);
            }
        }
        ring.release(c);
        int nsum = 0;  // stages whose sums are complete now
        if (nseg == 1) {
            nsum = c;
        } else {
            seg0 += c;
            if (seg0 == nseg) nsum = 1;
        }
        if (nsum == 0) continue;
        // lane (g, t) holds rows g, tokens 2t and 2t + 1 of each stage: to shared memory, then
        // thread (j, row, token) adds the 8 warps' in order
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            if (j >= nsum) break;
            const float s0 = (acc[j][0][0] + acc[j][1][0]) + acc[j][2][0];
            const float s1 = (acc[j][0][1] + acc[j][1][1]) + acc[j][2][1];
            *reinterpret_cast<float2*>(&red[parity][j][warp][g * 8 + 2 * t]) = make_float2(s0, s1);
#pragma unroll
            for (int q = 0; q < 3; ++q) acc[j][q][0] = acc[j][q][1] = acc[j][q][2] = acc[j][q][3] = 0.0f;
        }
        dl_sync();
        if ((int)threadIdx.x < nsum * 64) {
            const int j = threadIdx.x >> 6, row = (threadIdx.x >> 3) & 7, tok = threadIdx.x & 7;
            const int n = r0 + (g0 + j) * DL_ROWS + row;
            if (tok < M && n < r1) {
                float sum = 0.0f;
#pragma unroll
                for (int w = 0; w < DL_WARPS; ++w) sum += red[parity][j][w][row * 8 + tok];
                dl_store_output<P>(st, sm, layer, tok, n, r0, sum);
            }
        }
        g0 += nsum;
        seg0 = 0;
        // (red[parity] is written again two chunks on, after the dl_sync of the next one)
    }
}

// The matrix phase for the step's M tokens (its LayerNorm included for QKV and FC): at one token
// the register path above while a warp's pieces of a row fit (D <= 1664 for float32 weights,
// 1792 for bf16: 13 or 7 pieces a lane, 52 or 56 floats; 6 or 3 up to D = 768);
// else the LayerNorm on the shared activations and MP = M rounded up to 1, 2, 4 or 8.
template <typename T, int P>
__device__ __forceinline__ void dl_matrix_phase(const DlStep& st, DlRing<T>& ring, const DlSmem& sm, int layer,
                                                double inv_d) {
    constexpr int SMALL = sizeof(T) == 4 ? 6 : 3, LARGE = sizeof(T) == 4 ? 0 : 7;
    const int npl = (st.D / (16 / (int)sizeof(T)) + 31) / 32;  // pieces of a row per lane
    // one token: the activations in registers (the shared-memory path measured slower)
    if (st.M == 1 && npl <= SMALL) return dl_matrix_phase_1<T, P, SMALL>(st, ring, sm, layer, inv_d);
    if constexpr (LARGE > 0) {  // float32 from D = 1024 on: measured slower (gpt2-xl 421 vs 435 tok/s)
        if (st.M == 1 && npl <= LARGE) return dl_matrix_phase_1<T, P, LARGE>(st, ring, sm, layer, inv_d);
    }
    if (P == 0 || P == 2) dl_layernorm_act(sm, st.M, st.D, inv_d, st.eps);
    constexpr bool tc = sizeof(T) == 2;  // float32: 3 products a k-step, measured no faster (13,404 vs 13,436 tok/s)
    if constexpr (tc) {  // from 5 tokens: at 2 and 4 the FMA path was faster (gpt2 bf16 5,875 vs 5,087
                         // and 9,402 vs 9,277 tok/s), at 8 slower (13,286 vs 15,000)
        if (st.M > 4) return dl_matrix_phase_tc<T, P>(st, ring, sm, layer);
    }
    if (st.M == 1) dl_matrix_phase_m<T, P, 1>(st, ring, sm, layer);
    else if (st.M == 2) dl_matrix_phase_m<T, P, 2>(st, ring, sm, layer);
    else if (st.M <= 4) dl_matrix_phase_m<T, P, 4>(st, ring, sm, layer);
    else dl_matrix_phase_m<T, P, 8>(st, ring, sm, layer);
}

// One attention task: token m, head h, keys [split * 64, +64) of its lengths[m]. The block's 16
// groups of 16 lanes take keys grp, grp + 16, ... (all loaded at once, a float4 of the 64 dims
// per lane), score them, softmax within the split and sum P V; the groups' sums are added in a
// fixed order. One split: the result goes to att directly. Several: each writes its partial
// (max, sum, unnormalised 64-vector) and the last to finish (an integer ticket) combines them in
// split order.
__device__ __forceinline__ void dl_attention_task(const DlStep& st, int layer, int m, int h, int split,
                                                  int n_splits) {
    __shared__ __align__(16) float sc[DL_KEYS];
    __shared__ __align__(16) float red[DL_GROUPS][64];
    __shared__ float stat[4];
    __shared__ int is_last;
    const int tid = threadIdx.x, lane16 = tid & 15, grp = tid >> 4, lane = tid & 31, warp = tid >> 5;
    const unsigned half_mask = 0xffffu << (tid & 16);
    const int D = st.D, H = D / HEAD_DIM, len = dl_len[m];
    float* orow = st.att + (long long)m * D + h * HEAD_DIM;
    dl_sync();  // the previous task is done with the shared arrays
    if (len < 1 || len > st.n_ctx) {
        if (tid < HEAD_DIM) orow[tid] = __int_as_float(0x7fc00000);
        return;
    }
    const int k0 = split * DL_KEYS, n = min(DL_KEYS, len - k0);
    const float* kbase = st.kv + dl_seq[m] * st.batch_stride + layer * st.layer_stride + h * HEAD_DIM + lane16 * 4;
    const float* vbase = kbase + (long long)st.n_ctx * D;
    float4 q = __ldcg(reinterpret_cast<const float4*>(st.qkv + (long long)m * 3 * D + h * HEAD_DIM + lane16 * 4));
    q.x *= ATTN_SCALE; q.y *= ATTN_SCALE; q.z *= ATTN_SCALE; q.w *= ATTN_SCALE;

    constexpr int PER_GROUP = DL_KEYS / DL_GROUPS;
    float4 kr[PER_GROUP], vr[PER_GROUP];
#pragma unroll
    for (int j = 0; j < PER_GROUP; ++j) {
        const int i = grp + DL_GROUPS * j;
        if (i < n) {
            const long long off = (long long)(k0 + i) * D;
            kr[j] = __ldcg(reinterpret_cast<const float4*>(kbase + off));
            vr[j] = __ldcg(reinterpret_cast<const float4*>(vbase + off));
        }
    }
#pragma unroll
    for (int j = 0; j < PER_GROUP; ++j) {
        const int i = grp + DL_GROUPS * j;
        if (i >= n) break;  // group-uniform: the shuffle's mask names exactly the group's lanes
        const float d = attn_dot16(q, kr[j], half_mask);
        if (lane16 == 0) sc[i] = d;
    }
    dl_sync();
    // max and probabilities: warps 0 and 1, one key per thread
    float p = 0.0f;
    if (warp < 2) {
        const float mx = warp_max(tid < n ? sc[tid] : attn_neg_inf());
        if (lane == 0) stat[warp] = mx;
    }
    dl_sync();
    if (warp < 2) {
        const float base = attn_safe_max(fmaxf(stat[0], stat[1]));
        p = tid < n ? expf(sc[tid] - base) : 0.0f;
        sc[tid] = p;
        p = warp_sum(p);
        if (lane == 0) stat[2 + warp] = p;
    }
    dl_sync();
    const float mx = fmaxf(stat[0], stat[1]), sum = stat[2] + stat[3];
    *reinterpret_cast<float4*>(&red[grp][lane16 * 4]) = attn_pv16(sc, vr, grp, DL_GROUPS, n);
    dl_sync();
    float a = 0.0f;
    if (tid < HEAD_DIM) {
#pragma unroll
        for (int g = 0; g < DL_GROUPS; ++g) a += red[g][tid];
    }
    if (n_splits == 1) {
        if (tid < HEAD_DIM) orow[tid] = a / sum;
        return;
    }
    const int max_splits = (st.n_ctx + DL_KEYS - 1) / DL_KEYS;
    const long long p0 = ((long long)m * H + h) * max_splits;
    if (tid < HEAD_DIM) st.part_acc[(p0 + split) * HEAD_DIM + tid] = a;
    if (tid == 0) {
        st.part_ml[(p0 + split) * 2] = mx;
        st.part_ml[(p0 + split) * 2 + 1] = sum;
    }
    __threadfence();  // the partials are visible device-wide before the ticket
    dl_sync();
    if (tid == 0) {
        const int ticket = atomicAdd(&st.tickets[m * H + h], 1);
        is_last = ticket == n_splits - 1;
        if (is_last) st.tickets[m * H + h] = 0;  // ready for the next head / launch
    }
    dl_sync();
    if (!is_last) return;
    __threadfence();
    if (tid < HEAD_DIM) orow[tid] = attn_combine_splits(st.part_ml + p0 * 2, st.part_acc + p0 * HEAD_DIM, n_splits, tid);
}

// The ATT phase: the tasks (token m, head h, split s) of every token, numbered token-major, go
// round-robin over the blocks. A token of length L has ceil(L / 64) splits (one if L is bad).
__device__ __forceinline__ int dl_splits(int len, int n_ctx) {
    return len < 1 || len > n_ctx ? 1 : (len + DL_KEYS - 1) / DL_KEYS;
}

__device__ __forceinline__ void dl_attention_phase(const DlStep& st, int layer) {
    const int H = st.D / HEAD_DIM;
    int total = 0;
    for (int m = 0; m < st.M; ++m) total += H * dl_splits(dl_len[m], st.n_ctx);
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
        int m = 0, rest = t, ns = 1;
        for (;; ++m) {
            ns = dl_splits(dl_len[m], st.n_ctx);
            if (rest < H * ns) break;
            rest -= H * ns;
        }
        dl_attention_task(st, layer, m, rest / ns, rest % ns, ns);
    }
}

template <typename T>
__device__ __forceinline__ void decode_layers_body(const DlStep& st, unsigned* barrier, int n_stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap();  // bulk copies and mbarrier byte counts are sm_90's; gpt2block launches this on sm_90+ only
#else
    extern __shared__ float4 dl_smem4[];
    const int M = st.M, D = st.D;
    DlSmem sm;
    sm.rmax = (4 * D + gridDim.x - 1) / gridDim.x;
    sm.act = reinterpret_cast<float*>(dl_smem4);
    sm.res = sm.act + M * (4 * D + DL_PAD);
    sm.bias = sm.res + ((M * sm.rmax + 3) & ~3);  // every region 16-byte aligned
    sm.ln_g = sm.bias + ((sm.rmax + 3) & ~3);
    sm.ln_b = sm.ln_g + D;
    __shared__ unsigned long long bars[2 * DL_MAX_STAGES];
    DlRing<T> ring;
    ring.slots = reinterpret_cast<T*>(sm.ln_b + D);
    ring.bars = bars;
    ring.n_stages = n_stages;
    ring.D = D;
    ring.rs = D + DL_PAD;
    // The layer table (12 pointers a layer), the phases' rows and the ring's barriers, then the
    // producer warp leaves to stream the weights: all before the wait, as none of it depends on
    // the kernels before.
    for (int i = threadIdx.x; i < st.n_layer * 12; i += DL_THREADS + 32)
        reinterpret_cast<const void**>(dl_layers)[i] = reinterpret_cast<const void* const*>(st.layers)[i];
    dl_geo_init(D);
    if (threadIdx.x == 0) ring.init();
    __syncthreads();  // the whole block, the last time: from here on the compute threads use dl_sync
    ring.slot = ring.parity = 0;
    if (threadIdx.x >= DL_THREADS) {
        if (threadIdx.x == DL_THREADS) ring.produce(st.n_layer);
        return;
    }
    DlParams q;
    dl_params_fetch(0, 0, D, q);
    pdl_wait();
    if (threadIdx.x < M) {
        dl_seq[threadIdx.x] = st.seq[threadIdx.x];
        dl_pos[threadIdx.x] = st.pos[threadIdx.x];
        dl_len[threadIdx.x] = st.lengths[threadIdx.x];
    }
    const double inv_d = ln_inv_n(D);
    unsigned target = 0;
    for (int layer = 0; layer < st.n_layer; ++layer) {
        if (layer > 0) dl_grid_sync(barrier, target);
        dl_phase_inputs(st, 0, q, sm, st.x);
        dl_matrix_phase<T, 0>(st, ring, sm, layer, inv_d);
        dl_params_fetch(layer, 1, D, q);  // PROJ's, held through ATT
        dl_grid_sync(barrier, target);
        if (layer == st.n_layer - 1) pdl_trigger();  // every block is resident by now
        dl_attention_phase(st, layer);
        dl_grid_sync(barrier, target);
        dl_phase_inputs(st, 1, q, sm, st.att);
        dl_matrix_phase<T, 1>(st, ring, sm, layer, inv_d);
        dl_params_fetch(layer, 2, D, q);
        dl_grid_sync(barrier, target);
        dl_phase_inputs(st, 2, q, sm, st.x);
        dl_matrix_phase<T, 2>(st, ring, sm, layer, inv_d);
        dl_params_fetch(layer, 3, D, q);
        dl_grid_sync(barrier, target);
        dl_phase_inputs(st, 3, q, sm, st.hid);
        dl_matrix_phase<T, 3>(st, ring, sm, layer, inv_d);
        if (layer + 1 < st.n_layer) dl_params_fetch(layer + 1, 0, D, q);
    }
    // Leave the counter zero for the next launch: the last block to arrive here (after every
    // block has passed its last wait) resets it.
    dl_sync();
    if (threadIdx.x == 0 && atomicAdd(barrier, 1u) == target + gridDim.x - 1) atomicExch(barrier, 0u);
#endif
}

#define DECODE_LAYERS_KERNEL(name, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(DL_THREADS + 32, 1)                                              \
        name(const DecodeLayer* __restrict__ layers, int n_layer, int M, int D, float eps, float* x,         \
             float* qkv, float* att, float* hid, float* kv, long long batch_stride, long long layer_stride,  \
             int n_ctx, const int* __restrict__ seq, const int* __restrict__ pos,                            \
             const int* __restrict__ lengths, float* part_acc, float* part_ml, int* tickets,                 \
             unsigned* barrier, int n_stages) {                                                              \
        const DlStep st{layers, n_layer, M, D, eps, x, qkv, att, hid, kv, batch_stride, layer_stride,        \
                        n_ctx, seq, pos, lengths, part_acc, part_ml, tickets};                               \
        decode_layers_body<T>(st, barrier, n_stages);                                                        \
    }

DECODE_LAYERS_KERNEL(decode_layers_f32, float)
DECODE_LAYERS_KERNEL(decode_layers_bf16, unsigned short)

// gemm_wgmma.cu: the GEMMs on Hopper's warpgroup tensor-core instruction, wgmma (sm_90a only:
// NVRTC or nvcc with -arch=sm_90a), with the weight operand prepared once ("planes").
//
//   C[M,N] = epilogue(A[M,K] @ W + bias[N])     gemm_wg_<variant>_<bias | bias_gelu | bias_residual | nt>
// where W is given as planes P [PLANES, N, KP] (k-major, W transposed): P[0] = tf32 hi part of W^T,
// P[1] (tf32x3) = tf32 lo part, both rounded to nearest, each row's 32-wide k tiles in the order of
// A's register fragments (gw_plane_col) and zero-padded to KP = whole k tiles (gemm_wg_split_planes_*
// below makes them from W [K, N] or W^T [N, K]). nt is the plain product (no bias): the tied LM head,
// W^T = wte.
// variant: tf32x3 (A split x = hi + lo in the kernel; lo*hi' + hi*lo' + hi*hi': fp32-level
// accuracy) or tf32 (one pass, A rounded to tf32 in the kernel: left to the tensor core, which
// reads the top 19 bits, A's truncation measured 400-1000x torch fp32's error, twice rounding's).
// Requires K % 4 == 0 and A, P 16-byte aligned (cuda/linear.py sends other products to gemm.cu).
// Any M, N >= 1; deterministic.
//
// A block is GW_WG consumer warpgroups (64 rows of C each, all GW_BN columns) and a producer
// warpgroup, meeting only at shared-memory barriers (mbarrier), so the consumers drift apart and
// one's non-tensor work overlaps the other's wgmmas:
//   producer: for each k tile (GW_BK = 32 deep) it waits until the ring slot is free (empty[s]),
//             copies A's GW_BM x 32 and the planes' GW_BN x 32 into it with cp.async, 16 bytes per
//             copy, into wgmma's k-major 128-byte-swizzle layout, and has the copies' completion
//             arrive on full[s] (GW_STAGES slots in the ring);
//   consumer: waits on full[s]; loads its 64 rows of A from the stage straight into wgmma's
//             register fragments (four 16-byte loads per thread: the planes' k order makes a
//             thread's 8 values of a row adjacent) and rounds them to tf32 (hi) or splits them
//             there (hi rounded, lo = x - hi exact and left to the tensor core's truncation:
//             split_tf32_fast; qkv's error went 0.47 -> 0.55x torch fp32's); then one wgmma m64nGW_BNk8 per k8 step and pass with A from
//             registers and B from the stage. tf32x3 sums the tile's 12 products from zero into
//             `part` in the tensor core (which truncates as it accumulates: summing all of K there
//             measured 95-125x torch fp32's error, version 6), waits for them, arrives on empty[s]
//             and adds part to the fp32 accumulators with FADDs. (Adding part one tile later,
//             behind the next tile's wgmmas, makes ptxas serialize every wgmma: it reads registers
//             of the wgmma pipeline.) While one consumer loads, waits and adds, the other's wgmmas
//             keep the tensor cores busy. tf32 accumulates in the tensor core, one k tile at a time.
//   (Version 7 rounded / split A in shared memory and read it with descriptors: shared memory
//   bandwidth ran out; fragments in registers measured +20-28% on tf32x3, docs/PERFORMANCE.md v8.)
//
// Launch recipe (cuda/linear.gemm_planes): grid (ceil(M / GW_BM), ceil(N / GW_BN), GW_SPLITK) (with
// GW_SPLITK > 1 the z blocks form a cluster, compiled in: __cluster_dims__), block GW_THREADS =
// 128 * (GW_WG + 1), dynamic shared memory GW_SMEM_BYTES(planes) (cuda/build.gw_stages picks the
// most stages, up to 8, that fit one block per SM).

#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"
#include "wgmma.cuh"

// Build parameters (build.py): GW_WG consumer warpgroups (block rows = 64 * GW_WG); GW_BN block columns:
// 48, 64, 128 or 192 (the wgmma's N; 192 for tf32 only: with tf32x3's part registers two consumers spill
// at ptxas' 168-register cap of a 384-thread block); GW_STAGES ring slots; GW_SPLITK blocks sharing one
// output tile, each a 1/GW_SPLITK share of K (a cluster); GW_PLANES_N (below).
#ifndef GW_WG
#error "GW_WG is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GW_BN
#error "GW_BN is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GW_STAGES
#error "GW_STAGES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GW_SPLITK
#error "GW_SPLITK is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GW_PLANES_N
#error "GW_PLANES_N is set by gpt2block/backends/cuda/build.py"
#endif
#define GW_BM (64 * GW_WG)
#define GW_BK 32                          // k tile: one 128-byte row of floats
#define GW_PT 128                          // producer threads: one warpgroup (one warp measured 30% slower)
#define GW_THREADS (128 * GW_WG + GW_PT)   // consumers, then the producer
#define GW_STAGE_BYTES(planes) ((GW_BM + (planes) * GW_BN) * GW_ROW)
#define GW_SMEM_BYTES(planes) \
    (GW_STAGES * GW_STAGE_BYTES(planes) + 16 * GW_STAGES + 1024)

// ---------------------------------------------------------------------------------------------

// The epilogue, through shared memory. The consumers write their accumulators into the (now idle)
// ring as a row-major GW_BM x GW_BN tile of stride GW_EPI_STRIDE floats, then all their threads walk
// its rows a float4 at a time in a loop: bias (and the residual) read as float4, whole rows of C
// written. (Version 18 applied the epilogue to the fragments in place, unrolled: 96 outputs a thread
// at 192 columns, each with its own bias load, about 6,000 instructions executed once per warp;
// Nsight Compute put half of the fc GEMM's warp samples there, more than in its main loop.)
// Split K (GW_SPLITK > 1): the blocks of a cluster hold partial sums of one tile; after a cluster
// barrier block z reduces rows [z GW_BM / S, (z + 1) GW_BM / S) of it, reading every block's tile
// through distributed shared memory and adding them in rank order (deterministic), and a second
// barrier keeps each block's shared memory alive until the others have read it.
// Stride GW_BN + 8 (== 8 mod 32 words, or 24 at 48 columns): a half-warp's float2 stores of rows
// g = 0..3 fall in distinct 8-bank groups, and a quarter-warp's float4 reads of a row are contiguous
// (at 48 columns a row is 12 float4, so one quarter-warp in three straddles two rows: 2-way conflicts).
// The second cluster barrier's release also waits for this block's global stores (MEMBAR.GPU in the
// SASS); a relaxed arrive would need the DSMEM loads known complete, and was not tried.
#define GW_EPI_STRIDE (GW_BN + 8)
#define GW_EPI_BYTES (GW_BM * GW_EPI_STRIDE * 4)

#if GW_SPLITK > 1
__device__ __forceinline__ void gw_cluster_sync() {
    __syncwarp();
    GW_ASM("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
#endif

// The tile's float4 at shared address a: this block's, or (split K) the sum of the cluster's
// blocks' in rank order.
__device__ __forceinline__ float4 gw_epi_load(unsigned a) {
    float4 v;
#if GW_SPLITK > 1
#pragma unroll
    for (int q = 0; q < GW_SPLITK; ++q) {
        unsigned ra;
        float4 p;
        GW_ASM("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(q));
        GW_ASM("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(p.x), "=f"(p.y), "=f"(p.z), "=f"(p.w) : "r"(ra) : "memory");
        if (q == 0) {
            v = p;
        } else {
            v.x += p.x; v.y += p.y; v.z += p.z; v.w += p.w;
        }
    }
#else
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(a) : "memory");
#endif
    return v;
}

template <int EPI>
__device__ __forceinline__ void gemm_wg_epilogue(const float (&acc)[GW_BN / 2], unsigned ring,
                                                 const float* __restrict__ bias, const float* R, float* C,
                                                 int M, int N, int m0, int n0, int wg, int ct) {
    // This consumer's wgmmas are done, the other's may still be reading the ring's last stage: the
    // consumers' threads meet at named barrier 1 before the ring is overwritten.
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * GW_WG) : "memory");
    // Accumulator layout (m64nNk8, f32): warp w of the warpgroup holds rows 16w + g and 16w + g + 8
    // (g = lane / 4); acc[4j + 2h + e] is (row 16w + g + 8h, column 8j + 2t + e), t = lane % 4.
    const int lane = ct & 31, w = ct >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < GW_BN / 8; ++j)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n"
                         ::"r"(ring + 4u * ((64 * wg + 16 * w + g + 8 * h) * GW_EPI_STRIDE + 8 * j + 2 * t)),
                         "f"(acc[4 * j + 2 * h]), "f"(acc[4 * j + 2 * h + 1]) : "memory");
#if GW_SPLITK > 1
    gw_cluster_sync();  // every block's tile is written
    const int r0 = blockIdx.z * GW_BM / GW_SPLITK, r1 = (blockIdx.z + 1) * GW_BM / GW_SPLITK;
#else
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * GW_WG) : "memory");  // the tile is written
    const int r0 = 0, r1 = GW_BM;
#endif

    // Row r of the tile, float4 c4: C[m0 + r, n0 + 4 c4 ..]. float4 stores where N % 4 == 0 and C,
    // R and bias are 16-byte aligned; element by element otherwise (and past N).
    constexpr int V = GW_BN / 4;
    const bool vec = (N & 3) == 0 && gemm_aligned(C, 16) && gemm_aligned(bias, 16) &&
                     (EPI != GEMM_EPI_RESIDUAL || gemm_aligned(R, 16));
    const int end = min(r1, M - m0) * V;
#pragma unroll 2
    for (int i = r0 * V + 128 * wg + ct; i < end; i += 128 * GW_WG) {
        const int r = i / V, c4 = i - r * V;
        const int row = m0 + r, col = n0 + 4 * c4;
        float4 v = gw_epi_load(ring + 4u * (r * GW_EPI_STRIDE + 4 * c4));
        const long long idx = (long long)row * N + col;
        if (vec && col + 3 < N) {
            if (EPI != GEMM_EPI_NONE) {
                const float4 b = __ldg(reinterpret_cast<const float4*>(bias + col));
                v.x += b.x; v.y += b.y; v.z += b.z; v.w += b.w;
            }
            if (EPI == GEMM_EPI_GELU) {
                v.x = gelu_tanh(v.x); v.y = gelu_tanh(v.y); v.z = gelu_tanh(v.z); v.w = gelu_tanh(v.w);
            }
            if (EPI == GEMM_EPI_RESIDUAL) {
                const float4 q = *reinterpret_cast<const float4*>(R + idx);
                v.x += q.x; v.y += q.y; v.z += q.z; v.w += q.w;
            }
            *reinterpret_cast<float4*>(C + idx) = v;
        } else {
            const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (col + k < N) C[idx + k] = gemm_epi_value<EPI>(e[k], bias, R, idx + k, col + k);
        }
    }
#if GW_SPLITK > 1
    gw_cluster_sync();  // the other blocks have read this one's tile
#endif
}

template <int PASSES, int EPI>
__device__ __forceinline__ void gemm_wg_body(const float* __restrict__ A, const float* __restrict__ P,
                                             const float* __restrict__ bias, const float* R, float* C, int M,
                                             int N, int K) {
    constexpr int PLANES = PASSES == 3 ? 2 : 1;
    constexpr int NACC = GW_BN / 2;  // accumulators per thread (m64 x GW_BN / 128)
    constexpr unsigned STAGE = GW_STAGE_BYTES(PLANES), A_BYTES = GW_BM * GW_ROW, B_BYTES = GW_BN * GW_ROW;
    static_assert(GW_BN == 48 || GW_BN == 64 || GW_BN == 128 || GW_BN == 192, "GW_BN must be 48, 64, 128 or 192");
    static_assert(GW_WG == 1 || GW_WG == 2, "GW_WG must be 1 or 2");
    static_assert(GW_SPLITK >= 1 && GW_SPLITK <= 4, "GW_SPLITK must be 1 to 4 (a cluster's blocks)");
    static_assert(GW_STAGES * STAGE >= GW_EPI_BYTES, "the epilogue's tile must fit in the ring");

    extern __shared__ float4 gw_smem4[];
    const unsigned raw = smem_u32(gw_smem4);
    const unsigned ring = raw + ((1024u - (raw & 1023u)) & 1023u);  // stages, from a 1024-byte boundary
    const unsigned bars = ring + GW_STAGES * STAGE;                   // full[GW_STAGES], empty[GW_STAGES]
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (GW_STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.x * GW_BM, n0 = blockIdx.y * GW_BN;
    const int KT_ALL = (K + GW_BK - 1) / GW_BK;
    const int KP = KT_ALL * GW_BK;  // the planes' row length (whole k tiles)
    // this block's k tiles: kt0 .. kt0 + KT - 1 (split K: share blockIdx.z of GW_SPLITK)
    const int kt0 = (int)blockIdx.z * KT_ALL / GW_SPLITK, KT = ((int)blockIdx.z + 1) * KT_ALL / GW_SPLITK - kt0;

    if (tid == 0) {
        for (int s = 0; s < GW_STAGES; ++s) {
            mbar_init(full(s), GW_PT);   // every producer thread's copies
            mbar_init(empty(s), GW_WG);  // one arrival per consumer warpgroup
        }
    }
    __syncthreads();

    if (wg == GW_WG) {
        // ---- producer ----
        const int pt = tid - 128 * GW_WG;  // producer thread 0 .. GW_PT - 1
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % GW_STAGES;
            if (kt >= GW_STAGES) mbar_wait(empty(s), ((kt / GW_STAGES) + 1) & 1);
            const unsigned st = ring + s * STAGE;
            const int k0 = (kt0 + kt) * GW_BK;
#pragma unroll
            for (int i = 0; i < GW_BM * 8 / GW_PT; ++i) {  // A rows m0.., 8 chunks each
                const int c = pt + GW_PT * i, r = c >> 3, ch = c & 7, k = k0 + 4 * ch;
                const bool ok = m0 + r < M && k < K;
                cp_async16_u32(st + gw_chunk_offset(r, ch), ok ? A + (long long)(m0 + r) * K + k : A, ok ? 16 : 0);
            }
#pragma unroll
            for (int i = 0; i < GW_BN * 8 / GW_PT; ++i) {  // planes' rows n0..
                const int c = pt + GW_PT * i, r = c >> 3, ch = c & 7, k = k0 + 4 * ch;
                const bool ok = n0 + r < N && k < KP;
                const float* src = ok ? P + (long long)(n0 + r) * KP + k : P;
                cp_async16_u32(st + A_BYTES + gw_chunk_offset(r, ch), src, ok ? 16 : 0);
                if (PLANES == 2)
                    cp_async16_u32(st + A_BYTES + B_BYTES + gw_chunk_offset(r, ch), ok ? src + (long long)N * KP : P,
                                   ok ? 16 : 0);
            }
            mbar_arrive_cp_async(full(s));
        }
        cp_async_wait<0>();
        return;
    }

    // ---- consumer warpgroup wg: rows m0 + 64 wg .. + 63 ----
    const int ct = tid & 127;
    float acc[NACC];
    float part[PASSES == 3 ? NACC : 1];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    // A's fragments straight from the stage into registers. The m64k8 register fragment of wgmma
    // (.tf32) gives thread (w, g = lane / 4, t = lane % 4) rows 16w + g (+ 8) at k positions t and
    // t + 4 of each k8 step; the planes hold, at position p = 8 kk + 4 e + t of a k tile, column
    // 8 t + 2 kk + e (gw_plane_col), so the thread's 8 values of a row (kk = 0..3, e = 0..1) are
    // A's columns 8t .. 8t + 7: two 16-byte loads per row (conflict-free under the swizzle).
    const int fr = (ct >> 5) * 16 + ((ct & 31) >> 2), ft = ct & 3;
    auto load_frags = [&](unsigned a_wg, unsigned (&hi)[4][4], unsigned (&lo)[4][4]) {
        float v[2][8];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int c = 0; c < 2; ++c)
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                             : "=f"(v[h][4 * c]), "=f"(v[h][4 * c + 1]), "=f"(v[h][4 * c + 2]), "=f"(v[h][4 * c + 3])
                             : "r"(a_wg + gw_chunk_offset(fr + 8 * h, 2 * ft + c)) : "memory");
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // fragment register h + 2e: row + 8h, position t + 4e
                    if (PASSES == 3)
                        split_tf32_fast(v[h][2 * kk + e], hi[kk][h + 2 * e], lo[kk][h + 2 * e]);
                    else
                        hi[kk][h + 2 * e] = tf32_rna_bits(v[h][2 * kk + e]);
                }
    };
    if constexpr (PASSES == 3) {
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % GW_STAGES;
            mbar_wait(full(s), (kt / GW_STAGES) & 1);
            fence_proxy_async_smem();
            const unsigned b_hi = ring + s * STAGE + A_BYTES, b_lo = b_hi + B_BYTES;
            unsigned hi[4][4], lo[4][4];
            load_frags(ring + s * STAGE + wg * 64 * GW_ROW, hi, lo);
            wgmma_fence();
            wgmma_pin(part);
#pragma unroll
            for (int k8 = 0; k8 < GW_BK / 8; ++k8) {
                const unsigned o = GW_K8_STEP * k8;
                wgmma_tf32_rs<GW_BN>(part, lo[k8], wgmma_desc(b_hi + o), k8 == 0 ? 0 : 1);  // lo * hi'
                wgmma_tf32_rs<GW_BN>(part, hi[k8], wgmma_desc(b_lo + o), 1);                // hi * lo'
                wgmma_tf32_rs<GW_BN>(part, hi[k8], wgmma_desc(b_hi + o), 1);                // hi * hi'
            }
            wgmma_commit();
            wgmma_wait<0>();  // the tile's products are in part; its slot is free (the wgmma is
                              // warpgroup-collective: all four warps have loaded their fragments)
            if (ct == 0) mbar_arrive(empty(s));
            wgmma_pin(part);
#pragma unroll
            for (int i = 0; i < NACC; ++i) acc[i] += part[i];
        }
    } else {
        // (Keeping one tile's wgmmas in flight while the next tile's fragments load, in a second
        // register set, made ptxas serialize every wgmma (C7513: it merged the two sets); the other
        // consumer's wgmmas fill the tensor core while this one loads.)
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % GW_STAGES;
            mbar_wait(full(s), (kt / GW_STAGES) & 1);
            fence_proxy_async_smem();
            unsigned f[4][4], unused[4][4];
            load_frags(ring + s * STAGE + wg * 64 * GW_ROW, f, unused);
            const unsigned b_hi = ring + s * STAGE + A_BYTES;
            wgmma_fence();
            wgmma_pin(acc);
#pragma unroll
            for (int k8 = 0; k8 < GW_BK / 8; ++k8)
                wgmma_tf32_rs<GW_BN>(acc, f[k8], wgmma_desc(b_hi + GW_K8_STEP * k8), 1);
            wgmma_commit();
            wgmma_wait<0>();  // the tile's wgmmas are done: its slot and the fragments are free
            if (ct == 0) mbar_arrive(empty(s));
        }
    }
    wgmma_wait<0>();
    wgmma_pin(acc);
    gemm_wg_epilogue<EPI>(acc, ring, bias, R, C, M, N, m0, n0, wg, ct);
}

// ---------------------------------------------------------------------------------------------
// The exported kernels: gemm_wg_<variant>_<epilogue>; B is the planes P [PLANES, N, KP].

#if GW_SPLITK > 1
#define GW_CLUSTER __cluster_dims__(1, 1, GW_SPLITK)
#else
#define GW_CLUSTER
#endif
#define GW_KERNEL(name, passes, epi)                                                               \
    extern "C" __global__ void __launch_bounds__(GW_THREADS, 1) GW_CLUSTER name(GEMM_PARAMS) {     \
        gemm_wg_body<passes, epi>(A, B, bias, R, C, M, N, K);                                      \
    }

#if GEMM_WITH_TF32X3
GW_KERNEL(gemm_wg_tf32x3_bias, 3, GEMM_EPI_BIAS)
GW_KERNEL(gemm_wg_tf32x3_bias_gelu, 3, GEMM_EPI_GELU)
GW_KERNEL(gemm_wg_tf32x3_bias_residual, 3, GEMM_EPI_RESIDUAL)
GW_KERNEL(gemm_wg_tf32x3_nt, 3, GEMM_EPI_NONE)
#endif

#if GEMM_WITH_TF32
GW_KERNEL(gemm_wg_tf32_bias, 1, GEMM_EPI_BIAS)
GW_KERNEL(gemm_wg_tf32_bias_gelu, 1, GEMM_EPI_GELU)
GW_KERNEL(gemm_wg_tf32_bias_residual, 1, GEMM_EPI_RESIDUAL)
GW_KERNEL(gemm_wg_tf32_nt, 1, GEMM_EPI_NONE)
#endif

// ---------------------------------------------------------------------------------------------
// The planes: P[0] = tf32 hi of W^T, P[1] = tf32 lo (planes == 2), [planes, N, KP], from
//   gemm_wg_split_planes_kn: W [K, N] (a block matrix as the checkpoint stores it), transposed here;
//   gemm_wg_split_planes_nk: W^T [N, K] already (wte for the LM head).
// KP = K rounded up to whole k tiles of 32 (zeros past K); position p of a k tile holds column
// gw_plane_col(p) of that tile (the order of A's register fragments, gemm_wg_body).
// Launch: block (32, 8), grid (ceil(N / GW_PLANES_N), ceil(K / 32)) for _kn (a block transposes a
// 32 x GW_PLANES_N tile of W), (ceil(N / 32), ceil(K / 32)) for _nk; any N, K (the GEMM needs
// K % 4 == 0).

// GW_PLANES_N: W's columns per block of _kn (64: 8 loads in flight per thread; 32: 4, slower, version 17).
static_assert(GW_PLANES_N % 32 == 0 && GW_PLANES_N >= 32 && GW_PLANES_N <= 128,
              "GW_PLANES_N must be 32, 64, 96 or 128 (a warp's 32 columns per load)");

// The k tile's column held at position p = 8 kk + 4 e + t: 8 t + 2 kk + e.
__device__ __forceinline__ int gw_plane_col(int p) {
    return 8 * (p & 3) + 2 * (p >> 3) + ((p >> 2) & 1);
}

__device__ __forceinline__ void gw_split_store(float* P, long long plane, long long idx, float x, int planes) {
    const unsigned h = tf32_rna_bits(x);
    P[idx] = __uint_as_float(h);
    if (planes == 2) P[plane + idx] = __uint_as_float(tf32_rna_bits(x - __uint_as_float(h)));
}

__device__ __forceinline__ int gw_plane_row(int K) { return (K + GW_BK - 1) / GW_BK * GW_BK; }

extern "C" __global__ void __launch_bounds__(256) gemm_wg_split_planes_kn(
    const float* __restrict__ W, float* __restrict__ P, int K, int N, int planes) {
    __shared__ float tile[32][GW_PLANES_N + 1];  // [k][n]: reads of a column tile[.][n] hit 32 banks
    const int n0 = blockIdx.x * GW_PLANES_N, k0 = blockIdx.y * 32, KP = gw_plane_row(K);
#pragma unroll
    for (int i = threadIdx.y; i < 32; i += 8) {  // read rows k0 + i, columns n0 + threadIdx.x + 32 j
#pragma unroll
        for (int j = 0; j < GW_PLANES_N / 32; ++j) {
            const int k = k0 + i, n = n0 + threadIdx.x + 32 * j;
            tile[i][threadIdx.x + 32 * j] = k < K && n < N ? W[(long long)k * N + n] : 0.0f;
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = threadIdx.y; i < GW_PLANES_N; i += 8) {  // write rows n0 + i, positions k0 + threadIdx.x
        const int n = n0 + i, p = k0 + threadIdx.x;
        if (n < N && p < KP)
            gw_split_store(P, (long long)N * KP, (long long)n * KP + p, tile[gw_plane_col(threadIdx.x)][i], planes);
    }
}

extern "C" __global__ void __launch_bounds__(256) gemm_wg_split_planes_nk(
    const float* __restrict__ W, float* __restrict__ P, int K, int N, int planes) {
    const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32, KP = gw_plane_row(K);
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int n = n0 + i, p = k0 + threadIdx.x, k = k0 + gw_plane_col(threadIdx.x);
        if (n < N && p < KP)
            gw_split_store(P, (long long)N * KP, (long long)n * KP + p, k < K ? W[(long long)n * K + k] : 0.0f,
                           planes);
    }
}

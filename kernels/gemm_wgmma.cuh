// gemm_wgmma.cuh: the body of gemm_wgmma.cu's GEMMs on a tile given as a type (GwTile), and the weight
// planes kernels: gemm_wgmma.cu instantiates the tile of its build parameters (one NVRTC module per
// tile, for the engine). How the kernels work, the planes' layout and the launch recipes:
// gemm_wgmma.cu's header. sm_90a only (wgmma.cuh); device code only.
#pragma once
#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"
#include "wgmma.cuh"

// GW_PLANES_N (build.py): W's columns per block of gemm_wg_split_planes_kn (below).
#ifndef GW_PLANES_N
#error "GW_PLANES_N is set by gpt2block/backends/cuda/build.py"
#endif
#define GW_BK 32                          // k tile: one 128-byte row of floats
#define GW_PT 128                          // producer threads: one warpgroup (one warp measured 30% slower)

// A block of WG consumer warpgroups (64 rows of C each) x BN columns, STAGES ring slots, SPLITK blocks
// (a cluster) sharing one output tile, each 1/SPLITK of K.
template <int WG_, int BN_, int STAGES_, int SPLITK_>
struct GwTile {
    static constexpr int WG = WG_, BN = BN_, STAGES = STAGES_, SPLITK = SPLITK_;
    static constexpr int BM = 64 * WG;
    static constexpr int THREADS = 128 * WG + GW_PT;  // consumers, then the producer
    static constexpr int EPI_STRIDE = BN + 8;         // the epilogue's tile (below)
    static constexpr int EPI_BYTES = BM * EPI_STRIDE * 4;
    __host__ __device__ static constexpr unsigned stage_bytes(int planes) { return (BM + planes * BN) * GW_ROW; }
    // the dynamic shared memory of a launch: the ring, its barriers, 1024 bytes of alignment
    __host__ __device__ static constexpr unsigned smem_bytes(int planes) { return STAGES * stage_bytes(planes) + 16 * STAGES + 1024; }
};

// ---------------------------------------------------------------------------------------------

// The epilogue, through shared memory. The consumers write their accumulators into the (now idle)
// ring as a row-major BM x BN tile of stride EPI_STRIDE floats, then all their threads walk
// its rows a float4 at a time in a loop: bias (and the residual) read as float4, whole rows of C
// written. (Version 18 applied the epilogue to the fragments in place, unrolled: 96 outputs a thread
// at 192 columns, each with its own bias load, about 6,000 instructions executed once per warp;
// Nsight Compute put half of the fc GEMM's warp samples there, more than in its main loop.)
// Split K (SPLITK > 1): the blocks of a cluster hold partial sums of one tile; after a cluster
// barrier block z reduces rows [z BM / S, (z + 1) BM / S) of it, reading every block's tile
// through distributed shared memory and adding them in rank order (deterministic), and a second
// barrier keeps each block's shared memory alive until the others have read it.
// Stride BN + 8 (== 8 mod 32 words, or 24 at 48 columns): a half-warp's float2 stores of rows
// g = 0..3 fall in distinct 8-bank groups, and a quarter-warp's float4 reads of a row are contiguous
// (at 48 columns a row is 12 float4, so one quarter-warp in three straddles two rows: 2-way conflicts).
// The second cluster barrier's release also waits for this block's global stores (MEMBAR.GPU in the
// SASS); a relaxed arrive would need the DSMEM loads known complete, and was not tried.

__device__ __forceinline__ void gw_cluster_sync() {
    __syncwarp();
    GW_ASM("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The tile's float4 at shared address a: this block's, or (split K) the sum of the cluster's
// blocks' in rank order.
template <class T>
__device__ __forceinline__ float4 gw_epi_load(unsigned a) {
    float4 v;
    if constexpr (T::SPLITK > 1) {
#pragma unroll
        for (int q = 0; q < T::SPLITK; ++q) {
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
    } else {
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(a) : "memory");
    }
    return v;
}

template <class T, int EPI>
__device__ __forceinline__ void gemm_wg_epilogue(const float (&acc)[T::BN / 2], unsigned ring,
                                                 const float* __restrict__ bias, const float* R, float* C,
                                                 int M, int N, int m0, int n0, int wg, int ct, int epi) {
    const int e = gemm_epi<EPI>(epi);
    // This consumer's wgmmas are done, the other's may still be reading the ring's last stage: the
    // consumers' threads meet at named barrier 1 before the ring is overwritten.
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * T::WG) : "memory");
    // Accumulator layout (m64nNk8, f32): warp w of the warpgroup holds rows 16w + g and 16w + g + 8
    // (g = lane / 4); acc[4j + 2h + e] is (row 16w + g + 8h, column 8j + 2t + e), t = lane % 4.
    const int lane = ct & 31, w = ct >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < T::BN / 8; ++j)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n"
                         ::"r"(ring + 4u * ((64 * wg + 16 * w + g + 8 * h) * T::EPI_STRIDE + 8 * j + 2 * t)),
                         "f"(acc[4 * j + 2 * h]), "f"(acc[4 * j + 2 * h + 1]) : "memory");
    int r0 = 0, r1 = T::BM;
    if constexpr (T::SPLITK > 1) {
        gw_cluster_sync();  // every block's tile is written
        r0 = blockIdx.z * T::BM / T::SPLITK;
        r1 = (blockIdx.z + 1) * T::BM / T::SPLITK;
    } else {
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * T::WG) : "memory");  // the tile is written
    }

    // Row r of the tile, float4 c4: C[m0 + r, n0 + 4 c4 ..]. float4 stores where N % 4 == 0 and C,
    // R and bias are 16-byte aligned; element by element otherwise (and past N).
    constexpr int V = T::BN / 4;
    const bool vec = (N & 3) == 0 && gemm_aligned(C, 16) && gemm_aligned(bias, 16) &&
                     (e != GEMM_EPI_RESIDUAL || gemm_aligned(R, 16));
    const int end = min(r1, M - m0) * V;
#pragma unroll 2
    for (int i = r0 * V + 128 * wg + ct; i < end; i += 128 * T::WG) {
        const int r = i / V, c4 = i - r * V;
        const int row = m0 + r, col = n0 + 4 * c4;
        float4 v = gw_epi_load<T>(ring + 4u * (r * T::EPI_STRIDE + 4 * c4));
        const long long idx = (long long)row * N + col;
        if (vec && col + 3 < N) {
            if (e != GEMM_EPI_NONE) {
                const float4 b = __ldg(reinterpret_cast<const float4*>(bias + col));
                v.x += b.x; v.y += b.y; v.z += b.z; v.w += b.w;
            }
            if (e == GEMM_EPI_GELU) {
                v.x = gelu_tanh(v.x); v.y = gelu_tanh(v.y); v.z = gelu_tanh(v.z); v.w = gelu_tanh(v.w);
            }
            if (e == GEMM_EPI_RESIDUAL) {
                const float4 q = *reinterpret_cast<const float4*>(R + idx);
                v.x += q.x; v.y += q.y; v.z += q.z; v.w += q.w;
            }
            *reinterpret_cast<float4*>(C + idx) = v;
        } else {
            const float ev[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (col + k < N) C[idx + k] = gemm_epi_value<EPI>(ev[k], bias, R, idx + k, col + k, e);
        }
    }
    if constexpr (T::SPLITK > 1) gw_cluster_sync();  // the other blocks have read this one's tile
}

// EPI: a GEMM_EPI_* (gemm_epilogue.cuh); GEMM_EPI_RUNTIME: the run-time epi.
template <class T, int PASSES, int EPI>
__device__ __forceinline__ void gemm_wg_body(const float* __restrict__ A, const float* __restrict__ P,
                                             const float* __restrict__ bias, const float* R, float* C, int M,
                                             int N, int K, int epi = EPI) {
    constexpr int PLANES = PASSES == 3 ? 2 : 1;
    constexpr int NACC = T::BN / 2;  // accumulators per thread (m64 x T::BN / 128)
    constexpr unsigned STAGE = T::stage_bytes(PLANES), A_BYTES = T::BM * GW_ROW, B_BYTES = T::BN * GW_ROW;
    static_assert(T::BN == 48 || T::BN == 64 || T::BN == 128 || T::BN == 192, "T::BN must be 48, 64, 128 or 192");
    static_assert(T::WG == 1 || T::WG == 2, "T::WG must be 1 or 2");
    static_assert(T::SPLITK >= 1 && T::SPLITK <= 4, "T::SPLITK must be 1 to 4 (a cluster's blocks)");
    static_assert(T::STAGES * STAGE >= T::EPI_BYTES, "the epilogue's tile must fit in the ring");

    extern __shared__ float4 gw_smem4[];
    const unsigned raw = smem_u32(gw_smem4);
    const unsigned ring = raw + ((1024u - (raw & 1023u)) & 1023u);  // stages, from a 1024-byte boundary
    const unsigned bars = ring + T::STAGES * STAGE;                   // full[T::STAGES], empty[T::STAGES]
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (T::STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.x * T::BM, n0 = blockIdx.y * T::BN;
    const int KT_ALL = (K + GW_BK - 1) / GW_BK;
    const int KP = KT_ALL * GW_BK;  // the planes' row length (whole k tiles)
    // this block's k tiles: kt0 .. kt0 + KT - 1 (split K: share blockIdx.z of SPLITK)
    const int kt0 = (int)blockIdx.z * KT_ALL / T::SPLITK, KT = ((int)blockIdx.z + 1) * KT_ALL / T::SPLITK - kt0;

    if (tid == 0) {
        for (int s = 0; s < T::STAGES; ++s) {
            mbar_init(full(s), GW_PT);   // every producer thread's copies
            mbar_init(empty(s), T::WG);  // one arrival per consumer warpgroup
        }
    }
    __syncthreads();

    if (wg == T::WG) {
        // ---- producer ----
        const int pt = tid - 128 * T::WG;  // producer thread 0 .. GW_PT - 1
        for (int kt = 0; kt < KT; ++kt) {
            const int s = kt % T::STAGES;
            if (kt >= T::STAGES) mbar_wait(empty(s), ((kt / T::STAGES) + 1) & 1);
            const unsigned st = ring + s * STAGE;
            const int k0 = (kt0 + kt) * GW_BK;
#pragma unroll
            for (int i = 0; i < T::BM * 8 / GW_PT; ++i) {  // A rows m0.., 8 chunks each
                const int c = pt + GW_PT * i, r = c >> 3, ch = c & 7, k = k0 + 4 * ch;
                const bool ok = m0 + r < M && k < K;
                cp_async16_u32(st + gw_chunk_offset(r, ch), ok ? A + (long long)(m0 + r) * K + k : A, ok ? 16 : 0);
            }
#pragma unroll
            for (int i = 0; i < T::BN * 8 / GW_PT; ++i) {  // planes' rows n0..
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
            const int s = kt % T::STAGES;
            mbar_wait(full(s), (kt / T::STAGES) & 1);
            fence_proxy_async_smem();
            const unsigned b_hi = ring + s * STAGE + A_BYTES, b_lo = b_hi + B_BYTES;
            unsigned hi[4][4], lo[4][4];
            load_frags(ring + s * STAGE + wg * 64 * GW_ROW, hi, lo);
            wgmma_fence();
            wgmma_pin(part);
#pragma unroll
            for (int k8 = 0; k8 < GW_BK / 8; ++k8) {
                const unsigned o = GW_K8_STEP * k8;
                wgmma_tf32_rs<T::BN>(part, lo[k8], wgmma_desc(b_hi + o), k8 == 0 ? 0 : 1);  // lo * hi'
                wgmma_tf32_rs<T::BN>(part, hi[k8], wgmma_desc(b_lo + o), 1);                // hi * lo'
                wgmma_tf32_rs<T::BN>(part, hi[k8], wgmma_desc(b_hi + o), 1);                // hi * hi'
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
            const int s = kt % T::STAGES;
            mbar_wait(full(s), (kt / T::STAGES) & 1);
            fence_proxy_async_smem();
            unsigned f[4][4], unused[4][4];
            load_frags(ring + s * STAGE + wg * 64 * GW_ROW, f, unused);
            const unsigned b_hi = ring + s * STAGE + A_BYTES;
            wgmma_fence();
            wgmma_pin(acc);
#pragma unroll
            for (int k8 = 0; k8 < GW_BK / 8; ++k8)
                wgmma_tf32_rs<T::BN>(acc, f[k8], wgmma_desc(b_hi + GW_K8_STEP * k8), 1);
            wgmma_commit();
            wgmma_wait<0>();  // the tile's wgmmas are done: its slot and the fragments are free
            if (ct == 0) mbar_arrive(empty(s));
        }
    }
    wgmma_wait<0>();
    wgmma_pin(acc);
    gemm_wg_epilogue<T, EPI>(acc, ring, bias, R, C, M, N, m0, n0, wg, ct, epi);
}

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

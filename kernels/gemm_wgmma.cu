// gemm_wgmma.cu: the GEMMs of gemm.cu (same parameters and results, names gemm_wg_*) on Hopper's
// warpgroup tensor-core instruction, wgmma (sm_90a only: NVRTC or nvcc with -arch=sm_90a).
//
//   C[M,N] = epilogue(A[M,K] @ B[K,N] + bias[N])     gemm_wg_<variant>_<bias | bias_gelu | bias_residual>
//   C[M,N] = A[M,K] @ B[N,K]^T                         gemm_wg_<variant>_nt
// variant: tf32x3 (each operand split x = hi + lo into tf32 parts, lo*hi' + hi*lo' + hi*hi': fp32-level
// accuracy) or tf32 (one pass). Any M, N, K >= 1; deterministic.
//
// What the engine runs of it: gemm_wg_tf32x3_nt, the fp32-mode LM head over the whole vocabulary on
// sm_90 (cuda_linear.gemm_nt, K >= 256 and N >= 8192). Everything else stays on gemm.cu's mma.sync
// kernels, which this version does not beat (scripts/check_wgmma.py; docs/PERFORMANCE.md, version 6).
//
// How a block works (GW_WG warpgroups of 128 threads; block tile GW_BM = 64 * GW_WG rows x GW_BN
// columns; each warpgroup owns 64 rows and all GW_BN columns, one m64nGW_BNk8 wgmma per k8 step):
//   1. each k tile (GW_BK = 32 deep) of A and B is read from global memory into registers two
//      tiles ahead of its multiplication (two register sets);
//   2. the loading thread rounds every element to tf32 (hi) and, for tf32x3, rounds its remainder
//      (lo), and stores them into shared-memory "planes" in wgmma's k-major 128-byte-swizzle layout
//      (B transposed to [n][k] on the way when it is [K, N] in memory): tf32 wgmma reads only
//      k-major operands, and each element is split once, by one thread;
//   3. the warpgroups issue the tile's wgmmas on descriptors of the planes. tf32x3 sums the tile's
//      12 products (4 k8 steps x 3 passes) in the tensor core from zero (part), waits, and adds part
//      to the fp32 accumulators with round-to-nearest FADDs: the tensor core's own accumulation
//      truncates, and summing all of K in it measured 95-125x torch fp32's error at K = 768-3072.
//      tf32 accumulates in the tensor core and keeps one tile's wgmmas in flight across the barrier.
// Two plane buffers: tile kt + 1 is stored into one while wgmmas read tile kt from the other.
//
// Launch recipe: grid (ceil(M / GW_BM), ceil(N / GW_BN)), block GW_THREADS = 128 * GW_WG,
//   dynamic shared memory GW_SMEM_BYTES(planes) = 2 * planes * (GW_BM + GW_BN) * GW_BK * 4 + 1024
//   (planes = 2 for tf32x3, 1 for tf32; the 1024 aligns the swizzle atoms): 132096 bytes at
//   128 x 128 tf32x3.

#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"

#ifndef GW_WG
#define GW_WG 2      // warpgroups per block (block rows = 64 per warpgroup)
#endif
#ifndef GW_BN
#define GW_BN 128    // block columns: 64 or 128 (the wgmma's N)
#endif
#define GW_BM (64 * GW_WG)
#define GW_BK 32
#define GW_THREADS (128 * GW_WG)
#define GW_PLANE_FLOATS ((GW_BM + GW_BN) * GW_BK)  // one plane: A's GW_BM rows, then B's GW_BN rows
#define GW_SMEM_BYTES(planes) (2 * (planes) * GW_PLANE_FLOATS * 4 + 1024)  // + room to align to 1024

// ---------------------------------------------------------------------------------------------
// wgmma and its ordering instructions (PTX ISA, "Asynchronous Warpgroup Level Matrix" instructions).
// They exist only on the sm_90a target (__CUDA_ARCH_FEAT_SM90_ALL). Built for any other target (a
// plain `nvcc -arch=sm_90` over kernels/*.cu), the file still compiles and its kernels trap; the
// engine loads it only with -arch=sm_90a (kernel_source.ARCH_SPECIFIC) and only on sm_90 devices.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GW_WGMMA_ASM(...) __trap()
#else
#define GW_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#endif

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), k-major operand in the
// 128-byte swizzle layout (type 1 in bits 62-63): each 8-row group is one 1024-byte atom of 128-byte
// rows (GW_BK = 32 floats) whose 16-byte chunks are XOR-permuted by row % 8. Start address, SBO =
// 1024 bytes between atoms (8-row groups) in bits 32-45, LBO unused for this layout (1), all >> 4.
// The atoms must start on 1024-byte boundaries; a k8 step moves the start 32 bytes along the row
// (the hardware applies the XOR to the address it forms).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned smem_addr) {
    constexpr unsigned long long LBO = 16, SBO = 8 * GW_BK * 4;
    return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32) |
           (1ull << 62);
}
#define GW_K8_STEP 32u  // bytes: 8 tf32 along a row

__device__ __forceinline__ void wgmma_fence() { GW_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { GW_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { GW_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Ordinary shared-memory stores become visible to the async proxy (wgmma's operand reads) only
// through this fence, executed by each writing thread before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
    GW_WGMMA_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous wgmma's issue and its wait.
template <int N>
__device__ __forceinline__ void wgmma_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[32] (+)= A[64 x 8] * B[8 x 64] from the descriptors' shared-memory tiles; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_m64n64k8(float (&d)[32], unsigned long long a_desc,
                                                   unsigned long long b_desc, int scale_d) {
    GW_WGMMA_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,\n"
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// d[64] (+)= A[64 x 8] * B[8 x 128] from the descriptors' shared-memory tiles; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_m64n128k8(float (&d)[64], unsigned long long a_desc,
                                                   unsigned long long b_desc, int scale_d) {
    GW_WGMMA_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,\n"
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,\n"
        "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,\n"
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
          "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void wgmma_tf32(float (&d)[N / 2], unsigned long long a, unsigned long long b, int scale_d);
template <>
__device__ __forceinline__ void wgmma_tf32<64>(float (&d)[32], unsigned long long a, unsigned long long b, int s) {
    wgmma_tf32_m64n64k8(d, a, b, s);
}
template <>
__device__ __forceinline__ void wgmma_tf32<128>(float (&d)[64], unsigned long long a, unsigned long long b, int s) {
    wgmma_tf32_m64n128k8(d, a, b, s);
}

// ---------------------------------------------------------------------------------------------
// Global loads (zeros outside the matrix) and the split.

// 16 bytes of row-major G [nrows, K] at (row, k): A, B [N, K] (nt) and B [K, N] alike; vec: K % 4 == 0
// and G 16-byte aligned.
__device__ __forceinline__ float4 gw_load4(const float* G, int row, int nrows, int k, int K, bool vec) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row >= nrows) return v;
    const float* p = G + (long long)row * K + k;
    if (vec) {
        if (k < K) v = *reinterpret_cast<const float4*>(p);
    } else {
        if (k < K) v.x = p[0];
        if (k + 1 < K) v.y = p[1];
        if (k + 2 < K) v.z = p[2];
        if (k + 3 < K) v.w = p[3];
    }
    return v;
}

// Plane offset (floats) of element (r, k) of a tile: atom r / 8, row r % 8 (128 bytes), 16-byte chunk
// (k / 4) XOR (r % 8), word k % 4.
__device__ __forceinline__ int gw_core_offset(int r, int k) {
    return (r >> 3) * (8 * GW_BK) + (r & 7) * GW_BK + ((((k >> 2) ^ r) & 7) << 2) + (k & 3);
}

template <int PASSES>
__device__ __forceinline__ void gw_put(float* hi_plane, int off, float x) {
    unsigned* p = reinterpret_cast<unsigned*>(hi_plane) + off;
    const unsigned h = tf32_rna_bits(x);
    p[0] = h;
    if (PASSES == 3) p[GW_PLANE_FLOATS] = tf32_rna_bits(x - __uint_as_float(h));
}

template <int PASSES>
__device__ __forceinline__ void gw_put4(float* hi_plane, int off, float4 v) {  // off: 16-byte aligned
    const uint4 h = make_uint4(tf32_rna_bits(v.x), tf32_rna_bits(v.y), tf32_rna_bits(v.z), tf32_rna_bits(v.w));
    *reinterpret_cast<uint4*>(hi_plane + off) = h;
    if (PASSES == 3)
        *reinterpret_cast<uint4*>(hi_plane + GW_PLANE_FLOATS + off) =
            make_uint4(tf32_rna_bits(v.x - __uint_as_float(h.x)), tf32_rna_bits(v.y - __uint_as_float(h.y)),
                       tf32_rna_bits(v.z - __uint_as_float(h.z)), tf32_rna_bits(v.w - __uint_as_float(h.w)));
}

// ---------------------------------------------------------------------------------------------

template <int PASSES, int EPI, bool NT>
__device__ __forceinline__ void gemm_wg_body(const float* __restrict__ A, const float* __restrict__ B,
                                             const float* __restrict__ bias, const float* R, float* C, int M,
                                             int N, int K) {
    constexpr int PLANES = PASSES == 3 ? 2 : 1;
    constexpr int NACC = GW_BN / 2;                       // accumulators per thread (m64 x GW_BN / 128)
    constexpr int A4 = GW_BM * (GW_BK / 4) / GW_THREADS;  // A float4s per thread per k tile (4)
    constexpr int B4 = GW_BN * (GW_BK / 4) / GW_THREADS;  // B float4s per thread per k tile
    static_assert(GW_BN == 64 || GW_BN == 128, "GW_BN must be 64 or 128");
    static_assert(A4 * GW_THREADS == GW_BM * (GW_BK / 4), "A tile must divide among threads");

    extern __shared__ float4 gw_smem4[];
    // [2 buffers][PLANES][GW_BM + GW_BN rows x GW_BK], from the first 1024-byte boundary (swizzle atoms)
    float* smem = reinterpret_cast<float*>(gw_smem4) + ((1024u - (smem_u32(gw_smem4) & 1023u)) & 1023u) / 4;

    const int m0 = blockIdx.x * GW_BM, n0 = blockIdx.y * GW_BN;
    const int tid = threadIdx.x, wg = tid >> 7;
    const bool a_vec = (K & 3) == 0 && gemm_aligned(A, 16);
    const bool b_vec = NT ? ((K & 3) == 0 && gemm_aligned(B, 16)) : ((N & 3) == 0 && gemm_aligned(B, 16));
    const int KT = (K + GW_BK - 1) / GW_BK;

    // Thread -> chunk maps. k-contiguous tiles: 8 consecutive threads take rows r..r+7 of one 16-byte
    // k chunk: their 16-byte stores (chunk XOR row % 8) hit 8 different bank groups, and a warp reads
    // 64 contiguous bytes of each of 8 rows. B [K, N] (16 bytes = 4 columns n4*4.. of row k): a warp
    // reads 128 contiguous bytes of 4 rows; a transposing 4-byte store lands in bank
    // ((k / 4) XOR (n % 8)) * 4 + k % 4, and for all 32 lanes to differ, lane pairs with
    // rot = (n4 / 2) % 4 store their 4 values in the order rot, rot + 1, ... (mod 4).
    struct Regs {  // one k tile's share of this thread, as loaded
        float4 a[A4], b[B4];
    };
    Regs r0, r1;  // tile j is in flight in r(j % 2): loads run a whole iteration ahead of their use
    auto kmajor_row = [](int c) { return (c >> 6) * 8 + (c & 7); };
    auto kmajor_k = [](int c) { return ((c >> 3) & 7) * 4; };
    auto nn_n4 = [](int c) { return (c >> 2) % (GW_BN / 4); };   // 4-column chunk
    auto nn_k = [](int c) { return (c / GW_BN) * 4 + (c & 3); };  // row of B within the tile

    auto load_tile = [&](Regs& r, int kt) {
        const int k0 = kt * GW_BK;
#pragma unroll
        for (int i = 0; i < A4; ++i) {
            const int c = tid + i * GW_THREADS;
            r.a[i] = gw_load4(A, m0 + kmajor_row(c), M, k0 + kmajor_k(c), K, a_vec);
        }
#pragma unroll
        for (int i = 0; i < B4; ++i) {
            const int c = tid + i * GW_THREADS;
            if (NT) {
                r.b[i] = gw_load4(B, n0 + kmajor_row(c), N, k0 + kmajor_k(c), K, b_vec);
            } else {
                r.b[i] = gw_load4(B, k0 + nn_k(c), K, n0 + nn_n4(c) * 4, N, b_vec);  // B [K, N]: row k, column n
            }
        }
    };
    auto store_tile = [&](const Regs& r, int buf) {
        float* a_plane = smem + buf * (PLANES * GW_PLANE_FLOATS);
        float* b_plane = a_plane + GW_BM * GW_BK;
#pragma unroll
        for (int i = 0; i < A4; ++i) {
            const int c = tid + i * GW_THREADS;
            gw_put4<PASSES>(a_plane, gw_core_offset(kmajor_row(c), kmajor_k(c)), r.a[i]);
        }
#pragma unroll
        for (int i = 0; i < B4; ++i) {
            const int c = tid + i * GW_THREADS;
            if (NT) {
                gw_put4<PASSES>(b_plane, gw_core_offset(kmajor_row(c), kmajor_k(c)), r.b[i]);
            } else {
                const int k = nn_k(c), n4 = nn_n4(c), rot = (n4 >> 1) & 3;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int j = (e + rot) & 3;
                    const float x = j == 0 ? r.b[i].x : j == 1 ? r.b[i].y : j == 2 ? r.b[i].z : r.b[i].w;
                    gw_put<PASSES>(b_plane, gw_core_offset(n4 * 4 + j, k), x);
                }
            }
        }
        fence_proxy_async_smem();
    };

    const unsigned smem0 = smem_u32(smem);
    constexpr unsigned LO = 4u * GW_PLANE_FLOATS;            // hi plane -> lo plane (bytes)
    constexpr unsigned BUF = 4u * PLANES * GW_PLANE_FLOATS;  // buffer 0 -> buffer 1
    const unsigned a_base = smem0 + 4u * (wg * 64 * GW_BK);  // this warpgroup's 64 rows of A
    const unsigned b_base = smem0 + 4u * (GW_BM * GW_BK);

    float acc[NACC];
    float part[PASSES == 3 ? NACC : 1];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

    // Iteration kt: wgmmas on tile kt (buffer kt % 2); meanwhile tile kt + 1, loaded during the
    // previous iteration, is split into the other buffer, and tile kt + 2 is loaded.
    constexpr bool PIPELINED = PASSES == 1;  // acc is the only wgmma target: no drain per tile
    auto iteration = [&](int kt, const Regs& next, Regs& after) {
        const unsigned buf = (kt & 1) ? BUF : 0u;
        wgmma_fence();
        if constexpr (!PIPELINED) {
            wgmma_pin(part);
#pragma unroll
            for (int s = 0; s < GW_BK / 8; ++s) {  // k8 step s
                const unsigned ka = a_base + buf + GW_K8_STEP * s, kb = b_base + buf + GW_K8_STEP * s;
                wgmma_tf32<GW_BN>(part, wgmma_desc(ka + LO), wgmma_desc(kb), s == 0 ? 0 : 1);  // lo * hi'
                wgmma_tf32<GW_BN>(part, wgmma_desc(ka), wgmma_desc(kb + LO), 1);               // hi * lo'
                wgmma_tf32<GW_BN>(part, wgmma_desc(ka), wgmma_desc(kb), 1);                    // hi * hi'
            }
        } else {
            wgmma_pin(acc);
#pragma unroll
            for (int s = 0; s < GW_BK / 8; ++s) {
                const unsigned ka = a_base + buf + GW_K8_STEP * s, kb = b_base + buf + GW_K8_STEP * s;
                wgmma_tf32<GW_BN>(acc, wgmma_desc(ka), wgmma_desc(kb), 1);
            }
        }
        wgmma_commit();
        if constexpr (PIPELINED) wgmma_wait<1>();  // tile kt - 1's wgmmas are done: its buffer is free
        else wgmma_wait<0>();
        if (kt + 1 < KT) store_tile(next, (kt + 1) & 1);
        if (kt + 2 < KT) load_tile(after, kt + 2);
        if constexpr (!PIPELINED) {
            wgmma_pin(part);
#pragma unroll
            for (int i = 0; i < NACC; ++i) acc[i] += part[i];
        }
        __syncthreads();
    };

    load_tile(r0, 0);
    store_tile(r0, 0);
    if (KT > 1) load_tile(r1, 1);
    __syncthreads();
    for (int kt = 0; kt < KT; kt += 2) {
        iteration(kt, r1, r0);
        if (kt + 1 < KT) iteration(kt + 1, r0, r1);
    }
    wgmma_wait<0>();
    wgmma_pin(acc);

    // Accumulator layout (m64nNk8, f32): warp w of the warpgroup holds rows 16w + g and 16w + g + 8
    // (g = lane / 4); acc[4j + 2h + e] is (row 16w + g + 8h, column 8j + 2t + e), t = lane % 4.
    const int lane = tid & 31, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const bool pair = (N & 1) == 0 && gemm_aligned(C, 8) && (EPI != GEMM_EPI_RESIDUAL || gemm_aligned(R, 8));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + wg * 64 + w * 16 + g + 8 * h;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < GW_BN / 8; ++j) {
            const int col = n0 + 8 * j + 2 * t;
            gemm_store2<EPI>(C, bias, R, row, col, N, pair, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The exported kernels: gemm_wg_<variant>_<epilogue>.

#define GW_KERNEL(name, passes, epi, nt)                                                           \
    extern "C" __global__ void __launch_bounds__(GW_THREADS) name(GEMM_PARAMS) {                   \
        gemm_wg_body<passes, epi, nt>(A, B, bias, R, C, M, N, K);                                  \
    }

#if GEMM_WITH_TF32X3
GW_KERNEL(gemm_wg_tf32x3_bias, 3, GEMM_EPI_BIAS, false)
GW_KERNEL(gemm_wg_tf32x3_bias_gelu, 3, GEMM_EPI_GELU, false)
GW_KERNEL(gemm_wg_tf32x3_bias_residual, 3, GEMM_EPI_RESIDUAL, false)
GW_KERNEL(gemm_wg_tf32x3_nt, 3, GEMM_EPI_NONE, true)
#endif

#if GEMM_WITH_TF32
GW_KERNEL(gemm_wg_tf32_bias, 1, GEMM_EPI_BIAS, false)
GW_KERNEL(gemm_wg_tf32_bias_gelu, 1, GEMM_EPI_GELU, false)
GW_KERNEL(gemm_wg_tf32_bias_residual, 1, GEMM_EPI_RESIDUAL, false)
GW_KERNEL(gemm_wg_tf32_nt, 1, GEMM_EPI_NONE, true)
#endif

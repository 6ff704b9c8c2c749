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
// Requires K % 4 == 0 and A, P 16-byte aligned (cuda_linear sends other products to gemm.cu).
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
// Launch recipe (cuda_linear.gemm_planes): grid (ceil(M / GW_BM), ceil(N / GW_BN)), block
// GW_THREADS = 128 * (GW_WG + 1), dynamic shared memory GW_SMEM_BYTES(planes) (cuda_linear.wgmma_stages
// picks the most stages, up to 8, that fit one block per SM).

#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"

#ifndef GW_WG
#define GW_WG 2  // consumer warpgroups: block rows = 64 * GW_WG
#endif
#ifndef GW_BN
#define GW_BN 128  // block columns: 48, 64, 128 or 192 (the wgmma's N; 192 for tf32 only: with
                   // tf32x3's part registers two consumers spill at ptxas' 168-register cap of a
                   // 384-thread block)
#endif
#ifndef GW_STAGES
#define GW_STAGES 4  // ring slots
#endif
#define GW_BM (64 * GW_WG)
#define GW_BK 32                          // k tile: one 128-byte row of floats
#define GW_PT 128                          // producer threads: one warpgroup (one warp measured 30% slower)
#define GW_THREADS (128 * GW_WG + GW_PT)   // consumers, then the producer
#define GW_ROW 128                        // bytes per tile row
#define GW_STAGE_BYTES(planes) ((GW_BM + (planes) * GW_BN) * GW_ROW)
#define GW_SMEM_BYTES(planes) \
    (GW_STAGES * GW_STAGE_BYTES(planes) + 16 * GW_STAGES + 1024)

// ---------------------------------------------------------------------------------------------
// wgmma and the async proxy exist only on the sm_90a target (__CUDA_ARCH_FEAT_SM90_ALL).
// Built for any other target (a plain `nvcc -arch=sm_90` over kernels/*.cu) the file still compiles
// and its GEMM kernels trap; the engine loads it with -arch=sm_90a (kernel_source.ARCH_SPECIFIC).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GW_ASM(...) __trap()
#else
#define GW_ASM(...) asm volatile(__VA_ARGS__)
#endif

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") of a k-major operand in
// the 128-byte swizzle layout (type 1, bits 62-63): each 8-row group is one 1024-byte atom of
// 128-byte rows whose 16-byte chunks are XOR-permuted by row % 8. Start address, LBO (unused by
// this layout: 1), SBO = 1024 bytes between 8-row groups, all >> 4. Atoms start on 1024-byte
// boundaries; a k8 step moves the start 32 bytes along the row (the hardware applies the XOR).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned smem_addr) {
    constexpr unsigned long long LBO = 16, SBO = 8 * GW_ROW;
    return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32) |
           (1ull << 62);
}
#define GW_K8_STEP 32u  // bytes: 8 tf32 along a row

// Byte offset of 16-byte chunk `ch` (0..7) of tile row r in the swizzled layout.
__device__ __forceinline__ unsigned gw_chunk_offset(int r, int ch) {
    return (unsigned)(r * GW_ROW + ((ch ^ (r & 7)) << 4));
}

__device__ __forceinline__ void wgmma_fence() { GW_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { GW_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { GW_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Generic-proxy shared-memory writes (cp.async's copies) made visible to the async proxy (wgmma's
// operand reads); each consumer thread runs it after its wait on the stage's full barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
    GW_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous wgmma's issue and its wait.
template <int N>
__device__ __forceinline__ void wgmma_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[24] (+)= A[64 x 8] * B[8 x 48], A from registers (a: this thread's m64k8 fragment, see
// gemm_wg_body), B from its descriptor's shared-memory tile; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_rs_m64n48k8(float (&d)[24], const unsigned (&a)[4],
                                                     unsigned long long b_desc, int scale_d) {
    GW_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n48k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "%16, %17, %18, %19, %20, %21, %22, %23"
        "}, {%24, %25, %26, %27}, %28, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

// d[32] (+)= A[64 x 8] * B[8 x 64], A from registers (a: this thread's m64k8 fragment, see
// gemm_wg_body), B from its descriptor's shared-memory tile; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_rs_m64n64k8(float (&d)[32], const unsigned (&a)[4],
                                                     unsigned long long b_desc, int scale_d) {
    GW_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

// d[64] (+)= A[64 x 8] * B[8 x 128], A from registers (a: this thread's m64k8 fragment, see
// gemm_wg_body), B from its descriptor's shared-memory tile; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_rs_m64n128k8(float (&d)[64], const unsigned (&a)[4],
                                                     unsigned long long b_desc, int scale_d) {
    GW_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

// d[96] (+)= A[64 x 8] * B[8 x 192], A from registers (a: this thread's m64k8 fragment, see
// gemm_wg_body), B from its descriptor's shared-memory tile; scale_d 0 ignores d.
__device__ __forceinline__ void wgmma_tf32_rs_m64n192k8(float (&d)[96], const unsigned (&a)[4],
                                                     unsigned long long b_desc, int scale_d) {
    GW_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, {%96, %97, %98, %99}, %100, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
          "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
          "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
          "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, int scale_d);
template <>
__device__ __forceinline__ void wgmma_tf32_rs<48>(float (&d)[24], const unsigned (&a)[4], unsigned long long b, int s) {
    wgmma_tf32_rs_m64n48k8(d, a, b, s);
}
template <>
__device__ __forceinline__ void wgmma_tf32_rs<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long b, int s) {
    wgmma_tf32_rs_m64n64k8(d, a, b, s);
}
template <>
__device__ __forceinline__ void wgmma_tf32_rs<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long b, int s) {
    wgmma_tf32_rs_m64n128k8(d, a, b, s);
}
template <>
__device__ __forceinline__ void wgmma_tf32_rs<192>(float (&d)[96], const unsigned (&a)[4], unsigned long long b, int s) {
    wgmma_tf32_rs_m64n192k8(d, a, b, s);
}

// ---------------------------------------------------------------------------------------------
// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier").

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    GW_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Returns once the barrier's phase with this parity (0 for its first) has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        GW_ASM("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    GW_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar` once all of this thread's earlier cp.async copies have landed (counted in
// the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(unsigned bar) {
    GW_ASM("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async16_u32(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// ---------------------------------------------------------------------------------------------

template <int PASSES, int EPI>
__device__ __forceinline__ void gemm_wg_body(const float* __restrict__ A, const float* __restrict__ P,
                                             const float* __restrict__ bias, const float* R, float* C, int M,
                                             int N, int K) {
    constexpr int PLANES = PASSES == 3 ? 2 : 1;
    constexpr int NACC = GW_BN / 2;  // accumulators per thread (m64 x GW_BN / 128)
    constexpr unsigned STAGE = GW_STAGE_BYTES(PLANES), A_BYTES = GW_BM * GW_ROW, B_BYTES = GW_BN * GW_ROW;
    static_assert(GW_BN == 48 || GW_BN == 64 || GW_BN == 128 || GW_BN == 192, "GW_BN must be 48, 64, 128 or 192");
    static_assert(GW_WG == 1 || GW_WG == 2, "GW_WG must be 1 or 2");

    extern __shared__ float4 gw_smem4[];
    const unsigned raw = smem_u32(gw_smem4);
    const unsigned ring = raw + ((1024u - (raw & 1023u)) & 1023u);  // stages, from a 1024-byte boundary
    const unsigned bars = ring + GW_STAGES * STAGE;                   // full[GW_STAGES], empty[GW_STAGES]
    auto full = [&](int s) { return bars + 8u * s; };
    auto empty = [&](int s) { return bars + 8u * (GW_STAGES + s); };

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.x * GW_BM, n0 = blockIdx.y * GW_BN;
    const int KT = (K + GW_BK - 1) / GW_BK;
    const int KP = KT * GW_BK;  // the planes' row length (whole k tiles)

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
            const int k0 = kt * GW_BK;
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
// The exported kernels: gemm_wg_<variant>_<epilogue>; B is the planes P [PLANES, N, KP].

#define GW_KERNEL(name, passes, epi)                                                               \
    extern "C" __global__ void __launch_bounds__(GW_THREADS, 1) name(GEMM_PARAMS) {                \
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
// Launch: block (32, 8), grid (ceil(N / 32), ceil(K / 32)); any N, K (the GEMM needs K % 4 == 0).

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
    __shared__ float tile[32][33];
    const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32, KP = gw_plane_row(K);
    for (int i = threadIdx.y; i < 32; i += 8) {  // read rows k0 + i, columns n0 + threadIdx.x
        const int k = k0 + i, n = n0 + threadIdx.x;
        tile[i][threadIdx.x] = k < K && n < N ? W[(long long)k * N + n] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {  // write rows n0 + i, positions k0 + threadIdx.x
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

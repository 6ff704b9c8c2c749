// wgmma.cuh: Hopper's warpgroup tensor-core instruction (wgmma.mma_async, TF32 in, fp32 out), its
// shared-memory operand descriptors, and the mbarrier / bulk-copy helpers the wgmma kernels use to
// feed it (gemm_wgmma.cu, attention_wgmma.cu). sm_90a only; on other targets the asm traps.
//
// Operand layout, both kernels: k-major tiles of 128-byte rows (32 tf32 along k) in the 128-byte
// swizzle: each 8-row group is one 1024-byte atom whose 16-byte chunks are XOR-permuted by row % 8
// (gw_chunk_offset). A k8 step is 32 bytes along the row.
#pragma once
#include "mma.cuh"

#define GW_ROW 128  // bytes per tile row

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
    GW_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// d[32] (+)= A[64 x 8] * B[8 x 64], A and B from their descriptors' shared-memory tiles (k-major).
__device__ __forceinline__ void wgmma_tf32_ss_m64n64k8(float (&d)[32], unsigned long long a_desc,
                                                     unsigned long long b_desc, int scale_d) {
    GW_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// The producer's side of a bulk copy: arrive on bar announcing `bytes` still to land on it.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    GW_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst by the
// copy engine, counted on the mbarrier bar as they land.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    GW_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
           ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// The same with an L2 eviction policy (common.cuh's l2_policy) on the source's lines.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                              unsigned long long policy) {
    GW_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
           ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}

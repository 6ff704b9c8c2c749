// bulk_copy.cuh: mbarriers and bulk copies (the copy engine, "TMA" in one dimension) from global into
// shared memory, sm_90 (decode_layers.cu's weight ring, lm_screen.cuh's table stages). Addresses are
// shared-memory offsets (smem_u32). Built for an older target each helper traps (callers launch them
// only on sm_90 and later).
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define BULK_ASM(...) __trap()
#else
#define BULK_ASM(...) asm volatile(__VA_ARGS__)
#endif

__device__ __forceinline__ void bulk_mbar_init(unsigned bar, unsigned count) {
    BULK_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bulk_mbar_arrive(unsigned bar) {
    BULK_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_mbar_expect(unsigned bar, unsigned bytes) {  // arrive, and bytes to come
    BULK_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Returns once the barrier's phase with this parity (0 for its first) has completed.
__device__ __forceinline__ void bulk_mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        BULK_ASM("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst, counted on
// the mbarrier bar as they land.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    BULK_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
             ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// The same with an L2 eviction policy (l2_policy, common.cuh) on the reads.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                              unsigned long long policy) {
    BULK_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
             ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}
// Generic-proxy accesses to shared memory ordered before later async-proxy ones (a stage read by
// the threads, then refilled by the copy engine).
__device__ __forceinline__ void bulk_fence_proxy() { BULK_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The barriers' initialization visible to the copy engine.
__device__ __forceinline__ void bulk_fence_init() { BULK_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

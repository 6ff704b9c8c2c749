// cluster.cuh: thread block clusters (sm_90): the cluster barrier's halves and stores into another
// block's shared memory (distributed shared memory). Compiled for an older target they do nothing
// and a store goes to the block's own variable; the kernels that use them reach them only on sm_90
// (attention_decode_f32 runs one block per (row, head) there; proj_fc_bf16_m1 is launched on sm_90 only).
#pragma once

__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// The block's rank in its cluster (0 without clusters).
__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
#else
    return 0;
#endif
}

// The shared::cluster address of the variable at this block's shared address p, in the cluster's block `rank`.
__device__ __forceinline__ unsigned cluster_map(const void* p, int rank) {
    unsigned remote = (unsigned)__cvta_generic_to_shared(p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %0, %1;\n" : "+r"(remote) : "r"(rank));
#endif
    return remote;
}

// *p = v, where p is this block's shared address of a variable and the store goes to the same
// variable of the cluster's block `rank`.
__device__ __forceinline__ void st_cluster_f32(float* p, int rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(cluster_map(p, rank)), "f"(v) : "memory");
#else
    *p = v;
#endif
}
__device__ __forceinline__ void st_cluster_f64x2(double2* p, int rank, double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.shared::cluster.v2.f64 [%0], {%1, %2};\n" ::"r"(cluster_map(p, rank)), "d"(a), "d"(b) : "memory");
#else
    *p = make_double2(a, b);
#endif
}

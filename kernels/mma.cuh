// mma.cuh: inline-PTX helpers for the matrix kernels: cp.async copies into
// shared memory, TF32 rounding and splitting, and the m16n8k8 TF32 tensor-core MMA (used by
// gemm.cu and attention.cu).
// Device code only; no host headers, so NVRTC compiles it as is. The engine runs these on sm_80 and
// later. Compiled for an older target (the one-file export built for sm_75, which has neither cp.async
// nor TF32 tensor cores), the copies become plain synchronous loads and stores (the same result: the
// kernels' waits and barriers still order them) and the TF32 MMA traps; the export launches no
// tensor-core kernel there (kernels/solve.cu picks its path from the code the device runs).
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MMA_NO_CP_ASYNC 1  // this compilation's target lacks cp.async and the TF32 MMA
#endif

// Shared-memory address of a generic pointer, as the 32-bit operand PTX wants.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n" : "=r"(a) : "l"(p));
    return a;
}

// 16-byte global -> shared copy, bypassing L1. src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
#ifdef MMA_NO_CP_ASYNC
    *reinterpret_cast<float4*>(dst) =
        src_bytes ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(src_bytes));
#endif
}

// 4-byte global -> shared copy (the path for unaligned rows). src_bytes 0 writes a zero.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
#ifdef MMA_NO_CP_ASYNC
    *reinterpret_cast<float*>(dst) = src_bytes ? *reinterpret_cast<const float*>(src) : 0.0f;
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(src_bytes));
#endif
}

// commit / wait carry a memory clobber: the compiler may not move shared-memory reads across them.
__device__ __forceinline__ void cp_async_commit() {
#ifndef MMA_NO_CP_ASYNC
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef MMA_NO_CP_ASYNC
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// fp32 -> tf32 (round to nearest, ties away from zero); the low 13 bits of the result are 0,
// so the result reinterpreted as a float is exactly the tf32 value.
__device__ __forceinline__ unsigned f32_to_tf32(float x) {
#ifdef MMA_NO_CP_ASYNC
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;  // (finite x; never run there, see above)
#else
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#endif
}

// The same rounding in two integer operations (add half a tf32 ulp to the magnitude, clear the 13
// low bits; a carry into the exponent is the correct result): cvt.rna.tf32.f32 itself compiles to
// about four instructions on sm_90 (a finiteness test, add, select, and).
__device__ __forceinline__ unsigned tf32_rna_bits(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// x = hi + lo (to within tf32 rounding of lo): the 3xTF32 operand split.
// x - hi is exact in fp32 because hi is x rounded to 11 significant bits.
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = f32_to_tf32(x);
    lo = f32_to_tf32(x - __uint_as_float(hi));
}

// The same split in three instructions: hi rounded to nearest (tf32_rna_bits), lo = x - hi exact
// in fp32 and left for the tensor core to truncate to tf32 (it reads an operand's top 19 bits), so
// lo carries 2^-21 |x| of representation error where split_tf32's carries 2^-22.
__device__ __forceinline__ void split_tf32_fast(float x, unsigned& hi, unsigned& lo) {
    hi = tf32_rna_bits(x);
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// d[16x8] += a[16x8 (row)] * b[8x8 (col)] in TF32 with fp32 accumulation, in place.
// Not volatile: a pure function of its operands, so the compiler may interleave independent MMAs.
// Fragment layout (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
//   a0 (g, t)   a1 (g+8, t)   a2 (g, t+4)   a3 (g+8, t+4)        [row, k]
//   b0 (t, g)   b1 (t+4, g)                                       [k, col]
//   d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1)        [row, col]
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#ifdef MMA_NO_CP_ASYNC
    __trap();
#else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The same with the B fragment as two registers.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    const unsigned b[2] = {b0, b1};
    mma_tf32_16x8x8(d, a, b);
}

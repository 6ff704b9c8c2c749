// gemm.cu: C[M,N] = epilogue(A[M,K] @ B[K,N] + bias[N]) for prefill and solve, and the tied
// LM head C[M,N] = A[M,K] @ B[N,K]^T. All matrices row-major and contiguous, float32.
//
// Arithmetic variants (the first word of each name):
//   tf32x3  mma.sync m16n8k8 TF32 tensor cores, each operand split x = hi + lo (hi = tf32(x),
//           lo = tf32(x - hi)), (lo*hi' + hi*lo' + hi*hi') per k8 step, the step's sum
//           formed in the tensor core and added up with round-to-nearest FADDs (per k tile,
//           then per tile into acc): fp32-level accuracy.
//           The engine's default fp32 precision mode runs this.
//   tf32    the same kernel with one pass (acc += tf32(a) * tf32(b)).
// Epilogues (the second word): bias (C = AB + bias), bias_gelu (C = gelu_tanh(AB + bias)),
//   bias_residual (C = R + AB + bias; R may be the same buffer as C: every element is read,
//   then written, by one thread), nt (C = A @ B^T, B is [N, K]; no bias).
//
// Every kernel has the same parameters:
//   (const float* A, const float* B, const float* bias, const float* R, float* C, int M, int N, int K)
//   A [M, K]; B [K, N] (nt: [N, K]); bias [N] (unused by nt: pass NULL);
//   R [M, N] (read by bias_residual only, else NULL); C [M, N].
// Any M, N, K >= 1. 16-byte loads are used where a matrix's rows allow them (row length a
// multiple of 4 and a 16-byte aligned base), else 4-byte copies: the kernel decides from the
// pointers and sizes itself. C and R are written/read in pairs when N is even and both are
// 8-byte aligned. Results are deterministic (no atomics, fixed summation order).
//
// Launch recipe
//   tensor-core kernels gemm_tf32x3_* and gemm_tf32_*, with the tile defines below
//   (GEMM_BM, GEMM_BN, GEMM_WARPS_M, GEMM_WARPS_N: build.py's tiles, e.g. 128, 128, 2, 4):
//     grid  = (ceil(M / GEMM_BM), ceil(N / GEMM_BN), 1)
//     block = (GEMM_WARPS_M * GEMM_WARPS_N * 32, 1, 1)
//     dynamic shared memory = GEMM_SMEM_BYTES
//         = GEMM_STAGES * (GEMM_BM * GEMM_LDK + max(GEMM_BK * (GEMM_BN + 8), GEMM_BN * GEMM_LDK)) * 4
//         = 110592 bytes for 128x128 (needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize)),
//           82944 for 128x64, 55296 for 64x64.
// grid.x walks M so that blocks running together share B's column tile (the wte tile of nt).

#include "common.cuh"
#include "mma.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_mma.cuh"

// Build parameters (build.py; the host sizes grids and shared memory by them): the tile GEMM_BM x GEMM_BN
// of GEMM_WARPS_M x GEMM_WARPS_N warps, GEMM_BK k per shared-memory stage, GEMM_STAGES cp.async stages.
#ifndef GEMM_BM
#error "GEMM_BM is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_BN
#error "GEMM_BN is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_WARPS_M
#error "GEMM_WARPS_M is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_WARPS_N
#error "GEMM_WARPS_N is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_BK
#error "GEMM_BK is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_STAGES
#error "GEMM_STAGES is set by gpt2block/backends/cuda/build.py"
#endif
#define GEMM_THREADS (GEMM_WARPS_M * GEMM_WARPS_N * 32)
#define GEMM_LDK (GEMM_BK + 4)          // k-contiguous tile row stride: conflict-free fragment reads
#define GEMM_LDN (GEMM_BN + 8)          // n-contiguous B tile row stride: conflict-free fragment reads
#define GEMM_A_FLOATS (GEMM_BM * GEMM_LDK)
#define GEMM_B_FLOATS \
    (GEMM_BK * GEMM_LDN > GEMM_BN * GEMM_LDK ? GEMM_BK * GEMM_LDN : GEMM_BN * GEMM_LDK)
#define GEMM_STAGE_FLOATS (GEMM_A_FLOATS + GEMM_B_FLOATS)
#define GEMM_SMEM_BYTES (GEMM_STAGES * GEMM_STAGE_FLOATS * 4)


// The tile of this build (gemm_mma.cuh holds the body, templated on it).
typedef GemmTile<GEMM_BM, GEMM_BN, GEMM_WARPS_M, GEMM_WARPS_N, GEMM_BK, GEMM_STAGES> GemmBuild;
static_assert(GemmBuild::SMEM_BYTES == GEMM_SMEM_BYTES, "GEMM_SMEM_BYTES is the tile's shared memory");

// ---------------------------------------------------------------------------------------------
// The exported kernels: gemm_<variant>_<epilogue>.

#define GEMM_MMA_KERNEL(name, passes, epi, nt)                                         \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS) name(GEMM_PARAMS) {   \
        gemm_mma_body<GemmBuild, passes, epi, nt>(A, B, bias, R, C, M, N, K);                     \
    }

#if GEMM_WITH_TF32X3
GEMM_MMA_KERNEL(gemm_tf32x3_bias, 3, GEMM_EPI_BIAS, false)
GEMM_MMA_KERNEL(gemm_tf32x3_bias_gelu, 3, GEMM_EPI_GELU, false)
GEMM_MMA_KERNEL(gemm_tf32x3_bias_residual, 3, GEMM_EPI_RESIDUAL, false)
GEMM_MMA_KERNEL(gemm_tf32x3_nt, 3, GEMM_EPI_NONE, true)

#endif

#if GEMM_WITH_TF32
GEMM_MMA_KERNEL(gemm_tf32_bias, 1, GEMM_EPI_BIAS, false)
GEMM_MMA_KERNEL(gemm_tf32_bias_gelu, 1, GEMM_EPI_GELU, false)
GEMM_MMA_KERNEL(gemm_tf32_bias_residual, 1, GEMM_EPI_RESIDUAL, false)
GEMM_MMA_KERNEL(gemm_tf32_nt, 1, GEMM_EPI_NONE, true)

#endif

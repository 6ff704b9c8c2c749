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

#include "gemm_wgmma.cuh"

// Build parameters (build.py): GW_WG consumer warpgroups (block rows = 64 * GW_WG); GW_BN block columns:
// 48, 64, 128 or 192 (the wgmma's N; 192 for tf32 only: with tf32x3's part registers two consumers spill
// at ptxas' 168-register cap of a 384-thread block); GW_STAGES ring slots; GW_SPLITK blocks sharing one
// output tile, each a 1/GW_SPLITK share of K (a cluster); GW_PLANES_N (gemm_wgmma.cuh).
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
typedef GwTile<GW_WG, GW_BN, GW_STAGES, GW_SPLITK> GwBuild;  // this build's tile
#define GW_BM GwBuild::BM
#define GW_THREADS GwBuild::THREADS   // consumers, then the producer
#define GW_SMEM_BYTES(planes) GwBuild::smem_bytes(planes)

// ---------------------------------------------------------------------------------------------
// The exported kernels: gemm_wg_<variant>_<epilogue>; B is the planes P [PLANES, N, KP].

#if GW_SPLITK > 1
#define GW_CLUSTER __cluster_dims__(1, 1, GW_SPLITK)
#else
#define GW_CLUSTER
#endif
#define GW_KERNEL(name, passes, epi)                                                               \
    extern "C" __global__ void __launch_bounds__(GW_THREADS, 1) GW_CLUSTER name(GEMM_PARAMS) {     \
        gemm_wg_body<GwBuild, passes, epi>(A, B, bias, R, C, M, N, K);                                      \
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


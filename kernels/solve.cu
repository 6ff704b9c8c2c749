// solve.cu: the host side of the LeetGPU GPT-2 Transformer Block submission, for every GPU LeetGPU offers.
//
//   extern "C" void solve(const float* x, float* output, const float* weights, int seq_len)
//
// x, output: [seq_len, 768] device pointers; weights: one block in the flat layout (layout.cuh, generated
// from gpt2block/layout.py). No causal mask. `gpt2block export-cuda` inlines this file and everything it
// includes into one solution.cu, after the build parameters (gpt2block/backends/cuda/build.py: solve(),
// one precision a file): SOLVE_TF32X3 1 is the fp32 mode (fp32-level accuracy), 0 the tf32 mode (TF32-level).
//
//   h   = LN(x; g1, b1)                   LayerNorm
//   qkv = h @ W_qkv + b_qkv               GEMM, epilogue bias
//   a   = attention(q, k, v), no mask     (reads q, k, v inside qkv)
//   out = x + a @ W_attn + b_attn         GEMM, epilogue bias_residual (the residual stream now in output)
//   h   = LN(out; g2, b2)                 LayerNorm
//   f   = gelu(h @ W_fc + b_fc)           GEMM, epilogue bias_gelu
//   out = out + f @ W_proj + b_proj       GEMM, epilogue bias_residual (in place)
//
// Two code paths, chosen by the architecture the file is compiled for, per kernel in device code
// (SOLVE_CODE_PATH below):
//   2  sm_80 and later (sm_80, 86, 89, sm_90 and sm_90a, sm_100, ...): mma.sync fp16 tensor cores
//      on fp16 planes (gemm_mma_f16.cuh: hi and, in fp32 mode, lo planes with a power-of-two scale each,
//      three products for fp32 accuracy, one for TF32's), each GEMM on the tile with the least estimated
//      time; the weights' planes remade by every call on a second stream (W_qkv's beside the first
//      LayerNorm, the others beside attention), after the largest |value| of each matrix, LayerNorm
//      parameter and bias (solve_planes_amax) gives every operand's scale (planes_scales: from bounds on
//      the activations, so that no plane overflows); the activations' planes from the LayerNorms
//      (solve_layernorm_planes), the QKV and FC GEMMs' epilogues and attention; attention on the qkv
//      planes, flash style on the same fp16 tensor cores (attention_f16.cuh, three products in fp32 mode)
//      with a split-key plan. (sm_90a builds take this path too: on the H200 it measured faster than
//      gpt2block.solve()'s wgmma TF32 kernels in both precisions, and within 2x torch fp32's error where
//      tf32x3 wgmma was 2.59x at seq_len 16: docs/PERFORMANCE.md, versions 40 and 41);
//   1  older targets (sm_75, the T4: no cp.async, no TF32 tensor cores): FFMA in fp32 throughout
//      (gemm_simt.cuh, attention_prefill_f32), in both precisions.
// The host cannot see __CUDA_ARCH__, and a fat binary or a PTX build (compute_75 PTX JIT-compiled for a
// newer GPU) runs whichever code the driver picked: at the first call solve() launches solve_code_path,
// which reports the path its own code was compiled for. Every kernel of the file comes from that same
// compilation, so the host launches only that path's kernels; the other paths' kernels are compiled with
// empty bodies (or traps) there and are never launched.
//
// The scratch (path 1: h, qkv, a, f, 9 x seq_len x 768 floats; path 2: the activations' planes, 2 x 9 x
// seq_len x 768 halves in fp32 mode, split K's partial tiles, at most a wave of them, and attention's split-key
// partials) is allocated at the first call and regrown only when a longer seq_len arrives; path 2's weight
// planes (2 x 7.1M halves in fp32 mode) once. No cudaMalloc on the hot path. Kernels run on the legacy default
// stream (the stream of a torch or CuPy program that set none; path 2's weight planes on a second stream
// between events), one after another; solve() does not synchronize. State is per process (one device at a
// time).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "attention.cu"
#include "attention_f16.cuh"
#include "common.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_mma_f16.cuh"
#include "gemm_simt.cuh"
#include "layernorm.cu"
#include "layout.cuh"

// Build parameters (build.py: solve()): the precision, the GEMM tiles of the mma.sync path and its most K
// splits.
#ifndef SOLVE_TF32X3
#error "SOLVE_TF32X3 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_F16_TILES
#error "SOLVE_F16_TILES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_F16_SPLITK_MAX
#error "SOLVE_F16_SPLITK_MAX is set by gpt2block/backends/cuda/build.py"
#endif

#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 800
#define SOLVE_CODE_PATH 2
#else
#define SOLVE_CODE_PATH 1
#endif
#else
#define SOLVE_CODE_PATH 0  // the host pass: no device code
#endif

namespace gpt2block_solve {

constexpr int D = BLOCK_D;
constexpr int H = D / HEAD_DIM;
constexpr int F16_PLANES = SOLVE_TF32X3 ? 2 : 1;  // the mma.sync path's planes an operand (hi; hi and lo)
constexpr int PATH_SIMT = 1, PATH_MMA = 2;
typedef unsigned short half_bits;  // an fp16 plane's element

// The mma.sync path's amax slots (solve_planes_amax: max |value| of each, as float bits; two groups, the
// first what W_qkv's planes and the first GEMM need) and scale slots (planes_scales).
enum : int {
    AMAX_W_QKV, AMAX_LN1_G, AMAX_LN1_B, AMAX_B_QKV,                        // group 0
    AMAX_W_ATTN, AMAX_W_FC, AMAX_W_PROJ, AMAX_LN2_G, AMAX_LN2_B, AMAX_B_FC,  // group 1
    AMAX_SLOTS,
    AMAX_GROUP1 = AMAX_W_ATTN
};
constexpr int SC_W = 0;  // + i: W_qkv, W_attn, W_fc, W_proj
// the activations: ln_1's output, qkv and attention's output (one bound), ln_2's output, GELU's
constexpr int SC_H1 = 4, SC_QKV = 5, SC_H2 = 6, SC_F = 7, SC_SLOTS = 8;
__constant__ long long AMAX_OFF[AMAX_SLOTS] = {O_W_QKV, O_LN1_G, O_LN1_B, O_B_QKV, O_W_ATTN,
                                               O_W_FC,  O_W_PROJ, O_LN2_G, O_LN2_B, O_B_FC};
__constant__ int AMAX_LEN[AMAX_SLOTS] = {D * 3 * D, D, D, 3 * D, D * D, D * 4 * D, 4 * D * D, D, D, 4 * D};

// ---------------------------------------------------------------------------------------------
// Kernels: each path's GEMM kernels, their bodies compiled only for that path's targets.

__global__ void solve_code_path(int* path) { *path = SOLVE_CODE_PATH; }

// One kernel per tile for every epilogue (the epi argument, a GEMM_EPI_*): a third of the code to compile
// of one kernel per epilogue. Arguments: gemm_mma_f16.cuh's gemm_f16_body.
template <class T>
__global__ void __launch_bounds__(T::THREADS)
    solve_gemm_f16(const half_bits* Ah, const half_bits* Al, const half_bits* Wh, const half_bits* Wl, const float* sa,
                   const float* sw, const float* bias, const float* R, float* C, half_bits* Ch, half_bits* Cl,
                   const float* out_s, int M, int N, int K, int epi, int tile0, int splits, float* P) {
#if SOLVE_CODE_PATH == 2
    gemm_f16_body<T>(Ah, Al, Wh, Wl, sa, sw, bias, R, C, Ch, Cl, out_s, M, N, K, epi, tile0, splits, P);
#endif
}

// Split K's second pass (gemm_mma_f16.cuh): tiles tile0 .. tile0 + tiles - 1 from their partials.
__global__ void __launch_bounds__(256)
    solve_gemm_f16_reduce(const float* __restrict__ P, int splits, int tile0, int tiles, int tiles_m, int bm, int bn,
                          const float* __restrict__ bias, const float* R, float* C, half_bits* Ch, half_bits* Cl,
                          const float* out_s, int M, int N, int epi) {
#if SOLVE_CODE_PATH == 2
    gemm_f16_splitk_reduce(P, splits, tile0, tiles, tiles_m, bm, bn, bias, R, C, Ch, Cl, out_s, F16_PLANES, M, N,
                           epi);
#endif
}

// Path 2's attention (attention_f16.cuh): query tile blockIdx.x, head blockIdx.y, key split blockIdx.z.
__global__ void __launch_bounds__(AttnF16<F16_PLANES>::THREADS)
    solve_attention_f16(const half_bits* qkv, const float* s_qkv, half_bits* out_h, half_bits* out_l, int S,
                        int chunk, float* part_o, float* part_ml, int* counters) {
#if SOLVE_CODE_PATH == 2
    attn_f16_body<F16_PLANES>(qkv, s_qkv, out_h, out_l, D, S, blockIdx.x,
                              AttnSplit{chunk, part_o, part_ml, counters});
#endif
}

// amax[s] = max |w[AMAX_OFF[s] + i]| over i < AMAX_LEN[s], for the slots first + blockIdx.y (as float bits:
// the order of non-negative floats is their bits' order; amax zeroed before). A grid-stride loop, four
// float4 loads in flight a thread.
__global__ void __launch_bounds__(256) solve_planes_amax(const float* __restrict__ w, unsigned* amax, int first) {
#if SOLVE_CODE_PATH == 2
    const int s = first + blockIdx.y;
    const float4* p = reinterpret_cast<const float4*>(w + AMAX_OFF[s]);
    const int n4 = AMAX_LEN[s] / 4, step = gridDim.x * blockDim.x;
    float m = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += 4 * step) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = i + u * step < n4 ? __ldg(p + i + u * step) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < 4; ++u)
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v[u].x), fabsf(v[u].y)), fmaxf(fabsf(v[u].z), fabsf(v[u].w))));
    }
    // (a NaN is dropped by fmaxf: its output is NaN anyway, whatever the scale.) One atomic a block: those
    // of every warp on one address took longer than the loads.
    __shared__ float warp_m[8];
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) warp_m[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); ++i) m = fmaxf(m, warp_m[i]);
        if (m > 0.0f) atomicMax(amax + s, __float_as_uint(m));
    }
#endif
}

// The scale of an operand whose |values| are at most `bound`: the power of two that takes the bound to at most
// 2^14 (gemm_mma_f16.cuh), kept within 2^-60 .. 2^60 so that two scales' product stays a normal float.
__device__ __forceinline__ float planes_scale_of(float bound) {
    if (!(bound > 0.0f)) return 1.0f;
    int e = 128;
    if (bound <= 3.0e38f) frexpf(bound, &e);  // bound <= 2^e
    return ldexpf(1.0f, max(-60, min(60, 14 - e)));
}

// A LayerNorm output's scale from max|g| and max|b|: |ln(x)_j| <= sqrt(D) max|g| + max|b| (the normalized
// row's norm is below sqrt(D)). solve_layernorm_planes works it out and stores it for the GEMM that reads h.
__device__ __forceinline__ float ln_planes_scale(float g_max, float b_max) {
    return planes_scale_of(sqrtf((float)D) * g_max + b_max);
}

// The scales of amax group `group` (0: W_qkv, qkv and attention's output; 1: the other matrices, GELU's
// output) from its bounds: a LayerNorm output row's norm is at most sqrt(D) (max|g| + max|b|), so
// |h W + b_qkv| <= D (max|g| + max|b|) max|W| + max|b_qkv|, which bounds the attention output (a mean of v
// rows); |gelu(z)| <= max(|z|, 0.171) (its least value is -0.17004). (The LayerNorm outputs' scales:
// solve_layernorm_planes.)
__device__ __forceinline__ void planes_scales(const unsigned* amax_bits, float* scales, int group) {
    float a[AMAX_SLOTS];
    for (int i = 0; i < AMAX_SLOTS; ++i) a[i] = __uint_as_float(amax_bits[i]);
    if (group == 0) {
        scales[SC_W + 0] = planes_scale_of(a[AMAX_W_QKV]);
        scales[SC_QKV] = planes_scale_of(D * (a[AMAX_LN1_G] + a[AMAX_LN1_B]) * a[AMAX_W_QKV] + a[AMAX_B_QKV]);
    } else {
        scales[SC_W + 1] = planes_scale_of(a[AMAX_W_ATTN]);
        scales[SC_W + 2] = planes_scale_of(a[AMAX_W_FC]);
        scales[SC_W + 3] = planes_scale_of(a[AMAX_W_PROJ]);
        scales[SC_F] =
            planes_scale_of(fmaxf(D * (a[AMAX_LN2_G] + a[AMAX_LN2_B]) * a[AMAX_W_FC] + a[AMAX_B_FC], 0.171f));
    }
}

// Matrix i's planes (hi, lo [K, N] from W [K, N]) with its scale from amax; the first matrix of each amax
// group (i 0: group 0; i 1: group 1) also writes its group's scales (block 0), for the kernels after it.
__global__ void __launch_bounds__(256) solve_weight_planes(const float* __restrict__ W, half_bits* hi, half_bits* lo,
                                                           long long K, int N, const unsigned* amax, float* scales,
                                                           int i) {
#if SOLVE_CODE_PATH == 2
    if (i <= 1 && blockIdx.x == 0 && threadIdx.x == 0) planes_scales(amax, scales, i);
    const float sc = planes_scale_of(__uint_as_float(amax[i == 0 ? AMAX_W_QKV : AMAX_W_ATTN + i - 1]));
    gemm_f16_planes(W, N, hi, lo, K, N, sc, F16_PLANES);
#endif
}

__global__ void __launch_bounds__(SIMT_THREADS) solve_gemm_simt(GEMM_PARAMS, int epi) {
#if SOLVE_CODE_PATH == 1
    gemm_simt_body<GEMM_EPI_RUNTIME>(A, B, bias, R, C, M, N, K, epi);
#endif
}

// y = LayerNorm(x; g, b) of rows [rows, D] straight to its planes hi, lo [rows, D] (path 2): one warp a row
// (layernorm.cu's ln_load and ln_row_to), the scale ln_planes_scale of g's and b's largest |value|, worked
// out here (so this kernel waits on nothing of the side stream) and stored at *scale for the GEMM after it.
__global__ void __launch_bounds__(32 * LN_WARPS) solve_layernorm_planes(const float* __restrict__ x,
                                                                        const float* __restrict__ g,
                                                                        const float* __restrict__ b, half_bits* hi,
                                                                        half_bits* lo, int rows, float* scale) {
#if SOLVE_CODE_PATH == 2
    const int lane = threadIdx.x & 31, row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    constexpr int NVEC = D / 4;
    float4 v[LN_MAX_VEC];
    ln_load(v, x, row, D, NVEC, lane);
    float gm = 0.0f, bm = 0.0f;
#pragma unroll
    for (int i = 0; i < LN_MAX_VEC; ++i) {
        const int c4 = lane + 32 * i;
        if (c4 < NVEC) {
            const float4 gg = __ldg(reinterpret_cast<const float4*>(g) + c4);
            const float4 bb = __ldg(reinterpret_cast<const float4*>(b) + c4);
            gm = fmaxf(gm, fmaxf(fmaxf(fabsf(gg.x), fabsf(gg.y)), fmaxf(fabsf(gg.z), fabsf(gg.w))));
            bm = fmaxf(bm, fmaxf(fmaxf(fabsf(bb.x), fabsf(bb.y)), fmaxf(fabsf(bb.z), fabsf(bb.w))));
        }
    }
    const float sc = ln_planes_scale(warp_max(gm), warp_max(bm));
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale = sc;
    const long long at = (long long)row * D;
    ln_row_to(v, g, b, D, NVEC, lane, 1e-5f, [&](int c4, const float4& o) {
        uint2 h, l;
        f16_split2(o.x, o.y, sc, F16_PLANES, h.x, l.x);
        f16_split2(o.z, o.w, sc, F16_PLANES, h.y, l.y);
        *reinterpret_cast<uint2*>(hi + at + 4 * c4) = h;
        if (F16_PLANES == 2) *reinterpret_cast<uint2*>(lo + at + 4 * c4) = l;
    });
#endif
}

// The tiles (build.py): F16Tile<i>, their count, and a host table for the choice.
struct TileInfo {
    int bm, bn, per_sm;
    float speed;
    unsigned smem;
};

template <int I>
struct F16Tile;
#define SOLVE_F16_TILE(i, bm, bn, wm, wn, stages, speed)                               \
    template <>                                                                        \
    struct F16Tile<i> {                                                                \
        typedef GemmF16Tile<bm, bn, wm, wn, stages, F16_PLANES> T;                     \
        static TileInfo info() { return {bm, bn, 0, speed, (unsigned)T::SMEM_BYTES}; } \
    };
SOLVE_F16_TILES
#undef SOLVE_F16_TILE
#define SOLVE_F16_TILE(...) +1
constexpr int N_F16_TILES = 0 SOLVE_F16_TILES;
#undef SOLVE_F16_TILE

// ---------------------------------------------------------------------------------------------
// State.

struct State {
    int path = 0;         // PATH_*: the code this process's device runs (0: not yet asked)
    int device = -1;
    int sms = 0;
    int smem_optin = 0;   // the most dynamic shared memory one block may opt into
    // activations, [rows, ...] (path 1), in one allocation at base
    float* base = nullptr;
    float* h = nullptr;    // [rows, D]   LayerNorm output
    float* qkv = nullptr;  // [rows, 3D]
    float* att = nullptr;  // [rows, D]   attention output
    float* f = nullptr;    // [rows, 4D]  GELU(FC) output
    int rows = 0;
    float* partials = nullptr;  // split K's partial tiles (mma.sync path): at most a wave of tiles
    long long partial_floats = 0;
    // mma.sync path: the planes (F16_PLANES of each: hi, then lo) of the activations h [rows, D], qkv
    // [rows, 3D], att [rows, D], f [rows, 4D] and of the weights W_qkv, W_attn, W_fc, W_proj; amax and scale slots
    half_bits *hp = nullptr, *qkvp = nullptr, *ap = nullptr, *fp = nullptr;
    half_bits* wp = nullptr;
    unsigned* amax = nullptr;  // [AMAX_SLOTS]
    float* scales = nullptr;   // [SC_SLOTS]
    // split-key attention: partials and tickets (the kernels leave the tickets zero)
    float* part_o = nullptr;   // [slots][64][64]
    float* part_ml = nullptr;  // [slots][64][2]
    int* counters = nullptr;   // [tiles]
    long long slots = 0, tiles = 0;
    // mma.sync path: the second stream of the weights' planes and its events
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, fork2 = nullptr, ready[4] = {nullptr, nullptr, nullptr, nullptr};
};

static State st;

static bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    std::fprintf(stderr, "gpt2block solve(): %s failed: %s\n", what, cudaGetErrorString(e));
    return false;
}

// Every launch is checked: solve() returns void (the challenge's signature), so a failed launch is
// reported on stderr with the kernel's name, and the remaining steps are skipped.
static bool launched(const char* what) { return ok(cudaGetLastError(), what); }

static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// GEMM launches: C[M, N] = epi(A[M, K] @ W + bias).

// Path 2's GEMM with tile T: A's planes Ah [M, K] (scale *sa), W's Wh [K, N] (*sw), each plane's lo (fp32
// mode) after its hi; into C, or into the planes Ch (scale *out_s) where Ch is set. Tiles [0, dp)
// data-parallel with the epilogue; splits > 1: tiles [dp, tiles) split in K, their partials into st.partials
// (ensure_partials made room), then the reduce applies the epilogue.
template <class T>
static void launch_f16(const half_bits* Ah, const half_bits* Wh, const float* sa, const float* sw, const float* bias,
                       const float* R, float* C, half_bits* Ch, const float* out_s, int M, int N, int K, int epi,
                       long long dp, int splits) {
    const half_bits* Al = F16_PLANES == 2 ? Ah + (size_t)M * K : Ah;
    const half_bits* Wl = F16_PLANES == 2 ? Wh + (size_t)K * N : Wh;
    half_bits* Cl = F16_PLANES == 2 && Ch != nullptr ? Ch + (size_t)M * N : Ch;
    const long long tiles_m = cdiv(M, T::BM), tiles = tiles_m * cdiv(N, T::BN);
    if (dp > 0)
        solve_gemm_f16<T><<<(unsigned)dp, T::THREADS, T::SMEM_BYTES>>>(Ah, Al, Wh, Wl, sa, sw, bias, R, C, Ch, Cl, out_s,
                                                                       M, N, K, epi, 0, 1, nullptr);
    if (splits == 1 || dp == tiles) return;
    const long long rem = tiles - dp;
    solve_gemm_f16<T><<<(unsigned)(rem * splits), T::THREADS, T::SMEM_BYTES>>>(
        Ah, Al, Wh, Wl, sa, sw, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, M, N, K, GEMM_EPI_NONE, (int)dp,
        splits, st.partials);
    solve_gemm_f16_reduce<<<(unsigned)cdiv(rem * T::BM * T::BN / 2, 256), 256>>>(
        st.partials, splits, (int)dp, (int)rem, (int)tiles_m, T::BM, T::BN, bias, R, C, Ch, Cl, out_s, M, N, epi);
}

template <int I = N_F16_TILES - 1>
static void dispatch_f16(int tile, const half_bits* Ah, const half_bits* Wh, const float* sa, const float* sw,
                         const float* bias, const float* R, float* C, half_bits* Ch, const float* out_s, int M, int N,
                         int K, int epi, long long dp, int splits) {
    if (tile == I)
        return launch_f16<typename F16Tile<I>::T>(Ah, Wh, sa, sw, bias, R, C, Ch, out_s, M, N, K, epi, dp, splits);
    if constexpr (I > 0) dispatch_f16<I - 1>(tile, Ah, Wh, sa, sw, bias, R, C, Ch, out_s, M, N, K, epi, dp, splits);
}

// The f16 tiles' infos, with the blocks an SM holds (the occupancy calculator, after the shared-memory
// opt-in: registers and shared memory differ by GPU). Called once.
template <int I = N_F16_TILES - 1>
static void f16_infos(TileInfo* out) {
    typedef typename F16Tile<I>::T T;
    out[I] = F16Tile<I>::info();
    int per_sm = 0;  // 0: this device cannot run the tile, which the choice skips
    if (T::SMEM_BYTES <= st.smem_optin &&
        (cudaFuncSetAttribute(solve_gemm_f16<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES) !=
             cudaSuccess ||
         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, solve_gemm_f16<T>, T::THREADS, T::SMEM_BYTES) !=
             cudaSuccess))
        per_sm = 0;
    out[I].per_sm = per_sm;
    if constexpr (I > 0) f16_infos<I - 1>(out);
}

// The f16 tile and its schedule: waves of tiles (slots = SMs x blocks per SM), data-parallel; where all the
// tiles fill less than one wave, each is split in K `splits` ways (at most SOLVE_F16_SPLITK_MAX, each split
// at least 4 k tiles, tiles x splits <= slots). Cost in waves of the tile's time (bm bn per_sm / speed):
// 1.15 / splits where split (the partials' traffic, the reduce). -> tile (or -1), dp (tiles done
// data-parallel), splits.
static int pick_f16(const TileInfo* t, int m, int n, int k, long long* dp, int* splits) {
    int best = -1;
    double best_cost = 0;
    for (int i = 0; i < N_F16_TILES; ++i) {
        if ((int)t[i].smem > st.smem_optin || t[i].per_sm < 1) continue;
        const long long tiles = cdiv(m, t[i].bm) * cdiv(n, t[i].bn);
        const long long slots = (long long)st.sms * t[i].per_sm;
        const long long full = tiles / slots, rem = tiles % slots;
        int s = 1;
        double waves = (double)full + (rem ? 1.0 : 0.0);
        if (full == 0) {
            const long long s_max = std::min<long long>({(long long)SOLVE_F16_SPLITK_MAX, cdiv(k, 32) / 4, slots / rem});
            if (s_max >= 2) s = (int)s_max, waves = 1.15 / s_max;
        }
        const double cost = waves * t[i].bm * t[i].bn * t[i].per_sm / t[i].speed;
        if (best < 0 || cost < best_cost) {
            best = i, best_cost = cost, *splits = s;
            *dp = s == 1 ? tiles : full * slots;
        }
    }
    return best;
}

static bool ensure_partials(long long floats) {
    if (floats <= st.partial_floats) return true;
    cudaDeviceSynchronize();  // queued work may still use the old one
    cudaFree(st.partials);
    st.partials = nullptr;
    st.partial_floats = 0;
    if (!ok(cudaMalloc(&st.partials, sizeof(float) * (size_t)floats), "cudaMalloc of split K's partials")) return false;
    st.partial_floats = floats;
    return true;
}

// Path 1's GEMM: C = epi(A @ W + bias), W [K, N] as stored.
template <int EPI>
static bool gemm(const float* A, const float* W, const float* bias, const float* R, float* C, int M, int N, int K,
                 const char* what) {
    const dim3 grid((unsigned)cdiv(M, SIMT_BM), (unsigned)cdiv(N, SIMT_BN));
    solve_gemm_simt<<<grid, SIMT_THREADS>>>(A, W, bias, R, C, M, N, K, EPI);
    return launched(what);
}

// Path 2's GEMM: C (or the planes Ch, scale slot so) = epi(A @ W + bias), A's planes Ah with the scale slot sa,
// W's Wh with sw.
static bool gemm_f16(const half_bits* Ah, int sa, const half_bits* Wh, int sw, const float* bias, const float* R,
                     float* C, half_bits* Ch, int so, int M, int N, int K, int epi, const char* what) {
    static TileInfo t[N_F16_TILES];
    static bool filled = false;
    if (!filled) {
        f16_infos(t);
        cudaGetLastError();  // a tile this device cannot run: per_sm 0, skipped (not an error of this call)
        filled = true;
    }
    long long dp = 0;
    int splits = 1;
    const int i = pick_f16(t, M, N, K, &dp, &splits);
    if (i < 0) return ok(cudaErrorInvalidConfiguration, what);
    if (splits > 1 && !ensure_partials((cdiv(M, t[i].bm) * cdiv(N, t[i].bn) - dp) * splits * t[i].bm * t[i].bn))
        return false;
    dispatch_f16(i, Ah, Wh, st.scales + sa, st.scales + sw, bias, R, C, Ch, st.scales + so, M, N, K, epi, dp, splits);
    return launched(what);
}

// ---------------------------------------------------------------------------------------------
// Attention (no mask: all queries see all S keys).

// Path 2's attention (attention_f16.cuh): 64-query blocks of KT key tiles, split in z = 1 .. 4 parts of at
// least 2 key tiles, the z of the least estimated time: waves of blocks (slots: SMs x the blocks an SM holds,
// from the occupancy calculator) x (the key tiles of a split, + 1 for the partial and combine when split).
static void f16_split_plan(int s, int& chunk, int& splits) {
    static long long slots = 0;
    if (slots == 0) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, solve_attention_f16, AttnF16<F16_PLANES>::THREADS,
                                                          AttnF16<F16_PLANES>::SMEM_BYTES) != cudaSuccess)
            cudaGetLastError(), per_sm = 1;
        slots = (long long)st.sms * std::max(per_sm, 1);
    }
    const int kt = (int)cdiv(s, 64);
    const long long blocks = cdiv(s, 64) * H;
    long long best = -1;
    chunk = 0, splits = 1;
    for (int z = 1; z <= 4 && (z == 1 || kt / z >= 2); ++z) {
        const int ch = (int)cdiv(kt, z), ns = (int)cdiv(kt, ch);
        const long long cost = cdiv(blocks * ns, slots) * (ch + (ns > 1));
        if (best < 0 || cost < best) best = cost, chunk = ns > 1 ? ch : 0, splits = ns;
    }
}

static bool ensure_split_scratch(long long slots, long long tiles) {
    if (slots <= st.slots && tiles <= st.tiles) return true;
    cudaDeviceSynchronize();  // the old scratch may still be in use by queued work
    cudaFree(st.part_o);
    cudaFree(st.part_ml);
    cudaFree(st.counters);
    st.part_o = st.part_ml = nullptr;
    st.counters = nullptr;
    st.slots = st.tiles = 0;
    if (!ok(cudaMalloc(&st.part_o, sizeof(float) * slots * 64 * 64), "cudaMalloc of attention partials") ||
        !ok(cudaMalloc(&st.part_ml, sizeof(float) * slots * 64 * 2), "cudaMalloc of attention partials") ||
        !ok(cudaMalloc(&st.counters, sizeof(int) * tiles), "cudaMalloc of attention tickets") ||
        !ok(cudaMemset(st.counters, 0, sizeof(int) * tiles), "cudaMemset of attention tickets"))
        return false;
    st.slots = slots, st.tiles = tiles;
    return true;
}

// Path 1's attention.
static bool attention(int S) {
    const dim3 grid((unsigned)cdiv(S, 64), H);
    attention_prefill_f32<<<grid, 256, ATTN_F32_SMEM_BYTES>>>(st.qkv, 3 * D, st.qkv + D, st.qkv + 2 * D, 3 * D, st.att,
                                                              D, S, S, 0, 0);
    return launched("attention (fp32)");
}

static bool attention_f16(int S) {
    int chunk = 0, splits = 1;
    f16_split_plan(S, chunk, splits);
    const long long tiles = cdiv(S, 64) * H;
    if (chunk && !ensure_split_scratch(tiles * splits, tiles)) return false;
    solve_attention_f16<<<dim3((unsigned)cdiv(S, 64), H, splits), AttnF16<F16_PLANES>::THREADS,
                          AttnF16<F16_PLANES>::SMEM_BYTES>>>(st.qkvp, st.scales + SC_QKV, st.ap,
                                                             F16_PLANES == 2 ? st.ap + (size_t)S * D : st.ap, S, chunk,
                                                             chunk ? st.part_o : nullptr,
                                                             chunk ? st.part_ml : nullptr,
                                                             chunk ? st.counters : nullptr);
    return launched("attention (fp16 planes)");
}

// ---------------------------------------------------------------------------------------------
// Set-up: the path, the device's limits, the kernels' shared memory, the planes and their streams.

static bool setup() {
    int dev = 0;
    if (!ok(cudaGetDevice(&dev), "cudaGetDevice")) return false;
    if (st.path != 0 && st.device == dev) return true;
    if (st.path != 0) {
        std::fprintf(stderr, "gpt2block solve(): called on device %d after device %d; one device a process\n", dev,
                     st.device);
        return false;
    }
    int* d_path = nullptr;
    int path = 0;
    if (!ok(cudaMalloc(&d_path, sizeof(int)), "cudaMalloc")) return false;
    solve_code_path<<<1, 1>>>(d_path);
    const bool got = launched("solve_code_path (this build has no code for this GPU?)") &&
                     ok(cudaMemcpy(&path, d_path, sizeof(int), cudaMemcpyDeviceToHost), "reading the code path");
    cudaFree(d_path);
    if (!got) return false;
    if (path < PATH_SIMT || path > PATH_MMA) {
        std::fprintf(stderr, "gpt2block solve(): unknown code path %d\n", path);
        return false;
    }
    if (!ok(cudaDeviceGetAttribute(&st.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute") ||
        !ok(cudaDeviceGetAttribute(&st.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
            "cudaDeviceGetAttribute"))
        return false;
    if (path == PATH_MMA) {
        cudaFuncSetAttribute(solve_attention_f16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             AttnF16<F16_PLANES>::SMEM_BYTES);
        const size_t halves = (size_t)F16_PLANES * 12 * D * D;  // the four matrices' planes
        if (!ok(cudaMalloc(&st.wp, sizeof(half_bits) * halves), "cudaMalloc of the weight planes") ||
            !ok(cudaMalloc(&st.amax, sizeof(unsigned) * AMAX_SLOTS + sizeof(float) * SC_SLOTS), "cudaMalloc") ||
            !ok(cudaStreamCreateWithFlags(&st.side, cudaStreamNonBlocking), "cudaStreamCreate") ||
            !ok(cudaEventCreateWithFlags(&st.fork, cudaEventDisableTiming), "cudaEventCreate") ||
            !ok(cudaEventCreateWithFlags(&st.fork2, cudaEventDisableTiming), "cudaEventCreate"))
            return false;
        st.scales = reinterpret_cast<float*>(st.amax + AMAX_SLOTS);
        for (auto& e : st.ready)
            if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) return false;
    }
    cudaFuncSetAttribute(attention_prefill_f32, cudaFuncAttributeMaxDynamicSharedMemorySize, ATTN_F32_SMEM_BYTES);
    if (!ok(cudaGetLastError(), "setting the kernels' shared memory")) return false;
    st.path = path;
    st.device = dev;
    return true;
}

static bool ensure_workspace(int rows) {
    if (rows <= st.rows) return true;
    cudaDeviceSynchronize();  // queued work may still use the old one
    cudaFree(st.base);        // one allocation holds all four (path 2: its planes); cudaFree(nullptr): a no-op
    st.base = nullptr;
    st.h = st.qkv = st.att = st.f = nullptr;
    st.hp = st.qkvp = st.ap = st.fp = nullptr;
    st.rows = 0;
    const bool mma = st.path == PATH_MMA;  // (planes only: every activation of path 2 is a plane)
    const size_t floats = mma ? 0 : (size_t)rows * 9 * D;
    const size_t halves = mma ? (size_t)F16_PLANES * rows * 9 * D : 0;
    float* base = nullptr;
    if (!ok(cudaMalloc(&base, sizeof(float) * floats + sizeof(half_bits) * halves), "cudaMalloc of the workspace"))
        return false;
    st.base = base;
    if (floats) {
        st.h = base;
        st.qkv = st.h + (size_t)rows * D;
        st.att = st.qkv + (size_t)rows * 3 * D;
        st.f = st.att + (size_t)rows * D;
    } else {
        st.hp = reinterpret_cast<half_bits*>(base + floats);
        st.qkvp = st.hp + (size_t)F16_PLANES * rows * D;
        st.ap = st.qkvp + (size_t)F16_PLANES * rows * 3 * D;
        st.fp = st.ap + (size_t)F16_PLANES * rows * D;
    }
    st.rows = rows;
    return true;
}

static bool layernorm(const float* x, const float* g, const float* b, float* y, int rows, const char* what) {
    layernorm_f32<<<(unsigned)cdiv(rows, LN_WARPS), 32 * LN_WARPS>>>(x, g, b, y, rows, D, D, D, 1e-5f);
    return launched(what);
}

// Path 2's weight matrices: i = 0 W_qkv, 1 W_attn, 2 W_fc, 3 W_proj of `weights`.
static const int MAT_K[4] = {D, D, D, 4 * D}, MAT_N[4] = {3 * D, D, 4 * D, D};
static const long long MAT_OFF[4] = {O_W_QKV, O_W_ATTN, O_W_FC, O_W_PROJ};

// Path 2: matrix i's planes (hi, then lo in fp32 mode) in st.wp.
static half_bits* wplanes_of(int i) {
    half_bits* p = st.wp;
    for (int j = 0; j < i; ++j) p += (size_t)F16_PLANES * MAT_K[j] * MAT_N[j];
    return p;
}

// LayerNorm of x [rows, D] to the planes from hi (path 2).
static bool layernorm_planes(const float* x, const float* g, const float* b, half_bits* hi, int rows, int slot,
                             const char* what) {
    solve_layernorm_planes<<<(unsigned)cdiv(rows, LN_WARPS), 32 * LN_WARPS>>>(
        x, g, b, hi, F16_PLANES == 2 ? hi + (size_t)rows * D : hi, rows, st.scales + slot);
    return launched(what);
}

// On the side stream: amax group g (0: W_qkv, ln_1's parameters, b_qkv; 1: the rest).
static bool amax_group(const float* w, int g) {
    const int first = g ? AMAX_GROUP1 : 0, n = g ? AMAX_SLOTS - AMAX_GROUP1 : AMAX_GROUP1;
    solve_planes_amax<<<dim3(4 * st.sms, n), 256, 0, st.side>>>(w, st.amax, first);
    return launched("amax of the weights");
}

// On the side stream: matrix i's planes (and, for i 0 and 1, its amax group's scales), then its event.
static bool weight_planes(const float* w, int i) {
    const long long K = MAT_K[i], N = MAT_N[i];
    half_bits* hi = wplanes_of(i);
    solve_weight_planes<<<(unsigned)cdiv(K * N / 4, 256), 256, 0, st.side>>>(
        w + MAT_OFF[i], hi, F16_PLANES == 2 ? hi + K * N : hi, K, (int)N, st.amax, st.scales, i);
    return launched("weight planes") && ok(cudaEventRecord(st.ready[i], st.side), "cudaEventRecord");
}

// Path 2's block (the file's header): the weights' amax, scales and planes on the side stream (group 0 and
// W_qkv's beside the first LayerNorm, the rest once the QKV GEMM is queued, beside attention), the block on
// the legacy default stream.
static void solve_mma(const float* x, float* output, const float* w, int S) {
    if (!ok(cudaEventRecord(st.fork, 0), "cudaEventRecord") ||
        !ok(cudaStreamWaitEvent(st.side, st.fork, 0), "cudaStreamWaitEvent") ||
        !ok(cudaMemsetAsync(st.amax, 0, sizeof(unsigned) * AMAX_SLOTS, st.side), "cudaMemsetAsync") ||
        !amax_group(w, 0) || !weight_planes(w, 0))
        return;
    if (!layernorm_planes(x, w + O_LN1_G, w + O_LN1_B, st.hp, S, SC_H1, "layernorm ln_1") ||
        !ok(cudaStreamWaitEvent(0, st.ready[0], 0), "cudaStreamWaitEvent") ||
        !gemm_f16(st.hp, SC_H1, wplanes_of(0), SC_W + 0, w + O_B_QKV, nullptr, nullptr, st.qkvp, SC_QKV, S, 3 * D,
                  D, GEMM_EPI_BIAS, "gemm qkv"))
        return;
    if (!ok(cudaEventRecord(st.fork2, 0), "cudaEventRecord") ||
        !ok(cudaStreamWaitEvent(st.side, st.fork2, 0), "cudaStreamWaitEvent") || !amax_group(w, 1))
        return;
    for (int i = 1; i < 4; ++i)
        if (!weight_planes(w, i)) return;
    if (!attention_f16(S) || !ok(cudaStreamWaitEvent(0, st.ready[1], 0), "cudaStreamWaitEvent") ||
        !gemm_f16(st.ap, SC_QKV, wplanes_of(1), SC_W + 1, w + O_B_ATTN, x, output, nullptr, 0, S, D, D,
                  GEMM_EPI_RESIDUAL, "gemm attn proj + residual"))
        return;
    if (!layernorm_planes(output, w + O_LN2_G, w + O_LN2_B, st.hp, S, SC_H2, "layernorm ln_2") ||
        !ok(cudaStreamWaitEvent(0, st.ready[2], 0), "cudaStreamWaitEvent") ||
        !gemm_f16(st.hp, SC_H2, wplanes_of(2), SC_W + 2, w + O_B_FC, nullptr, nullptr, st.fp, SC_F, S, 4 * D, D,
                  GEMM_EPI_GELU, "gemm fc + gelu") ||
        !ok(cudaStreamWaitEvent(0, st.ready[3], 0), "cudaStreamWaitEvent"))
        return;
    gemm_f16(st.fp, SC_F, wplanes_of(3), SC_W + 3, w + O_B_PROJ, output, output, nullptr, 0, S, D, 4 * D,
             GEMM_EPI_RESIDUAL, "gemm mlp proj + residual");
}

}  // namespace gpt2block_solve

extern "C" void solve(const float* x, float* output, const float* weights, int seq_len) {
    using namespace gpt2block_solve;
    if (seq_len <= 0 || x == nullptr || output == nullptr || weights == nullptr) {
        std::fprintf(stderr, "gpt2block solve(): seq_len must be >= 1 and the pointers non-null (seq_len %d)\n",
                     seq_len);
        return;
    }
    const unsigned long long misaligned = (reinterpret_cast<unsigned long long>(x) |
                                           reinterpret_cast<unsigned long long>(output) |
                                           reinterpret_cast<unsigned long long>(weights)) & 15;
    if (misaligned) {
        std::fprintf(stderr, "gpt2block solve(): x, output and weights must be 16-byte aligned\n");
        return;
    }
    if (!setup() || !ensure_workspace(seq_len)) return;
    if (st.path == PATH_MMA) return solve_mma(x, output, weights, seq_len);
    // path 1, in order on the default stream
    const float* w = weights;
    const int S = seq_len;
    if (!layernorm(x, w + O_LN1_G, w + O_LN1_B, st.h, S, "layernorm ln_1") ||
        !gemm<GEMM_EPI_BIAS>(st.h, w + O_W_QKV, w + O_B_QKV, nullptr, st.qkv, S, 3 * D, D, "gemm qkv") ||
        !attention(S) ||
        !gemm<GEMM_EPI_RESIDUAL>(st.att, w + O_W_ATTN, w + O_B_ATTN, x, output, S, D, D, "gemm attn proj + residual") ||
        !layernorm(output, w + O_LN2_G, w + O_LN2_B, st.h, S, "layernorm ln_2") ||
        !gemm<GEMM_EPI_GELU>(st.h, w + O_W_FC, w + O_B_FC, nullptr, st.f, S, 4 * D, D, "gemm fc + gelu"))
        return;
    gemm<GEMM_EPI_RESIDUAL>(st.f, w + O_W_PROJ, w + O_B_PROJ, output, output, S, D, 4 * D, "gemm mlp proj + residual");
}

// solve.cu: the host side of the LeetGPU GPT-2 Transformer Block submission, for every GPU LeetGPU offers.
//
//   extern "C" void solve(const float* x, float* output, const float* weights, int seq_len)
//
// x, output: [seq_len, 768] device pointers; weights: one block in the flat layout (layout.cuh, generated
// from gpt2block/layout.py). No causal mask. `gpt2block export-cuda` inlines this file and everything it
// includes into one solution.cu, after the build parameters (gpt2block/backends/cuda/build.py: solve(),
// one precision a file): SOLVE_TF32X3 1 is the fp32 mode (tf32x3 GEMMs, tf32x3f attention: fp32-level
// accuracy), 0 the tf32 mode (one TF32 pass).
//
//   h   = LN(x; g1, b1)                   layernorm_f32
//   qkv = h @ W_qkv + b_qkv               GEMM, epilogue bias
//   a   = attention(q, k, v), no mask     (reads q, k, v inside qkv)
//   out = x + a @ W_attn + b_attn         GEMM, epilogue bias_residual (the residual stream now in output)
//   h   = LN(out; g2, b2)                 layernorm_f32
//   f   = gelu(h @ W_fc + b_fc)           GEMM, epilogue bias_gelu
//   out = out + f @ W_proj + b_proj       GEMM, epilogue bias_residual (in place)
//
// Three code paths, chosen by the architecture the file is compiled for, per kernel in device code
// (SOLVE_CODE_PATH below):
//   3  sm_90a (the 'a' features, __CUDA_ARCH_FEAT_SM90_ALL): the kernels of gpt2block.solve() on Hopper:
//      wgmma GEMMs (gemm_wgmma.cuh) on weight planes remade from `weights` by every call (on a second
//      stream: W_qkv's beside the first LayerNorm, the other three once the QKV GEMM is queued, beside
//      attention), wgmma attention (attention_wgmma.cu) with its split-key plan;
//   2  sm_80 and later without them (sm_80, 86, 89, plain sm_90, sm_100, ...): mma.sync TF32 tensor cores
//      (gemm_mma_vec.cuh where K and N are multiples of 4 and A, W 16-byte aligned, as the block's are
//      for any torch-allocated weights; else gemm_mma.cuh; attention.cu's prefill kernels), each GEMM on
//      the tile with the least estimated time;
//   1  older targets (sm_75, the T4: no cp.async, no TF32 tensor cores): FFMA in fp32 throughout
//      (gemm_simt.cuh, attention_prefill_f32), in both precisions.
// The host cannot see __CUDA_ARCH__, and a fat binary or a PTX build (compute_75 PTX JIT-compiled for a
// newer GPU) runs whichever code the driver picked: at the first call solve() launches solve_code_path,
// which reports the path its own code was compiled for. Every kernel of the file comes from that same
// compilation, so the host launches only that path's kernels; the other paths' kernels are compiled with
// empty bodies (or traps) there and are never launched.
//
// The scratch (h, qkv, a, f: 9 x seq_len x 768 floats; on the mma.sync path split K's partial tiles, at most
// a wave of them; the wgmma path's attention planes and every
// path's split-key partials) is allocated at the first call and regrown only when a longer seq_len
// arrives; the wgmma path's weight planes (2 x 7.1M floats in fp32 mode) once. No cudaMalloc on the hot
// path. Kernels run on the legacy default stream (the stream of a torch or CuPy program that set none),
// one after another; solve() does not synchronize. State is per process (one device at a time).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "attention.cu"
#include "attention_wgmma.cu"
#include "common.cuh"
#include "gemm_epilogue.cuh"
#include "gemm_mma.cuh"
#include "gemm_mma_vec.cuh"
#include "gemm_simt.cuh"
#include "gemm_wgmma.cuh"
#include "layernorm.cu"
#include "layout.cuh"

// Build parameters (build.py: solve()): the precision, the GEMM tiles of the mma.sync and wgmma paths, and the
// mma.sync tiles' k depth and stages.
#ifndef SOLVE_TF32X3
#error "SOLVE_TF32X3 is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_MMA_TILES
#error "SOLVE_MMA_TILES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_VEC_TILES
#error "SOLVE_VEC_TILES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_VEC_SPLITK_MAX
#error "SOLVE_VEC_SPLITK_MAX is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef SOLVE_WG_TILES
#error "SOLVE_WG_TILES is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_BK
#error "GEMM_BK is set by gpt2block/backends/cuda/build.py"
#endif
#ifndef GEMM_STAGES
#error "GEMM_STAGES is set by gpt2block/backends/cuda/build.py"
#endif

#if defined(__CUDA_ARCH__)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SOLVE_CODE_PATH 3
#elif __CUDA_ARCH__ >= 800
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
constexpr int PASSES = SOLVE_TF32X3 ? 3 : 1;
constexpr int PATH_SIMT = 1, PATH_MMA = 2, PATH_WGMMA = 3;

// ---------------------------------------------------------------------------------------------
// Kernels: each path's GEMM kernels, their bodies compiled only for that path's targets.

__global__ void solve_code_path(int* path) { *path = SOLVE_CODE_PATH; }

// One kernel per tile for every epilogue (GEMM_EPI_RUNTIME: the epi argument, a GEMM_EPI_*): a third of
// the code to compile of one kernel per epilogue.
template <class T>
__global__ void __launch_bounds__(T::THREADS) solve_gemm_mma(GEMM_PARAMS, int epi) {
#if SOLVE_CODE_PATH == 2
    gemm_mma_body<T, PASSES, GEMM_EPI_RUNTIME, false>(A, B, bias, R, C, M, N, K, epi);
#endif
}

template <class T>
__global__ void __launch_bounds__(T::THREADS) solve_gemm_vec(GEMM_PARAMS, int epi, int tile0, int splits, float* P) {
#if SOLVE_CODE_PATH == 2
    gemm_mma_vec_body<T, PASSES, GEMM_EPI_RUNTIME>(A, B, bias, R, C, M, N, K, epi, tile0, splits, P);
#endif
}

// Split K's second pass (gemm_mma_vec.cuh): tiles tile0 .. tile0 + tiles - 1 of C from their partials.
__global__ void __launch_bounds__(256) solve_gemm_vec_reduce(const float* __restrict__ P, int splits, int tile0,
                                                           int tiles, int tiles_m, int bm, int bn,
                                                           const float* __restrict__ bias, const float* R, float* C,
                                                           int M, int N, int epi) {
#if SOLVE_CODE_PATH == 2
    gemm_vec_splitk_reduce(P, splits, tile0, tiles, tiles_m, bm, bn, bias, R, C, M, N, epi);
#endif
}

template <class T>
__global__ void __launch_bounds__(T::THREADS, 1) solve_gemm_wg(GEMM_PARAMS, int epi) {
#if SOLVE_CODE_PATH == 3
    gemm_wg_body<T, PASSES, GEMM_EPI_RUNTIME>(A, B, bias, R, C, M, N, K, epi);
#endif
}

__global__ void __launch_bounds__(SIMT_THREADS) solve_gemm_simt(GEMM_PARAMS, int epi) {
#if SOLVE_CODE_PATH == 1
    gemm_simt_body<GEMM_EPI_RUNTIME>(A, B, bias, R, C, M, N, K, epi);
#endif
}

// The tiles (build.py): MmaTile<i> / WgTile<i>, their count, and a host table for the choice.
struct TileInfo {
    int bm, bn, per_sm;
    float speed;
    unsigned smem;
};

template <int I>
struct MmaTile;
#define SOLVE_MMA_TILE(i, bm, bn, wm, wn, per_sm, speed)                        \
    template <>                                                                  \
    struct MmaTile<i> {                                                          \
        typedef GemmTile<bm, bn, wm, wn, GEMM_BK, GEMM_STAGES> T;                \
        static TileInfo info() { return {bm, bn, per_sm, speed, (unsigned)T::SMEM_BYTES}; } \
    };
SOLVE_MMA_TILES
#undef SOLVE_MMA_TILE
#define SOLVE_MMA_TILE(...) +1
constexpr int N_MMA_TILES = 0 SOLVE_MMA_TILES;
#undef SOLVE_MMA_TILE

template <int I>
struct VecTile;
#define SOLVE_VEC_TILE(i, bm, bn, wm, wn, stages, speed)                              \
    template <>                                                                       \
    struct VecTile<i> {                                                               \
        typedef GemmVecTile<bm, bn, wm, wn, stages> T;                                \
        static TileInfo info() { return {bm, bn, 0, speed, (unsigned)T::SMEM_BYTES}; } \
    };
SOLVE_VEC_TILES
#undef SOLVE_VEC_TILE
#define SOLVE_VEC_TILE(...) +1
constexpr int N_VEC_TILES = 0 SOLVE_VEC_TILES;
#undef SOLVE_VEC_TILE

constexpr int WG_PLANES = PASSES == 3 ? 2 : 1;
template <int I>
struct WgTile;
#define SOLVE_WG_TILE(i, wg, bn, stages, speed)                                                  \
    template <>                                                                                   \
    struct WgTile<i> {                                                                            \
        typedef GwTile<wg, bn, stages, 1> T;                                                      \
        static TileInfo info() { return {64 * wg, bn, 1, speed, T::smem_bytes(WG_PLANES)}; }      \
    };
SOLVE_WG_TILES
#undef SOLVE_WG_TILE
#define SOLVE_WG_TILE(...) +1
constexpr int N_WG_TILES = 0 SOLVE_WG_TILES;
#undef SOLVE_WG_TILE

// ---------------------------------------------------------------------------------------------
// State.

struct State {
    int path = 0;         // PATH_*: the code this process's device runs (0: not yet asked)
    int device = -1;
    int sms = 0;
    int smem_optin = 0;   // the most dynamic shared memory one block may opt into
    // activations, [rows, ...]
    float* h = nullptr;    // [rows, D]   LayerNorm output
    float* qkv = nullptr;  // [rows, 3D]
    float* att = nullptr;  // [rows, D]   attention output
    float* f = nullptr;    // [rows, 4D]  GELU(FC) output
    int rows = 0;
    float* partials = nullptr;  // split K's partial tiles (mma.sync path): at most a wave of tiles
    long long partial_floats = 0;
    // split-key attention: partials and tickets (the kernels leave the tickets zero)
    float* part_o = nullptr;   // [slots][64][64]
    float* part_ml = nullptr;  // [slots][64][2]
    int* counters = nullptr;   // [tiles]
    long long slots = 0, tiles = 0;
    // wgmma path: the weight planes of W_qkv, W_attn, W_fc, W_proj, and K / V planes of attention
    float* wplanes = nullptr;
    float* kv_planes = nullptr;  // [H][KT][ATTN_WG_TILE_FLOATS]
    long long kv_floats = 0;
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

static bool aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0; }

// ---------------------------------------------------------------------------------------------
// The choice of tile (cuda/linear.py: pick_tile, pick_wg_tile without split K): whole waves of blocks,
// each wave as long as the work an SM does in it at the tile's speed; tiles whose shared memory the
// device cannot give one block are skipped.

template <int I, template <int> class Tile>
static void tile_infos(TileInfo* out) {
    out[I] = Tile<I>::info();
    if constexpr (I > 0) tile_infos<I - 1, Tile>(out);
}

static int pick(const TileInfo* t, int n_tiles, int m, int n) {
    int best = -1;
    double best_cost = 0;
    for (int i = 0; i < n_tiles; ++i) {
        if ((int)t[i].smem > st.smem_optin) continue;
        const long long blocks = cdiv(m, t[i].bm) * cdiv(n, t[i].bn);
        const long long waves = cdiv(blocks, (long long)st.sms * t[i].per_sm);
        const double cost = (double)waves * t[i].bm * t[i].bn * t[i].per_sm / t[i].speed;
        if (best < 0 || cost < best_cost) best = i, best_cost = cost;
    }
    return best;
}

// ---------------------------------------------------------------------------------------------
// GEMM launches: C[M, N] = epi(A[M, K] @ W + bias), W [K, N] as stored (mma, simt) or as planes (wgmma).

template <class T>
static void launch_mma(const float* A, const float* B, const float* bias, const float* R, float* C, int M, int N,
                       int K, int epi) {
    static bool attr = false;  // per instantiation
    if (!attr) {
        cudaFuncSetAttribute(solve_gemm_mma<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES);
        attr = true;
    }
    const dim3 grid((unsigned)cdiv(M, T::BM), (unsigned)cdiv(N, T::BN));
    solve_gemm_mma<T><<<grid, T::THREADS, T::SMEM_BYTES>>>(A, B, bias, R, C, M, N, K, epi);
}

template <int I = N_MMA_TILES - 1>
static void dispatch_mma(int tile, const float* A, const float* B, const float* bias, const float* R, float* C,
                         int M, int N, int K, int epi) {
    if (tile == I) return launch_mma<typename MmaTile<I>::T>(A, B, bias, R, C, M, N, K, epi);
    if constexpr (I > 0) dispatch_mma<I - 1>(tile, A, B, bias, R, C, M, N, K, epi);
}

// Tiles [0, dp) data-parallel with the epilogue; splits > 1: tiles [dp, tiles) split in K, their partials
// into st.partials (ensure_partials made room), then the reduce applies the epilogue.
template <class T>
static void launch_vec(const float* A, const float* B, const float* bias, const float* R, float* C, int M, int N,
                       int K, int epi, long long dp, int splits) {
    const long long tiles_m = cdiv(M, T::BM), tiles = tiles_m * cdiv(N, T::BN);
    if (dp > 0)
        solve_gemm_vec<T><<<(unsigned)dp, T::THREADS, T::SMEM_BYTES>>>(A, B, bias, R, C, M, N, K, epi, 0, 1, nullptr);
    if (splits == 1 || dp == tiles) return;
    const long long rem = tiles - dp;
    solve_gemm_vec<T><<<(unsigned)(rem * splits), T::THREADS, T::SMEM_BYTES>>>(A, B, nullptr, nullptr, nullptr, M, N,
                                                                             K, GEMM_EPI_NONE, (int)dp, splits,
                                                                             st.partials);
    solve_gemm_vec_reduce<<<(unsigned)cdiv(rem * T::BM * T::BN / 4, 256), 256>>>(
        st.partials, splits, (int)dp, (int)rem, (int)tiles_m, T::BM, T::BN, bias, R, C, M, N, epi);
}

template <int I = N_VEC_TILES - 1>
static void dispatch_vec(int tile, const float* A, const float* B, const float* bias, const float* R, float* C,
                         int M, int N, int K, int epi, long long dp, int splits) {
    if (tile == I) return launch_vec<typename VecTile<I>::T>(A, B, bias, R, C, M, N, K, epi, dp, splits);
    if constexpr (I > 0) dispatch_vec<I - 1>(tile, A, B, bias, R, C, M, N, K, epi, dp, splits);
}

// The vec tiles' infos, with the blocks an SM holds (the occupancy calculator, after the shared-memory
// opt-in: registers and shared memory differ by GPU). Called once.
template <int I = N_VEC_TILES - 1>
static void vec_infos(TileInfo* out) {
    typedef typename VecTile<I>::T T;
    out[I] = VecTile<I>::info();
    int per_sm = 0;  // 0: this device cannot run the tile, which the choice skips
    if (T::SMEM_BYTES <= st.smem_optin &&
        (cudaFuncSetAttribute(solve_gemm_vec<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::SMEM_BYTES) !=
             cudaSuccess ||
         cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, solve_gemm_vec<T>, T::THREADS, T::SMEM_BYTES) !=
             cudaSuccess))
        per_sm = 0;
    out[I].per_sm = per_sm;
    if constexpr (I > 0) vec_infos<I - 1>(out);
}

// The vec tile and its schedule: waves of tiles (slots = SMs x blocks per SM), data-parallel; where all the
// tiles fill less than one wave, each is split in K `splits` ways (at most SOLVE_VEC_SPLITK_MAX, each split
// at least 4 k tiles, tiles x splits <= slots). Cost in waves of the tile's time (bm bn per_sm / speed):
// 1.15 / splits where split (the partials' traffic, the reduce). Splitting only a last part-wave after
// whole ones (launch_vec can) measured no faster on the H200 (docs/PERFORMANCE.md, version 40).
// -> tile (or -1), dp (tiles done data-parallel), splits.
static int pick_vec(const TileInfo* t, int m, int n, int k, long long* dp, int* splits) {
    int best = -1;
    double best_cost = 0;
    for (int i = 0; i < N_VEC_TILES; ++i) {
        if ((int)t[i].smem > st.smem_optin || t[i].per_sm < 1) continue;
        const long long tiles = cdiv(m, t[i].bm) * cdiv(n, t[i].bn);
        const long long slots = (long long)st.sms * t[i].per_sm;
        const long long full = tiles / slots, rem = tiles % slots;
        int s = 1;
        double waves = (double)full + (rem ? 1.0 : 0.0);
        if (full == 0) {
            const long long s_max = std::min<long long>({(long long)SOLVE_VEC_SPLITK_MAX, cdiv(k, 32) / 4, slots / rem});
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

template <class T>
static void launch_wg(const float* A, const float* P, const float* bias, const float* R, float* C, int M, int N,
                      int K, int epi) {
    constexpr unsigned smem = T::smem_bytes(WG_PLANES);
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(solve_gemm_wg<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        attr = true;
    }
    const dim3 grid((unsigned)cdiv(M, T::BM), (unsigned)cdiv(N, T::BN), 1);
    solve_gemm_wg<T><<<grid, T::THREADS, smem>>>(A, P, bias, R, C, M, N, K, epi);
}

template <int I = N_WG_TILES - 1>
static void dispatch_wg(int tile, const float* A, const float* P, const float* bias, const float* R, float* C,
                        int M, int N, int K, int epi) {
    if (tile == I) return launch_wg<typename WgTile<I>::T>(A, P, bias, R, C, M, N, K, epi);
    if constexpr (I > 0) dispatch_wg<I - 1>(tile, A, P, bias, R, C, M, N, K, epi);
}

template <int EPI>
static bool gemm(const float* A, const float* W, const float* P, const float* bias, const float* R, float* C, int M,
                 int N, int K, const char* what) {
    if (st.path == PATH_WGMMA) {
        static TileInfo t[N_WG_TILES];
        static bool filled = false;
        if (!filled) tile_infos<N_WG_TILES - 1, WgTile>(t), filled = true;
        const int i = pick(t, N_WG_TILES, M, N);
        if (i < 0) return ok(cudaErrorInvalidConfiguration, what);
        dispatch_wg(i, A, P, bias, R, C, M, N, K, EPI);
    } else if (st.path == PATH_MMA && K % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(W)) {
        // 16-byte fragment reads (gemm_mma_vec.cuh); else gemm_mma.cuh's general body, below
        static TileInfo t[N_VEC_TILES];
        static bool filled = false;
        if (!filled) {
            vec_infos(t);
            cudaGetLastError();  // a tile this device cannot run: per_sm 0, skipped (not an error of this call)
            filled = true;
        }
        long long dp = 0;
        int splits = 1;
        const int i = pick_vec(t, M, N, K, &dp, &splits);
        if (i < 0) return ok(cudaErrorInvalidConfiguration, what);
        if (splits > 1 &&
            !ensure_partials((cdiv(M, t[i].bm) * cdiv(N, t[i].bn) - dp) * splits * t[i].bm * t[i].bn))
            return false;
        dispatch_vec(i, A, W, bias, R, C, M, N, K, EPI, dp, splits);
    } else if (st.path == PATH_MMA) {
        static TileInfo t[N_MMA_TILES];
        static bool filled = false;
        if (!filled) tile_infos<N_MMA_TILES - 1, MmaTile>(t), filled = true;
        const int i = pick(t, N_MMA_TILES, M, N);
        if (i < 0) return ok(cudaErrorInvalidConfiguration, what);
        dispatch_mma(i, A, W, bias, R, C, M, N, K, EPI);
    } else {
        const dim3 grid((unsigned)cdiv(M, SIMT_BM), (unsigned)cdiv(N, SIMT_BN));
        solve_gemm_simt<<<grid, SIMT_THREADS>>>(A, W, bias, R, C, M, N, K, EPI);
    }
    return launched(what);
}

// ---------------------------------------------------------------------------------------------
// Attention and its split-key plans (cuda/attention.py: prefill_split_plan, wg_split_plan; no mask, all
// queries see all S keys).

// The wgmma kernel: 128-query blocks of KT key tiles each; the chunk whose blocks, handed in launch order
// to whichever SM frees first (one block per SM; ties to the lowest SM), finish soonest; a block costs its
// key tiles plus one for its start and, when split, one for its partial and combine. -> (chunk, splits);
// chunk 0: no split. Worked out once per seq_len (the last few kept).
struct SplitPlan {
    int s = 0, chunk = 0, splits = 1;
};

static SplitPlan wg_split_plan_of(int s) {
    const int kt = (int)cdiv(s, 64), bx = (int)cdiv(s, 128);
    SplitPlan best;
    best.s = s;
    long long best_span = -1;
    std::vector<std::pair<long long, int>> heap;  // (the SM's finishing time, its index): a min-heap
    const auto later = [](const std::pair<long long, int>& a, const std::pair<long long, int>& b) { return a > b; };
    for (int chunk = 0; chunk <= kt; ++chunk) {
        const int ns = chunk ? (int)cdiv(kt, chunk) : 1;
        const long long blocks = (long long)ns * H * bx;
        const int n_free = (int)(blocks < st.sms ? blocks : st.sms);
        heap.clear();
        for (int i = 0; i < n_free; ++i) heap.push_back({0, i});
        long long span = 0;
        for (int z = 0; z < ns; ++z) {
            const int len = (z + 1) * kt / ns - z * kt / ns + 1 + (ns > 1);
            for (long long b = 0; b < (long long)H * bx; ++b) {
                std::pop_heap(heap.begin(), heap.end(), later);
                heap.back().first += len;
                span = heap.back().first > span ? heap.back().first : span;
                std::push_heap(heap.begin(), heap.end(), later);
            }
        }
        if (best_span < 0 || span < best_span) best_span = span, best.chunk = chunk, best.splits = ns;
    }
    return best;
}

static void wg_split_plan(int s, int& chunk, int& splits) {
    static SplitPlan cache[8];
    static int next = 0;
    for (const SplitPlan& p : cache)
        if (p.s == s) {
            chunk = p.chunk, splits = p.splits;
            return;
        }
    const SplitPlan p = cache[next++ % 8] = wg_split_plan_of(s);
    chunk = p.chunk, splits = p.splits;
}

// The mma.sync kernels: 64-query tiles of KT key tiles; split where KT is 8 to 32 (tf32x3f only, without a
// mask): at most four splits of at least 4 key tiles.
static void mma_split_plan(int s, int& chunk, int& splits) {
    const int kt = (int)cdiv(s, 64);
    chunk = 0, splits = 1;
    if (kt < 8 || kt > 32 || PASSES != 3) return;
    chunk = (int)cdiv(kt, 4) > 4 ? (int)cdiv(kt, 4) : 4;
    splits = (int)cdiv(kt, chunk);
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

static bool attention(int S) {
    const float* q = st.qkv;
    const float* k = st.qkv + D;
    const float* v = st.qkv + 2 * D;
    if (st.path == PATH_WGMMA) {
        const long long kt = cdiv(S, 64), floats = (long long)H * kt * ATTN_WG_TILE_FLOATS;
        if (floats > st.kv_floats) {
            cudaDeviceSynchronize();
            cudaFree(st.kv_planes);
            st.kv_planes = nullptr, st.kv_floats = 0;
            if (!ok(cudaMalloc(&st.kv_planes, sizeof(float) * floats), "cudaMalloc of attention planes")) return false;
            st.kv_floats = floats;
        }
        attention_wg_kv_planes<<<dim3((unsigned)kt, H), 256>>>(k, v, 3 * D, st.kv_planes, S, PASSES);
        if (!launched("attention K / V planes")) return false;
        int chunk = 0, splits = 1;
        wg_split_plan(S, chunk, splits);
        const long long bx = cdiv(S, 128);
        if (chunk && !ensure_split_scratch(2 * bx * H * splits, 2 * bx * H)) return false;
        const unsigned smem = ATTN_WG_SMEM_BYTES(WG_PLANES);
        const dim3 grid((unsigned)bx, H, (unsigned)splits);
        float* po = chunk ? st.part_o : st.kv_planes;  // (unused without a split)
        float* pml = chunk ? st.part_ml : st.kv_planes;
        int* cnt = chunk ? st.counters : reinterpret_cast<int*>(st.kv_planes);
        if (PASSES == 3)
            attention_wg_tf32x3<<<grid, ATTN_WG_THREADS, smem>>>(q, 3 * D, st.kv_planes, st.att, D, S, S, 0, 0, chunk,
                                                               po, pml, cnt);
        else
            attention_wg_tf32<<<grid, ATTN_WG_THREADS, smem>>>(q, 3 * D, st.kv_planes, st.att, D, S, S, 0, 0, chunk,
                                                             po, pml, cnt);
        return launched("attention (wgmma)");
    }
    const dim3 grid1((unsigned)cdiv(S, 64), H);
    // (the tf32x3f kernel's 100 KB of shared memory exceed what sm_86 / sm_89 give a block: FFMA there)
    if (st.path == PATH_MMA && (PASSES == 1 || st.smem_optin >= ATTN_MMA_F_SMEM_BYTES)) {
        int chunk = 0, splits = 1;
        mma_split_plan(S, chunk, splits);
        const unsigned smem = PASSES == 3 ? ATTN_MMA_F_SMEM_BYTES : ATTN_MMA_SMEM_BYTES;
        if (chunk) {
            if (!ensure_split_scratch((long long)grid1.x * H * splits, (long long)grid1.x * H)) return false;
            attention_prefill_split_tf32x3f<<<dim3(grid1.x, H, splits), 128, smem>>>(
                q, 3 * D, k, v, 3 * D, st.att, D, S, S, 0, 0, chunk, st.part_o, st.part_ml, st.counters);
        } else if (PASSES == 3) {
            attention_prefill_tf32x3f<<<grid1, 128, smem>>>(q, 3 * D, k, v, 3 * D, st.att, D, S, S, 0, 0);
        } else {
            attention_prefill_tf32<<<grid1, 128, smem>>>(q, 3 * D, k, v, 3 * D, st.att, D, S, S, 0, 0);
        }
        return launched("attention (mma.sync)");
    }
    attention_prefill_f32<<<grid1, 256, ATTN_F32_SMEM_BYTES>>>(q, 3 * D, k, v, 3 * D, st.att, D, S, S, 0, 0);
    return launched("attention (fp32)");
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
    if (path < PATH_SIMT || path > PATH_WGMMA) {
        std::fprintf(stderr, "gpt2block solve(): unknown code path %d\n", path);
        return false;
    }
    if (!ok(cudaDeviceGetAttribute(&st.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute") ||
        !ok(cudaDeviceGetAttribute(&st.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
            "cudaDeviceGetAttribute"))
        return false;
    if (path == PATH_WGMMA) {
        const size_t floats = (size_t)WG_PLANES * ((size_t)3 * D * cdiv(D, 32) * 32 + (size_t)D * cdiv(D, 32) * 32 +
                                                   (size_t)4 * D * cdiv(D, 32) * 32 + (size_t)D * cdiv(4 * D, 32) * 32);
        if (!ok(cudaMalloc(&st.wplanes, sizeof(float) * floats), "cudaMalloc of the weight planes") ||
            !ok(cudaStreamCreateWithFlags(&st.side, cudaStreamNonBlocking), "cudaStreamCreate") ||
            !ok(cudaEventCreateWithFlags(&st.fork, cudaEventDisableTiming), "cudaEventCreate") ||
            !ok(cudaEventCreateWithFlags(&st.fork2, cudaEventDisableTiming), "cudaEventCreate"))
            return false;
        for (auto& e : st.ready)
            if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) return false;
        const unsigned smem = ATTN_WG_SMEM_BYTES(WG_PLANES);
        if (PASSES == 3)
            cudaFuncSetAttribute(attention_wg_tf32x3, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        else
            cudaFuncSetAttribute(attention_wg_tf32, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    } else if (path == PATH_MMA) {
        cudaFuncSetAttribute(attention_prefill_tf32x3f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             ATTN_MMA_F_SMEM_BYTES);
        cudaFuncSetAttribute(attention_prefill_split_tf32x3f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             ATTN_MMA_F_SMEM_BYTES);
        cudaFuncSetAttribute(attention_prefill_tf32, cudaFuncAttributeMaxDynamicSharedMemorySize, ATTN_MMA_SMEM_BYTES);
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
    cudaFree(st.h);           // one allocation holds all four; cudaFree(nullptr) is a no-op
    st.h = st.qkv = st.att = st.f = nullptr;
    st.rows = 0;
    float* base = nullptr;
    if (!ok(cudaMalloc(&base, sizeof(float) * (size_t)rows * 9 * D), "cudaMalloc of the workspace")) return false;
    st.h = base;
    st.qkv = st.h + (size_t)rows * D;
    st.att = st.qkv + (size_t)rows * 3 * D;
    st.f = st.att + (size_t)rows * D;
    st.rows = rows;
    return true;
}

static bool layernorm(const float* x, const float* g, const float* b, float* y, int rows, const char* what) {
    layernorm_f32<<<(unsigned)cdiv(rows, LN_WARPS), 32 * LN_WARPS>>>(x, g, b, y, rows, D, D, D, 1e-5f);
    return launched(what);
}

// The wgmma path's weight planes: matrix i (0 W_qkv, 1 W_attn, 2 W_fc, 3 W_proj) of `weights`.
static const int MAT_K[4] = {D, D, D, 4 * D}, MAT_N[4] = {3 * D, D, 4 * D, D};
static const long long MAT_OFF[4] = {O_W_QKV, O_W_ATTN, O_W_FC, O_W_PROJ};

static float* planes_of(int i) {
    if (st.wplanes == nullptr) return nullptr;  // (the other paths read W as stored)
    float* p = st.wplanes;
    for (int j = 0; j < i; ++j) p += (size_t)WG_PLANES * MAT_N[j] * cdiv(MAT_K[j], 32) * 32;
    return p;
}

static bool make_planes(const float* w, int i) {
    const int K = MAT_K[i], N = MAT_N[i];
    gemm_wg_split_planes_kn<<<dim3((unsigned)cdiv(N, GW_PLANES_N), (unsigned)cdiv(K, 32)), dim3(32, 8), 0, st.side>>>(
        w + MAT_OFF[i], planes_of(i), K, N, WG_PLANES);
    return launched("weight planes") && ok(cudaEventRecord(st.ready[i], st.side), "cudaEventRecord");
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
    const float* w = weights;
    const int S = seq_len;
    const bool wg = st.path == PATH_WGMMA;
    // wgmma: W_qkv's planes on the side stream beside the first LayerNorm
    if (wg && !(ok(cudaEventRecord(st.fork, 0), "cudaEventRecord") &&
                ok(cudaStreamWaitEvent(st.side, st.fork, 0), "cudaStreamWaitEvent") && make_planes(w, 0)))
        return;
    if (!layernorm(x, w + O_LN1_G, w + O_LN1_B, st.h, S, "layernorm ln_1")) return;
    if (wg && !ok(cudaStreamWaitEvent(0, st.ready[0], 0), "cudaStreamWaitEvent")) return;
    if (!gemm<GEMM_EPI_BIAS>(st.h, w + O_W_QKV, planes_of(0), w + O_B_QKV, nullptr, st.qkv, S, 3 * D, D, "gemm qkv"))
        return;
    // wgmma: the other three matrices' planes beside attention
    if (wg) {
        if (!ok(cudaEventRecord(st.fork2, 0), "cudaEventRecord") ||
            !ok(cudaStreamWaitEvent(st.side, st.fork2, 0), "cudaStreamWaitEvent"))
            return;
        for (int i = 1; i < 4; ++i)
            if (!make_planes(w, i)) return;
    }
    if (!attention(S)) return;
    if (wg && !ok(cudaStreamWaitEvent(0, st.ready[1], 0), "cudaStreamWaitEvent")) return;
    if (!gemm<GEMM_EPI_RESIDUAL>(st.att, w + O_W_ATTN, planes_of(1), w + O_B_ATTN, x, output, S, D, D,
                                 "gemm attn proj + residual"))
        return;
    if (!layernorm(output, w + O_LN2_G, w + O_LN2_B, st.h, S, "layernorm ln_2")) return;
    if (wg && !ok(cudaStreamWaitEvent(0, st.ready[2], 0), "cudaStreamWaitEvent")) return;
    if (!gemm<GEMM_EPI_GELU>(st.h, w + O_W_FC, planes_of(2), w + O_B_FC, nullptr, st.f, S, 4 * D, D, "gemm fc + gelu"))
        return;
    if (wg && !ok(cudaStreamWaitEvent(0, st.ready[3], 0), "cudaStreamWaitEvent")) return;
    gemm<GEMM_EPI_RESIDUAL>(st.f, w + O_W_PROJ, planes_of(3), w + O_B_PROJ, output, output, S, D, 4 * D,
                            "gemm mlp proj + residual");
}

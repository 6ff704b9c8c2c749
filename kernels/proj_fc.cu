// proj_fc.cu: one token's attention projection with its residual add, then ln_2 and the FC product
// with GELU, in one kernel: the third and fourth kernels of the five-kernel decode step as one, for
// bf16 weights (the decode copies, [N, K] as gemv.cu's nt kernels read them).
//
//   x1 = x + a @ Wo^T + bo                  a: the attention's output [D]; Wo [D, D]
//   f  = gelu(LN(x1; g, b) @ Wf^T + bf)     Wf [4D, D]
//
// Why: every FC block needs all D values of x1 for its LayerNorm, which took a kernel boundary
// (the projection's kernel, then the FC kernel's wait, x1's round trip and a block-wide LayerNorm).
// Here the blocks form clusters of PF_CLUSTER, and every cluster computes the whole projection: its
// block of rank r the rows [r D / PF_CLUSTER, (r + 1) D / PF_CLUSTER). Each block stores its rows
// of x1, and each warp the float64 sum and sum of squares of its rows, into the shared memory of
// every block of the cluster (distributed shared memory); one cluster barrier later every block
// has x1 and its statistics. The projection is computed grid / PF_CLUSTER times; its weights are
// loaded into registers before the wait (from the L2 after the first cluster), so that costs the
// step nothing it waits for.
//
// proj_fc_bf16_m1(const float* a, const float* x, const unsigned short* wo, const float* bo, float* x1,
//                 const float* ln_g, const float* ln_b, float eps, const unsigned short* wf,
//                 const float* bf, float* f)
//   a, x [D] float32; wo [D, D] bf16 bits; bo [D]; x1 [D] (out: written by the first cluster);
//   ln_g, ln_b [D]; wf [4D, D] bf16 bits; bf [4D]; f [4D] (out). x1 and f must not overlap the inputs.
//   Every pointer 16-byte aligned.
// Launch: grid (PF_GRID, 1, 1), block (32 PF_WARPS, 1, 1), dynamic shared memory 2 PF_D^2 / PF_CLUSTER
//   bytes with PF_WO_SMEM (the block's rows of Wo), else none; clusters of
//   (PF_CLUSTER, 1, 1) compiled in (past 8 the function needs the non-portable cluster size
//   attribute); sm_90 only: compiled for an older target the kernel traps. The whole grid must
//   be resident at once (gpt2block checks the driver's count of active clusters).
//   Compile time: PF_D = D (a multiple of 256), PF_CLUSTER, PF_WARPS, PF_GRID (a multiple of
//   PF_CLUSTER), such that warp w of a block takes RO = PF_D / (PF_CLUSTER PF_WARPS) rows of Wo and
//   RF = 4 PF_D / (PF_GRID PF_WARPS) rows of Wf, both powers of two up to 32.
// Programmatic dependent launch: wo, bo, wf, bf, ln_g and ln_b are read before pdl_wait (weights);
//   a and x after it.
// Arithmetic: each output row's products in float32, lane l taking K pieces l, l + 32, ... (8 bf16
//   each) and the lanes' sums added by halving shuffles (warp_sums), as gemv.cu's one-token builds;
//   x1 = (sum + bo) + x and f = gelu(sum + bf) in their order. The LayerNorm's sums are float64 over
//   the warps' partials in one fixed order (so every block of every cluster forms the same
//   statistics, bit for bit), then ln_row_stats / ln_apply4 as everywhere else.

#include "common.cuh"
#include "mma.cuh"      // cp.async
#include "cluster.cuh"  // the cluster barrier, distributed shared memory stores

#ifndef PF_D
#define PF_D 768
#endif
#ifndef PF_CLUSTER
#define PF_CLUSTER 16
#endif
#ifndef PF_WARPS
#define PF_WARPS 12
#endif
#ifndef PF_GRID
#define PF_GRID 128
#endif

// 1: the block's Wo rows go to shared memory before the wait (cp.async) and are read from there in
// the products, instead of living in registers from the start (fewer registers, so that blocks of
// the kernels before and after fit beside this one on an SM).
#ifndef PF_WO_SMEM
#define PF_WO_SMEM 0
#endif

#define PF_KC (PF_D / 256)                             // 16-byte pieces of a row per lane
#define PF_RO (PF_D / (PF_CLUSTER * PF_WARPS))         // Wo rows per warp
#define PF_RF (4 * PF_D / (PF_GRID * PF_WARPS))        // Wf rows per warp
static_assert(PF_D % 256 == 0, "proj_fc: D must be a multiple of 256");
static_assert(PF_GRID % PF_CLUSTER == 0, "proj_fc: the grid must be whole clusters");
static_assert(PF_RO * PF_CLUSTER * PF_WARPS == PF_D, "proj_fc: D rows of Wo over the cluster's warps");
static_assert(PF_RF * PF_GRID * PF_WARPS == 4 * PF_D, "proj_fc: 4D rows of Wf over the grid's warps");
static_assert(PF_RO >= 1 && PF_RO <= 32 && (PF_RO & (PF_RO - 1)) == 0, "proj_fc: Wo rows per warp a power of two");
static_assert(PF_RF >= 1 && PF_RF <= 32 && (PF_RF & (PF_RF - 1)) == 0, "proj_fc: Wf rows per warp a power of two");

// acc[r] += the 8 products of this lane's piece: a (two float4) against 16 bytes of bf16 weights
template <int R>
__device__ __forceinline__ void pf_dot8(float (&acc)[R], int r, const float4& lo, const float4& hi, const uint4& w) {
    float wf[8];
    unpack16(w, wf);
    float s = acc[r];
    s = fmaf(lo.x, wf[0], s);
    s = fmaf(lo.y, wf[1], s);
    s = fmaf(lo.z, wf[2], s);
    s = fmaf(lo.w, wf[3], s);
    s = fmaf(hi.x, wf[4], s);
    s = fmaf(hi.y, wf[5], s);
    s = fmaf(hi.z, wf[6], s);
    s = fmaf(hi.w, wf[7], s);
    acc[r] = s;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PF_CLUSTER_DIMS __cluster_dims__(PF_CLUSTER, 1, 1)
#else
#define PF_CLUSTER_DIMS
#endif

extern "C" __global__ void PF_CLUSTER_DIMS __launch_bounds__(32 * PF_WARPS, 1)
    proj_fc_bf16_m1(const float* __restrict__ a, const float* __restrict__ x, const unsigned short* __restrict__ wo,
                    const float* __restrict__ bo, float* __restrict__ x1, const float* __restrict__ ln_g,
                    const float* __restrict__ ln_b, float eps, const unsigned short* __restrict__ wf,
                    const float* __restrict__ bf, float* __restrict__ f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int D = PF_D, KC = PF_KC, RO = PF_RO, RF = PF_RF, W = PF_WARPS, C = PF_CLUSTER;
    __shared__ __align__(16) float xs[D];         // x1, from every block of the cluster
    __shared__ __align__(16) float gbs[2 * D];    // ln_g, then ln_b
    __shared__ double2 part[C][W];                // each warp's (sum, sum of squares) of its x1 rows

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rank = (int)cluster_rank();
    const int o0 = rank * (D / C) + warp * RO;                  // this warp's Wo rows
    const int n0 = blockIdx.x * (4 * D / PF_GRID) + warp * RF;  // and Wf rows
    // after warp_sums, row i of a warp's R rows lands on lanes i * 32 / R ..; the first of them owns it
    const int o_mine = o0 + lane / (32 / RO), n_mine = n0 + lane / (32 / RF);
    const bool o_own = lane % (32 / RO) == 0, n_own = lane % (32 / RF) == 0;

    // Before the wait: weights into registers (Wo read by every cluster, so left to the L2's usual
    // policy; Wf evict-first, as gemv.cu's one-token builds), biases, and g, b into shared memory.
    pdl_trigger();
    cluster_arrive_relaxed();  // the first phase of the barrier below: this block has started
    uint4 wov[PF_WO_SMEM ? 1 : KC][RO], wfv[KC][RF];
    extern __shared__ uint4 wos[];  // PF_WO_SMEM: the block's D / C rows of Wo, [D / C][D / 8]
    if (PF_WO_SMEM) {
        const uint4* src = reinterpret_cast<const uint4*>(wo + (long long)rank * (D / C) * D);
        for (int i = threadIdx.x; i < (D / C) * (D / 8); i += 32 * W) cp_async16(wos + i, src + i, 16);
    }
    const unsigned long long first = l2_policy(false);
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const int k = j * 256 + lane * 8;
        if (!PF_WO_SMEM) {
#pragma unroll
            for (int i = 0; i < RO; ++i) wov[PF_WO_SMEM ? 0 : j][i] = ld_pre_wait4u(wo + (long long)(o0 + i) * D + k);
        }
#pragma unroll
        for (int i = 0; i < RF; ++i) wfv[j][i] = ld_pre_wait4u(wf + (long long)(n0 + i) * D + k, first);
    }
    const float bo_mine = ld_pre_wait(bo + o_mine), bf_mine = ld_pre_wait(bf + n_mine);
    for (int i = threadIdx.x; i < D / 2; i += 32 * W)
        cp_async16(gbs + 4 * i, i < D / 4 ? ln_g + 4 * i : ln_b + 4 * (i - D / 4), 16);
    cp_async_commit();
    if (PF_WO_SMEM) {
        cp_async_wait<0>();  // Wo, g and b in shared memory (weights: nothing before us writes them)
        __syncthreads();
    }
    pdl_wait();

    // x1 = x + a Wo^T + bo for this warp's RO rows
    const float x_mine = x[o_mine];
    float acc[RO];
#pragma unroll
    for (int i = 0; i < RO; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const float4* ap = reinterpret_cast<const float4*>(a + j * 256 + lane * 8);
        const float4 lo = ap[0], hi = ap[1];
#pragma unroll
        for (int i = 0; i < RO; ++i)
            pf_dot8(acc, i, lo, hi, PF_WO_SMEM ? wos[(warp * RO + i) * (D / 8) + j * 32 + lane] : wov[PF_WO_SMEM ? 0 : j][i]);
    }
    const float v = (warp_sums<RO>(acc, lane) + bo_mine) + x_mine;  // row o_mine's x1 (on its owner)
    if (o_own && blockIdx.x < C) x1[o_mine] = v;                     // the first cluster writes x1 out

    // The warp's float64 sum and sum of squares over its rows' owners (lanes 32 / RO apart)
    double s = o_own ? (double)v : 0.0, q = o_own ? (double)v * (double)v : 0.0;
#pragma unroll
    for (int m = 16; m >= 32 / RO; m >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, m);
        q += __shfl_xor_sync(0xffffffffu, q, m);
    }
    s = __shfl_sync(0xffffffffu, s, 0);  // the warp's sums, on lanes 0, 32 / RO, ... only until here
    q = __shfl_sync(0xffffffffu, q, 0);
    const float row = __shfl_sync(0xffffffffu, v, (lane % RO) * (32 / RO));  // row lane % RO's x1

    // Into every block of the cluster: the rows to xs[o0 ..], the sums to part[rank][warp]
    cluster_wait_acquire();  // the first phase: every block of the cluster has started
    for (int p = lane; p < RO * C; p += 32) st_cluster_f32(xs + o0 + lane % RO, p / RO, row);  // p % RO == lane % RO
    if (lane < C) st_cluster_f64x2(&part[rank][warp], lane, s, q);
    cp_async_wait<0>();        // this thread's copies of g and b
    cluster_arrive_release();  // this block's stores are done
    cluster_wait_acquire();    // and every block's

    // The statistics, in every warp: lane l adds partials l, l + 32, ... in order, then the lanes
    double ss = 0.0, qq = 0.0;
    const double2* pp = &part[0][0];
    for (int p = lane; p < C * W; p += 32) {
        ss += pp[p].x;
        qq += pp[p].y;
    }
    ss = warp_sum(ss);
    qq = warp_sum(qq);
    const LnRow st = ln_row_stats(ss, qq, ln_inv_n(D), eps);

    // f = gelu(LN(x1) Wf^T + bf) for this warp's RF rows, each lane normalizing its own pieces
    float acc2[RF];
#pragma unroll
    for (int i = 0; i < RF; ++i) acc2[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const int k = j * 256 + lane * 8;
        const float4* xp = reinterpret_cast<const float4*>(xs + k);
        const float4* gp = reinterpret_cast<const float4*>(gbs + k);
        const float4* bp = reinterpret_cast<const float4*>(gbs + D + k);
        const float4 lo = ln_apply4(xp[0], st, gp[0], bp[0]), hi = ln_apply4(xp[1], st, gp[1], bp[1]);
#pragma unroll
        for (int i = 0; i < RF; ++i) pf_dot8(acc2, i, lo, hi, wfv[j][i]);
    }
    const float h = warp_sums<RF>(acc2, lane);
    if (n_own) f[n_mine] = gelu_tanh(h + bf_mine);
#else
    __trap();  // clusters: sm_90 only
#endif
}

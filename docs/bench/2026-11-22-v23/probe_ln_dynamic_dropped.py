"""Probe: LayerNorm 8192 x 768 with the rows past each warp's first three handed out by an atomic
counter (dynamic), against the kept kernel; burst times, bits, and SM end spread."""
import sys
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
import cupy as cp, numpy as np, torch
from gpt2block.backends import cuda_ops
from gpt2block.bench import _burst_median, layernorm_sets

SRC = r'''
#define LN_WARPS 4
#define LN_MAX_VEC 6
#define LN_DEPTH 3
#include "layernorm.cu"
__device__ __forceinline__ unsigned long long gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned smid() { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }

// one buffer's turn: ask for a ticket (if still asking), normalize its row, refill it
#define DYN_TURN(V, R)                                                                          \
    {                                                                                           \
        unsigned t = 0u;                                                                        \
        if (asking && lane == 0) t = atomicAdd(counter, 1u);                                    \
        if (R >= 0) { ln_row(V, g, b, y, R, D, D, nvec, lane, eps); ++n; }                      \
        R = -1;                                                                                 \
        if (asking) {                                                                           \
            t = __shfl_sync(0xffffffffu, t, 0);                                                 \
            if (t < (unsigned)ndyn) { R = dyn0 + (int)t; ln_load(V, x, R, D, nvec, lane); }     \
            else { asking = false; if (lane == 0 && t == (unsigned)(ndyn + nw - 1)) atomicExch(counter, 0u); } \
        }                                                                                       \
        if (ra < 0 && rb < 0 && rc < 0) break;                                                  \
    }

template <bool TRACE>
__device__ void ln_dyn_t(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ b,
                         float* __restrict__ y, int rows, int D, float eps, unsigned* counter, unsigned long long* tr) {
    const int lane = threadIdx.x & 31, nvec = D >> 2, nw = gridDim.x * LN_WARPS;
    const int gw = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    const int dyn0 = 3 * nw, ndyn = rows - dyn0;  // > 0 by the launch
    unsigned long long t0 = TRACE ? gt() : 0;
    int n = 0;
    float4 va[LN_MAX_VEC], vb[LN_MAX_VEC], vc[LN_MAX_VEC];
    int ra = gw, rb = gw + nw, rc = gw + 2 * nw;
    ln_load(va, x, ra, D, nvec, lane);
    ln_load(vb, x, rb, D, nvec, lane);
    ln_load(vc, x, rc, D, nvec, lane);
    bool asking = true;
    while (true) {
        DYN_TURN(va, ra)
        DYN_TURN(vb, rb)
        DYN_TURN(vc, rc)
    }
    if (TRACE && lane == 0) { tr[gw * 5] = t0; tr[gw * 5 + 2] = gt(); tr[gw * 5 + 3] = smid(); tr[gw * 5 + 4] = n; }
}
extern "C" __global__ void __launch_bounds__(128) ln_dyn(const float* x, const float* g, const float* b, float* y,
    int rows, int D, float eps, unsigned* counter, unsigned long long* tr) { ln_dyn_t<false>(x, g, b, y, rows, D, eps, counter, tr); }
extern "C" __global__ void __launch_bounds__(128) ln_dyn_traced(const float* x, const float* g, const float* b, float* y,
    int rows, int D, float eps, unsigned* counter, unsigned long long* tr) { ln_dyn_t<true>(x, g, b, y, rows, D, eps, counter, tr); }
'''

def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17", f"-I{ROOT / 'kernels'}"))
    rows, d, sets = 8192, 768, 4
    xs, ys, g, b, xc, yc, gc, bc = layernorm_sets(torch, rows, d, sets)
    nbytes = 2 * rows * d * 4
    sms = 132
    ctr = cp.zeros(1, cp.uint32)
    tr = cp.zeros(4 * sms * 4 * 5, cp.uint64)
    R, I, F = cp.int32(rows), cp.int32, cp.float32
    for per in (4, 3, 2):
        k = mod.get_function("ln_dyn")
        ok = True
        for i in range(sets):
            ref = cp.empty_like(yc[0]); cuda_ops.layernorm(xc[i], gc, bc, ref, 1e-5)
            yc[i].fill(cp.nan)
            k((per * sms,), (128,), (xc[i], gc, bc, yc[i], R, I(d), F(1e-5), ctr, tr))
            ok &= bool((yc[i].view(cp.uint32) == ref.view(cp.uint32)).all())
        print(f"dynamic {per}/SM bit-equal to the kept kernel on {sets} sets: {ok}; counter back to {int(ctr.get()[0])}", flush=True)
    cases = {"torch copy": lambda i: ys[i % sets].copy_(xs[i % sets]),
             "kept": lambda i: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5)}
    for per in (4, 3, 2):
        k = mod.get_function("ln_dyn")
        cases[f"dynamic {per}/SM"] = (lambda k, per: lambda i: k((per * sms,), (128,), (xc[i % sets], gc, bc, yc[i % sets], R, I(d), F(1e-5), ctr, tr)))(k, per)
    res = {}
    for _ in range(3):
        for name, fn in cases.items():
            res.setdefault(name, []).append(_burst_median(torch, fn, 40) * 1e3)
    for name, v in res.items():
        print(f"  {name:20s} " + " / ".join(f"{t:6.2f}" for t in v) + f" us  {nbytes / (min(v) * 1e-6) / 1e12:.3f} TB/s", flush=True)
    print("counter after the runs:", int(ctr.get()[0]))
    kt = mod.get_function("ln_dyn_traced")
    for rep in range(3):
        torch.cuda._sleep(2_000_000)
        for i in range(10):
            kt((4 * sms,), (128,), (xc[i % sets], gc, bc, yc[i % sets], R, I(d), F(1e-5), ctr, tr))
        cp.cuda.runtime.deviceSynchronize()
        t = cp.asnumpy(tr).reshape(-1, 5).astype(np.int64)
        t0 = t[:, 0].min()
        end, sm, n = (t[:, 2] - t0) / 1e3, t[:, 3], t[:, 4]
        pse = np.array([end[sm == s].max() for s in range(sms)])
        psr = np.array([n[sm == s].sum() for s in range(sms)])
        print(f"traced dynamic rep {rep}: warp ends min {end.min():.2f} p50 {np.median(end):.2f} max {end.max():.2f}; SM ends min "
              f"{pse.min():.2f} p50 {np.median(pse):.2f} max {pse.max():.2f}; rows per SM {psr.min()}-{psr.max()}; rows per warp "
              f"{n.min()}-{n.max()}, total {n.sum()}")
main()

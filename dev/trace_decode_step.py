#!/usr/bin/env python3
"""Where a decode step's kernels spend their time after their pdl_wait: per-block stamps.

    python dev/trace_decode_step.py [SIZE] [--cases bf16:1,fp32:1] [--steps 6] [--save PREFIX]

Builds the decode kernels with stamps patched into their text at compile time (kernels/*.cu are
not changed): every kernel that calls pdl_trigger() records, from thread 0 of each block, its
grid, block, SM, the %globaltimer at entry (the block became resident) and after pdl_wait, and
the SM clock (clock64) after pdl_wait and at these points:
  gemv_*_nt (one token; the LayerNorm points in the _ln builds):
    x   the row x has landed (thread 0's cp.async pieces)      ln  the row normalized (barrier passed)
    w   thread 0's first weight chunk usable                   dot the first row group's products done
    sum its warp sums done                                     out the group's slices added (before the stores)
    end the block's end (a barrier, then the stamp)
  attention_decode_f32:
    q   q has landed      fold  the first round folded      pv  the groups' P V summed      end
  lm_screen (the greedy head's screen, "gemv, LayerNorm" of grid one a SM): x, ln as above, w its h
    quantized, end;  lm_rescore_* (the same grid, no LayerNorm): w the largest lb known, dot its
    candidates formed, end
Runs SIZE on random weights (five kernels a block), a 16-token prefill and a few greedy steps,
then the stamped steps; prints per kernel (by grid) the median and 90th percentile over blocks and
layers of each point, in us after the block's own wait (SM clock converted by the clock rate
measured from the stamps), the median gap from the kernel before's last block end to the wait's
release (globaltimer, 32-ns steps), each launch's span from its first wait to its last block's end,
and how often that last block shared its SM with another block of the same launch. The stamps add a few instructions, an atomic and a barrier per
block: a stamped step runs about 10% slower than the product's. Used for docs/PERFORMANCE.md
version 24.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402

from gpt2block.backends import make_runner  # noqa: E402

from gpt2block.backends.cuda import modules as cuda_modules  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

CAP = 1 << 17  # blocks recorded per module
W = 24  # u64 fields per block: 0 grid, 1 block index, 2 SM, 3 entry (ns), 4 wait (ns), 13 wait (clock), 14 end (ns)
POINTS = {"other": [], "gemv": [("x", 5), ("ln", 8), ("w", 9), ("dot", 16), ("sum", 17), ("out", 10), ("end", 12)],
          "attention": [("q", 5), ("fold", 6), ("pv", 7), ("end", 12)]}

HOOKS = r'''
__device__ unsigned long long tr_rec[%d * %d];
__device__ unsigned int tr_n;
__shared__ unsigned int tr_slot_s;
__device__ __forceinline__ unsigned long long tr_gt() { unsigned long long t; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned tr_smid() { unsigned s; asm volatile("mov.u32 %%0, %%%%smid;" : "=r"(s)); return s; }
__device__ __forceinline__ bool tr_t0() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }
__device__ __forceinline__ void tr_entry() {
    if (tr_t0()) {
        const unsigned long long t = tr_gt();
        unsigned s = atomicAdd(&tr_n, 1u);
        if (s >= %d) s = %d - 1;
        tr_slot_s = s;
        unsigned long long* r = tr_rec + %dull * s;
        r[0] = gridDim.x | ((unsigned long long)gridDim.y << 16) | ((unsigned long long)gridDim.z << 32) | ((unsigned long long)blockDim.x << 48);
        r[1] = blockIdx.x | ((unsigned long long)blockIdx.y << 16) | ((unsigned long long)blockIdx.z << 32);
        r[2] = tr_smid();
        r[3] = t;
        for (int i = 4; i < %d; ++i) r[i] = 0;
    }
}
__device__ __forceinline__ void tr_mark(int i) { if (tr_t0()) tr_rec[%dull * tr_slot_s + i] = clock64(); }
__device__ __forceinline__ void tr_gmark(int i) { if (tr_t0()) tr_rec[%dull * tr_slot_s + i] = tr_gt(); }
// a branch on a loaded value: thread 0 waits for the load before the stamp after it
__device__ __forceinline__ unsigned tr_u(const float4& v) { return __float_as_uint(v.x); }
__device__ __forceinline__ unsigned tr_u(const uint4& v) { return v.x; }
''' % (CAP, W, CAP, CAP, W, W, W, W)

TRIG = ('__device__ __forceinline__ void pdl_trigger() {\n',
        '__device__ __forceinline__ void pdl_trigger() {\n    tr_entry();\n')
WAIT = ('    asm volatile("griddepcontrol.wait;\\n" ::: "memory");\n#endif\n}',
        '    asm volatile("griddepcontrol.wait;\\n" ::: "memory");\n#endif\n    tr_gmark(4);\n    tr_mark(13);\n}')
DUMMY = "if (tr_t0() && tr_u({}) == 0x7fc00001u) tr_rec[0] = 0;"  # never true in practice
GEMV_EDITS = [
    ("    cp_async_wait<0>();  // this thread's pieces and its share of g and b\n", "    tr_mark(5);\n"),
    ("    for (int k = tid; k < K4; k += GEMV_NT_THREADS) xs4[k] = ln_apply4(xs4[k], st, gs4[k], bs4[k]);\n"
     "    __syncthreads();\n", "    tr_mark(8);\n"),
    ("            gemv_ln_rows(x, xs + M * K, xs, M, K, eps);\n    }\n",
     "    " + DUMMY.format("wv[0][ROWS - 1]") + "\n    tr_mark(9);\n"),
    ("            load_batch(k0);\n        }\n", "        tr_mark(16);\n"),
    ("                if (lane % LPS == r) mine = s;\n            }\n        }\n", "        tr_mark(17);\n"),
    ("            __syncthreads();  // red is reused by the next row group\n        }\n", "        tr_mark(10);\n"),
    ("    if (ARGMAX && am.out != nullptr) gemv_argmax_finish<MP>(am, best_v, best_i, M, lane, warp);\n",
     "    __syncthreads();\n    tr_mark(12);\n    tr_gmark(14);\n"),
]
SCREEN_EDITS = [  # lm_screen.cu, which includes gemv.cu's device code (and so its anchors)
    # the screened LM head: the screen's h quantized (w) and its end; the rescore's largest lb known
    # (w), its candidates formed (dot) and its end
    ("    lm_screen_quantize_h(xs, hq, K, l1h, t);\n", "    tr_mark(9);\n"),
    ("        lb_part[blockIdx.x] = b;\n    }\n", "    __syncthreads();\n    tr_mark(12);\n    tr_gmark(14);\n"),
    ("    for (int q = 0; q < GEMV_NT_WARPS; ++q) L = fmaxf(L, lb_warp[q]);\n", "    tr_mark(9);\n"),
    ("                    best_i = n;\n                }\n            }\n        }\n    }\n", "    tr_mark(16);\n"),
    ("    gemv_argmax_finish<1>(am, best_v, best_i, 1, lane, warp);\n",
     "    __syncthreads();\n    tr_mark(12);\n    tr_gmark(14);\n"),
]
ATTENTION_EDITS = [
    ("    qv.x *= ATTN_SCALE; qv.y *= ATTN_SCALE; qv.z *= ATTN_SCALE; qv.w *= ATTN_SCALE;\n",
     "    " + DUMMY.format("qv") + "\n    tr_mark(5);\n"),
    ("    attn_dec_fold(qv, kr, vr, n0, sc, red[0], stat, m_run, l_run, o);\n", "    tr_mark(6);\n"),
    ("        for (int gi = 0; gi < 8; ++gi) a += red[gi][tid];\n    }\n", "    tr_mark(7);\n"),
    ("        if (tid < 64) orow[tid] = a / l_run;\n", "        tr_mark(12);\n        tr_gmark(14);\n"),
    ("        orow[tid] = A / L;\n    }\n", "    tr_mark(12);\n    tr_gmark(14);\n"),
]
EDITS = {"gemv.cu": GEMV_EDITS, "lm_screen.cu": GEMV_EDITS + SCREEN_EDITS, "attention.cu": ATTENTION_EDITS}

_read = cuda_modules.read_source


def stamped_source(name: str) -> str:
    """kernels/<name> with the stamps (read_source's text, every edit's anchor checked once)."""
    src = _read(name)
    if TRIG[0] not in src:
        return src
    src = HOOKS + src.replace(TRIG[0], TRIG[1], 1)
    if src.count(WAIT[0]) != 1:
        raise SystemExit("pdl_wait's text changed: update WAIT in dev/trace_decode_step.py")
    src = src.replace(WAIT[0], WAIT[1])
    for anchor, after in EDITS.get(name, []):
        if src.count(anchor) != 1:
            raise SystemExit(f"{name}: the anchor {anchor.strip()[:60]!r} is not unique or gone: update EDITS")
        if after is not None:
            src = src.replace(anchor, anchor + after)
    return src


def stamp_buffers():
    """(tr_n, tr_rec) of every module built with the stamps."""
    out = []
    for mod in cuda_modules._modules.values():
        try:
            n, rec = mod.get_global("tr_n"), mod.get_global("tr_rec")
        except Exception:  # noqa: BLE001 (a module without pdl_trigger has no stamps)
            continue
        out.append((cp.ndarray((1,), cp.uint32, memptr=n), cp.ndarray((CAP * W,), cp.uint64, memptr=rec)))
    return out


def collect() -> np.ndarray:
    recs = [r[: W * min(int(n.get()[0]), CAP)].get().reshape(-1, W).astype(np.int64) for n, r in stamp_buffers()]
    return np.concatenate(recs) if recs else np.zeros((0, W), np.int64)


def report(a: np.ndarray, label: str) -> str:
    a = a[a[:, 4] > 0]  # blocks that left before pdl_wait (idle attention ranks; the embedding has its own)
    ok = (a[:, 14] > a[:, 4]) & (a[:, 12] > a[:, 13])
    ghz = float(np.median((a[ok, 12] - a[ok, 13]) / (a[ok, 14] - a[ok, 4]))) if ok.sum() > 10 else 1.98
    gx, gy, bd = a[:, 0] & 0xFFFF, (a[:, 0] >> 16) & 0xFFFF, (a[:, 0] >> 48) & 0xFFFF
    bd = bd * 2 + (a[:, 5] > 0) * (gy == 1)  # the LayerNorm GEMVs apart from the others of the same grid
    # kernel instances in wait order: a new one where the grid changes or the wait jumps by > 0.5 us
    order = np.argsort(a[:, 4], kind="stable")
    a, gx, gy, bd = a[order], gx[order], gy[order], bd[order]
    cut = np.flatnonzero((np.diff(a[:, 0]) != 0) | (np.diff(a[:, 4]) > 500)) + 1
    inst = np.split(np.arange(len(a)), cut)
    gaps, spans, launches, prev_end = {}, {}, {}, None
    since_attn = 0  # launches since the last attention (or embedding): GEMVs of one grid apart (balanced builds)
    for idx in inst:
        since_attn = 0 if gy[idx[0]] > 1 or gx[idx[0]] == 1 else since_attn + 1  # also from the embedding
        key = (int(gx[idx[0]]), int(gy[idx[0]]), int(bd[idx[0]]), since_attn if gx[idx[0]] > 1 else 0)
        gaps.setdefault(key, [])
        launches.setdefault(key, []).append(idx)
        if prev_end is not None:
            gaps[key].append((a[idx, 4].min() - prev_end) / 1e3)
        ends = a[idx, 14][a[idx, 14] > 0]
        if len(ends):
            prev_end = ends.max()
            last = idx[np.argmax(np.where(a[idx, 14] > 0, a[idx, 14], 0))]
            shared = int((a[idx, 2] == a[last, 2]).sum() > 1)  # the last block shared its SM with one of its launch
            spans.setdefault(key, []).append(((prev_end - a[idx, 4].min()) / 1e3, shared))
    lines = [f"== {label}: {len(a)} blocks in {len(inst)} kernel launches; SM clock {ghz:.3f} GHz (from the stamps)",
             "   us after the block's own wait: p50/p90 over blocks and layers; 'release' = the kernel before's "
             "last block end -> this kernel's first wait release (p50)"]
    for key, g in gaps.items():
        m = np.zeros(len(a), bool)
        for idx in launches[key]:
            m[idx] = True
        kind = "attention" if key[1] > 1 else "gemv" if key[0] > 1 else "other"
        cells = []
        for name, col in POINTS[kind]:
            mm = m & (a[:, col] > 0)
            if mm.sum():
                d = (a[mm, col] - a[mm, 13]) / ghz / 1e3
                cells.append(f"{name} {np.percentile(d, 50):.2f}/{np.percentile(d, 90):.2f}")
        ent = (a[m, 3] - a[m, 4]) / 1e3
        rel = f"{np.median(g):.2f}" if g else "-"
        label_k = kind + (", LayerNorm" if key[2] & 1 else "") + (f", #{key[3]} after attention" if key[3] else "")
        sp = np.array(spans.get(key, [(np.nan, 0)]))
        lines.append(f"   grid {key[0]}x{key[1]}, {key[2] // 2} threads ({label_k}, {m.sum()} blocks): release {rel}, "
                     f"entry p50 {np.percentile(ent, 50):.2f}; " + "  ".join(cells)
                     + f"; span {np.median(sp[:, 0]):.2f} (first wait -> last end, p50), last block on a shared SM "
                       f"in {100 * sp[:, 1].mean():.0f}% of launches")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--cases", default="bf16:1,fp32:1", help="precision:batch pairs (batch 1 has the LayerNorm stamps)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--save", default=None, metavar="PREFIX", help="also write the raw records as PREFIX_<case>.npy")
    a = ap.parse_args()
    cuda_modules.read_source = stamped_source  # before any kernel is built
    w = ModelWeights.random(SIZES[a.size], seed=0)
    rng = np.random.default_rng(0)
    for case in a.cases.split(","):
        prec, b = case.split(":")
        runner = make_runner(w, "cuda", prec)
        cache = runner.new_cache(int(b))
        tok = np.stack([runner.prefill(cache, r, rng.integers(0, 50257, 16)) for r in range(int(b))]).argmax(-1)
        for _ in runner.greedy_steps(cache, tok, max_steps=4):  # graphs captured, kernels built
            pass
        cp.cuda.runtime.deviceSynchronize()
        for n, _ in stamp_buffers():
            n[...] = 0
        for _ in runner.greedy_steps(cache, tok, max_steps=a.steps):
            pass
        cp.cuda.runtime.deviceSynchronize()
        recs = collect()
        if a.save:
            np.save(f"{a.save}_{prec}_b{b}.npy", recs)
        print(report(recs, f"{a.size} {prec} batch {b}, {a.steps} steps"), flush=True)


if __name__ == "__main__":
    main()

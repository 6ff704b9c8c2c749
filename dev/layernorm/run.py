#!/usr/bin/env python3
"""LayerNorm variants (layernorm_f32), checked and timed: python3 dev/layernorm/run.py [--draws 20000] [--variants 1,2,3,4]

layernorm1.cu  two roundings on the way out (x - c - m, then (v * rstd) * g + b), the fp32 squares' errors lost
layernorm2.cu  the output from x - c with the unrounded scale rstd * g and one last rounding; the fp32
               squares' rounding errors summed beside them
layernorm3.cu  2 plus x - c taken exactly (TwoSum) in the statistics and the output
4              2 without the squares' rounding errors: the product, kernels/layernorm.cu itself

For each variant and width: one-row draws as tests/gpu/test_model_cuda.py::test_layernorm_kernel makes them
(one row a call, each with its own gains and biases; torch's peer too, as the test calls it), the draws over the test's limit (2 |torch - fp64| + one float32
ulp of max |fp64|), the worst error in ulps; then the time of 8192 x 768 (two rows loaded ahead) and
1024 x 768 (one ahead: prefill, solve()) in bursts of 10 launches, median of 30. Needs a GPU, CuPy, torch.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from gpt2block.backends.numpy_ref import layer_norm  # noqa: E402

WARPS = 4
PRODUCT = 4  # the variant kernels/layernorm.cu is


def build(cp, variant: int, vec: int, depth: int):
    path = ROOT / "kernels" / "layernorm.cu" if variant == PRODUCT else HERE / f"layernorm{variant}.cu"
    src = path.read_text()
    opts = ("--std=c++17", f"-I{ROOT / 'kernels'}", f"-DLN_WARPS={WARPS}", f"-DLN_MAX_VEC={vec}", f"-DLN_DEPTH={depth}")
    return cp.RawModule(code=src, options=opts).get_function("layernorm_f32")


def run(cp, k, x, g, b, y, blocks):
    rows, d = x.shape
    k((blocks,), (32 * WARPS,), (x, g, b, y, np.int32(rows), np.int32(d), np.int32(d), np.int32(d), np.float32(1e-5)))


def draws(rng, n, d):
    x = rng.normal(0, 1, (n, d)).astype(np.float32)
    x[:, :3] *= 3000.0
    x += 2000.0
    g = rng.uniform(0.8, 1.2, (n, d)).astype(np.float32)
    b = rng.normal(0, 0.1, (n, d)).astype(np.float32)
    return x, g, b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--widths", default="768,1024,1280,1600")
    ap.add_argument("--variants", default="1,2,3,4")
    a = ap.parse_args()
    import cupy as cp
    import torch

    variants = [int(v) for v in a.variants.split(",")]
    rng = np.random.default_rng(0)
    print(f"{'variant':>7} {'D':>5} {'draws':>6} {'over':>5} {'max ulp':>8} {'torch max ulp':>13} {'worst/limit':>11}")
    for d in map(int, a.widths.split(",")):
        x, g, b = draws(rng, a.draws, d)
        mu = x.astype(np.float64).mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        ref = (x - mu) / np.sqrt(var + 1e-5) * g + b
        ulp = np.spacing(np.abs(ref).max(-1).astype(np.float32)).astype(np.float64)
        peer_err = np.empty(a.draws)
        for i in range(a.draws):
            t = torch.nn.functional.layer_norm(torch.tensor(x[i:i + 1]).cuda(), (d,), torch.tensor(g[i]).cuda(),
                                               torch.tensor(b[i]).cuda(), 1e-5).double().cpu().numpy()
            peer_err[i] = np.abs(t[0] - ref[i]).max()
        limit = 2 * peer_err + np.maximum(1e-6, ulp)
        vec = -(-d // 128)
        for v in variants:
            k = build(cp, v, vec, 2)
            dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)
            dy = cp.full(x.shape, cp.nan, cp.float32)
            for i in range(a.draws):
                run(cp, k, dx[i:i + 1], dg[i], db[i], dy[i:i + 1], 1)
            ours = cp.asnumpy(dy).astype(np.float64)
            err = np.where(np.isfinite(ours).all(-1), np.abs(ours - ref).max(-1), np.inf)
            print(f"{v:>7} {d:>5} {a.draws:>6} {int((err > limit).sum()):>5} {float((err / ulp).max()):>8.3f} "
                  f"{float((peer_err / ulp).max()):>13.3f} {float((err / limit).max()):>11.3f}", flush=True)
    print()
    print(f"{'variant':>7} {'shape':>10} {'us':>7} {'TB/s':>6}")
    for rows, depth in ((8192, 3), (1024, 2)):
        d = 768
        x = cp.asarray(rng.normal(0, 1, (rows, d)).astype(np.float32))
        g = cp.asarray(rng.uniform(0.8, 1.2, d).astype(np.float32))
        b = cp.asarray(rng.normal(0, 0.1, d).astype(np.float32))
        y = cp.empty_like(x)
        blocks = min(-(-rows // WARPS), 4 * cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"])
        for v in variants:
            k = build(cp, v, 6, depth)
            for _ in range(20):
                run(cp, k, x, g, b, y, blocks)
            times = []
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            for _ in range(30):
                e0.record()
                for _ in range(10):
                    run(cp, k, x, g, b, y, blocks)
                e1.record()
                e1.synchronize()
                times.append(cp.cuda.get_elapsed_time(e0, e1) / 10 * 1e3)
            us = float(np.median(times))
            print(f"{v:>7} {f'{rows}x{d}':>10} {us:>7.2f} {2 * rows * d * 4 / us / 1e6:>6.3f}", flush=True)


if __name__ == "__main__":
    main()

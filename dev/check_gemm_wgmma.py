"""Check and time kernels/gemm_wgmma.cu (wgmma on prepared weight planes, sm_90a) against gemm.cu's
mma.sync kernels and torch.

    python dev/check_gemm_wgmma.py [--shapes qkv,proj,...] [--m 1024]

Accuracy: fresh random data per case (a ~ N(0,1), W and bias ~ N(0, 0.02), the residual N(0,1)),
outputs poisoned with NaN, max |error| / max |ref| against torch float64; tf32x3 is judged against
torch fp32's error (at most 2x + 1 ulp), tf32 against 1e-3. Speed: CUDA events, median of 20
bursts of 5 launches, in TFLOP/s, every wgmma tile next to gemm.cu's best tile and torch fp32 /
TF32; and the time of prepare_planes (the per-call cost of solve()). Exits 1 when a case fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends.cuda import linear as L  # noqa: E402

SHAPES = {"qkv": (768, 2304, "bias"), "proj": (768, 768, "bias_residual"), "fc": (768, 3072, "bias_gelu"),
          "mlp": (3072, 768, "bias_residual"), "lm_head": (768, 50257, "nt"), "xl_fc": (1600, 6400, "bias_gelu"),
          "odd": (100, 333, "bias_residual")}
EPS32 = float(np.finfo(np.float32).eps)

rng = np.random.default_rng()


def median_ms(f, reps=20, burst=5):
    f()
    cp.cuda.Device().synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(reps):
        e0.record()
        for _ in range(burst):
            f()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) / burst)
    return statistics.median(ts)


def torch_out(a, w, bias, res, suffix, dtype):
    ta, tw = (torch.as_tensor(x, device="cuda").to(dtype) for x in (a, w))
    r = ta @ (tw.T if suffix == "nt" else tw)
    if bias is not None:
        r = r + torch.as_tensor(bias, device="cuda").to(dtype)
    if suffix == "bias_gelu":
        r = torch.nn.functional.gelu(r, approximate="tanh")
    if res is not None:
        r = r + torch.as_tensor(res, device="cuda").to(dtype)
    return r.double()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--m", default="1024")
    ap.add_argument("--variants", default=",".join(L.VARIANTS))
    ap.add_argument("--no-mma-sync", action="store_true", help="skip gemm.cu's tiles")
    args = ap.parse_args()
    unknown = set(args.variants.split(",")) - set(L.VARIANTS)
    if unknown:
        ap.error(f"--variants: unknown {sorted(unknown)}; choose from {', '.join(L.VARIANTS)}")
    torch.backends.cuda.matmul.allow_tf32 = False
    if not L.wgmma_available():
        print("gemm_wgmma.cu needs a compute capability 9.0 GPU (H100 / H200); nothing to check here")
        return 0
    failed = 0
    print(f"{'shape':14s} {'variant':7s} {'kernel':14s} {'TFLOP/s':>8s} {'err/max':>9s} {'/torch':>7s}")
    for m in map(int, args.m.split(",")):
        for label in args.shapes.split(","):
            k, n, suffix = SHAPES[label]
            name = f"{label} {m}"
            a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
            w = cp.asarray((rng.standard_normal((n, k) if suffix == "nt" else (k, n)) * 0.02).astype(np.float32))
            bias = None if suffix == "nt" else cp.asarray((rng.standard_normal(n) * 0.02).astype(np.float32))
            res = cp.asarray(rng.standard_normal((m, n), dtype=np.float32)) if suffix == "bias_residual" else None
            ref = torch_out(a, w, bias, res, suffix, torch.float64)
            scale = ref.abs().max().item()
            t_err = (torch_out(a, w, bias, res, suffix, torch.float32) - ref).abs().max().item() / scale
            flops = 2 * m * n * k
            ta, tw = torch.as_tensor(a, device="cuda"), torch.as_tensor(w, device="cuda")
            twm = tw.T if suffix == "nt" else tw
            print(f"{name:14s} {'fp32':7s} {'torch':14s} {flops / median_ms(lambda: ta @ twm) / 1e9:8.1f} {t_err:9.2e}")
            torch.backends.cuda.matmul.allow_tf32 = True
            print(f"{name:14s} {'tf32':7s} {'torch':14s} {flops / median_ms(lambda: ta @ twm) / 1e9:8.1f}")
            torch.backends.cuda.matmul.allow_tf32 = False
            for variant in args.variants.split(","):
                out = cp.empty((m, n), dtype=np.float32)
                if suffix == "nt":
                    mma = lambda t, variant=variant, out=out: L.gemm_nt(a, w, out, variant=variant, tile=t)  # noqa: E731
                else:
                    mma = lambda t, variant=variant, out=out: L.gemm(  # noqa: E731
                        a, w, bias, out, epilogue=suffix, residual=res, variant=variant, tile=t)
                if not args.no_mma_sync:
                    best = min(median_ms(lambda t=t: mma(t)) for t in L.TILES)
                    print(f"{name:14s} {variant:7s} {'mma.sync':14s} {flops / best / 1e9:8.1f}")
                p = L.prepare_planes(w, variant, transposed=suffix == "nt")
                for tile in L.WG_TILES[variant]:
                    out.fill(np.nan)
                    f = lambda: L.gemm_planes(a, p, bias, out, epilogue=None if suffix == "nt" else suffix,  # noqa: E731
                                              residual=res, tile=tile)
                    f()
                    cp.cuda.Device().synchronize()
                    err = (torch.as_tensor(out, device="cuda").double() - ref).abs().max().item() / scale
                    ms = median_ms(f)
                    ok = np.isfinite(err) and (err <= 2 * t_err + EPS32 if variant == "tf32x3" else err <= 1e-3)
                    failed += not ok
                    picked = "*" if tile == L.pick_wg_tile(variant, m, n, k=k) else " "
                    tname = f"wgmma {tile.label}{picked}"
                    print(f"{name:14s} {variant:7s} {tname:14s} {flops / ms / 1e9:8.1f} "
                          f"{err:9.2e} {err / t_err:7.2f}{'' if ok else '  FAIL'}")
                prep = median_ms(lambda: L.prepare_planes(w, variant, transposed=suffix == "nt"), reps=5, burst=2)
                print(f"{name:14s} {variant:7s} {'prepare_planes':14s} {prep * 1e3:7.1f} us")
    print(f"{failed} case(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

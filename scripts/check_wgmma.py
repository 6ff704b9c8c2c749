"""Check and time kernels/gemm_wgmma.cu (wgmma, sm_90a) against gemm.cu's mma.sync kernels and torch.

    python scripts/check_wgmma.py

Accuracy: fresh random data per case (a ~ N(0,1), b and bias ~ N(0, 0.02)), outputs poisoned with
NaN, max |error| / max |ref| against torch float64; tf32x3 is judged against torch fp32's error
(ratio), tf32 against 1e-3. Speed: CUDA events, median of 20 bursts of 5 launches, in TFLOP/s, at
the gpt2 block's shapes (M = 1024), the LM head (N = 50257) and M = 4096, next to gemm.cu's best
tile and torch fp32 / TF32. Exits 1 when a case's tf32x3 error exceeds 2x torch's + 1 ulp.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends import cuda_linear as L  # noqa: E402
from gpt2block.backends.cuda_modules import kernel, launch  # noqa: E402

CONFIGS = ((2, 128), (1, 64))  # (GW_WG, GW_BN)
SHAPES = [("qkv", 1024, 768, 2304, "bias"), ("proj", 1024, 768, 768, "bias_residual"),
          ("fc", 1024, 768, 3072, "bias_gelu"), ("mlp", 1024, 3072, 768, "bias_residual"),
          ("lm head", 1024, 768, 50257, "nt"), ("fc 4096", 4096, 768, 3072, "bias")]
EPS32 = float(np.finfo(np.float32).eps)
rng = np.random.default_rng()


def wg_call(variant, suffix, wg, bn, a, b, bias, res, out):
    m, k = a.shape
    n = b.shape[0] if suffix == "nt" else b.shape[1]
    fn = kernel("gemm_wgmma", f"gemm_wg_{variant}_{suffix}",
                (("GW_WG", wg), ("GW_BN", bn)) + L._VARIANT_DEFINES[variant])
    smem = L.wgmma_smem_bytes(variant, wg, bn)
    args = (a, b, bias if bias is not None else np.uint64(0), res if res is not None else np.uint64(0), out,
            np.int32(m), np.int32(n), np.int32(k))
    return lambda: launch(fn, (-(-m // (64 * wg)), -(-n // bn), 1), (128 * wg, 1, 1), args, smem)


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


def data(m, k, n, suffix):
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray((rng.standard_normal((n, k) if suffix == "nt" else (k, n)) * 0.02).astype(np.float32))
    bias = None if suffix == "nt" else cp.asarray((rng.standard_normal(n) * 0.02).astype(np.float32))
    res = cp.asarray(rng.standard_normal((m, n), dtype=np.float32)) if suffix == "bias_residual" else None
    return a, b, bias, res


def torch_out(a, b, bias, res, suffix, dtype):
    ta, tb = (torch.as_tensor(x, device="cuda").to(dtype) for x in (a, b))
    r = ta @ (tb.T if suffix == "nt" else tb)
    if bias is not None:
        r = r + torch.as_tensor(bias, device="cuda").to(dtype)
    if suffix == "bias_gelu":
        r = torch.nn.functional.gelu(r, approximate="tanh")
    if res is not None:
        r = r + torch.as_tensor(res, device="cuda").to(dtype)
    return r.double()


def main() -> int:
    torch.backends.cuda.matmul.allow_tf32 = False
    if cp.cuda.Device().compute_capability != "90":
        print("gemm_wgmma.cu needs an sm_90 GPU (H100 / H200); nothing to check here")
        return 0
    failed = 0
    print(f"{'shape':8s} {'variant':7s} {'kernel':12s} {'TFLOP/s':>8s} {'err/max':>9s} {'/torch':>7s}")
    for label, m, k, n, suffix in SHAPES:
        a, b, bias, res = data(m, k, n, suffix)
        ref = torch_out(a, b, bias, res, suffix, torch.float64)
        scale = ref.abs().max().item()
        t_err = (torch_out(a, b, bias, res, suffix, torch.float32) - ref).abs().max().item() / scale
        flops = 2 * m * n * k
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
        tbm = tb.T if suffix == "nt" else tb
        print(f"{label:8s} {'fp32':7s} {'torch':12s} {flops / median_ms(lambda: ta @ tbm) / 1e9:8.1f} {t_err:9.2e}")
        torch.backends.cuda.matmul.allow_tf32 = True
        print(f"{label:8s} {'tf32':7s} {'torch':12s} {flops / median_ms(lambda: ta @ tbm) / 1e9:8.1f}")
        torch.backends.cuda.matmul.allow_tf32 = False
        for variant in ("tf32x3", "tf32"):
            out = cp.empty((m, n), dtype=np.float32)

            def mma(t, variant=variant, out=out):
                if suffix == "nt":
                    return lambda: L.gemm_nt(a, b, out, variant=variant, tile=t)
                return lambda: L.gemm(a, b, bias, out, epilogue=suffix, residual=res, variant=variant, tile=t)

            best = min(median_ms(mma(t)) for t in L.TILES)
            print(f"{label:8s} {variant:7s} {'mma.sync':12s} {flops / best / 1e9:8.1f}")
            for wg, bn in CONFIGS:
                out.fill(np.nan)
                f = wg_call(variant, suffix, wg, bn, a, b, bias, res, out)
                f()
                cp.cuda.Device().synchronize()
                err = (torch.as_tensor(out, device="cuda").double() - ref).abs().max().item() / scale
                ms = median_ms(f)
                ok = np.isfinite(err) and (err <= 2 * t_err + EPS32 if variant == "tf32x3" else err <= 1e-3)
                failed += not ok
                print(f"{label:8s} {variant:7s} {f'wgmma {64 * wg}x{bn}':12s} {flops / ms / 1e9:8.1f} {err:9.2e} "
                      f"{err / t_err:7.2f}{'' if ok else '  FAIL'}")
    print(f"{failed} case(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

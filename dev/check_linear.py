"""Check and time the matrix kernels (kernels/gemm.cu, kernels/gemv.cu) on the GPU.

    python dev/check_linear.py            # accuracy on awkward shapes, then timings
    python dev/check_linear.py --quick    # fewer shapes, no timings
    python dev/check_linear.py --no-time  # accuracy only

Accuracy: fresh random data per case (a ~ N(0,1) like a LayerNorm output, weights and bias
~ N(0, 0.02), residual ~ N(0,1)), outputs poisoned with NaN before the run, compared with a
float64 reference (torch float64 on the GPU). Per case: max |error| and max |error| / max |ref|,
and the ratio to torch float32's error (TF32 off) against the same reference. Limits:
  tf32x3 GEMM; f32 and bf16 GEMV:       error <= 2 x torch fp32's + one fp32 ulp of max |ref|
                                        (bf16: against the bf16-rounded weights)
  tf32 GEMM:                            max |ours - ref| <= 1e-3 x max |ref| (1e-3 of the output's scale;
                                        elementwise atol = rtol = 1e-3 is the block-level test's job:
                                        a K = 3072 product of N(0,1) data has errors ~1e-3 at its tails)
The checks are tests/gpu/linear_checks.py's (the GPU tests run a subset of these cases); the full
case lists and the timings are this script's. Exit status 1 when any case fails. Timings: CUDA events, median of 20 samples after warm-up,
each sample a burst of launches (GEMV: one CUDA graph of the burst), next to torch's fp32 and TF32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # linear_checks: the checks the GPU tests run

from linear_checks import gemm_case, gemm_repeat_case, gemv_case, gemv_repeat_case  # noqa: E402

from gpt2block.backends.cuda import linear as L  # noqa: E402
from gpt2block.backends.cuda.modules import sm_count  # noqa: E402

WIDTHS = (768, 1024, 1280, 1600)
# GEMM rows: the engine's linear() sends M <= GEMV_MAX_M (8) to the GEMV, so the GEMM's
# accuracy is judged from M = 9 up (odd tiny-K shapes below still check its bounds at M < 9).
GEMM_MS = (9, 30, 100, 1023, 1025, 4096)
VOCAB = 50257


def gpt2_shapes(d: int) -> list[tuple[int, int]]:
    """(K, N) of the four block matrices of width d: qkv, attn proj, fc, mlp proj."""
    return [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]



# ---------------------------------------------------------------------------------------------
# The case lists (tests/gpu/test_linear.py runs a subset).


def gemm_cases(quick: bool = False) -> list[dict]:
    cases = []
    ms = (9, 100, 1025) if quick else GEMM_MS
    widths = (768, 1600) if quick else WIDTHS
    for variant in L.VARIANTS:
        for d in widths:
            for k, n in gpt2_shapes(d):
                for m in ms:
                    cases.append(dict(variant=variant, m=m, k=k, n=n, epilogue="bias"))
        for epilogue in ("bias_gelu", "bias_residual"):
            for m in (9, 30, 1025):
                cases.append(dict(variant=variant, m=m, k=768, n=3072 if epilogue == "bias_gelu" else 768,
                                  epilogue=epilogue))
        cases.append(dict(variant=variant, m=100, k=3072, n=768, epilogue="bias_residual", inplace=True))
        # odd sizes: K not a multiple of 4, N odd, N = 1, misaligned views (4-byte copy path)
        for m, k, n in ((7, 30, 5), (33, 100, 97), (1, 1, 1), (130, 68, 1000), (65, 64, 63)):
            cases.append(dict(variant=variant, m=m, k=k, n=n, epilogue="bias"))
        cases.append(dict(variant=variant, m=100, k=768, n=768, epilogue="bias_gelu", offset=1))
        cases.append(dict(variant=variant, m=100, k=768, n=770, epilogue="bias_residual", offset=2))
        for m in ((9, 30, 1025) if quick else (9, 30, 100, 1025)):
            for d in ((768,) if quick else (768, 1600)):
                cases.append(dict(variant=variant, m=m, k=d, n=VOCAB, nt=True))
        cases.append(dict(variant=variant, m=37, k=30, n=101, nt=True))
    if L.wgmma_available():  # the same products on the wgmma GEMM (K % 4 == 0, aligned operands)
        cases += [dict(c, planes=True) for c in cases if c["k"] % 4 == 0 and not c.get("offset")]
    return cases


def gemv_cases(quick: bool = False) -> list[dict]:
    cases = []
    for wdtype in ("f32", "bf16"):
        for d in ((768, 1600) if quick else WIDTHS):
            for k, n in gpt2_shapes(d):
                for m in ((1, 8) if quick else range(1, 9)):
                    cases.append(dict(wdtype=wdtype, m=m, k=k, n=n, epilogue="bias"))
        for epilogue in ("bias_gelu", "bias_residual"):
            for m in (1, 5, 8):
                cases.append(dict(wdtype=wdtype, m=m, k=768, n=3072 if epilogue == "bias_gelu" else 768,
                                  epilogue=epilogue))
        cases.append(dict(wdtype=wdtype, m=3, k=3072, n=768, epilogue="bias_residual", inplace=True))
        cases.append(dict(wdtype=wdtype, m=2, k=100, n=64, epilogue="bias"))  # K not a multiple of 32
        cases.append(dict(wdtype=wdtype, m=8, k=5000, n=8, epilogue="bias"))  # one strip, many splits
        for m in ((1, 8) if quick else range(1, 9)):
            for d in ((768,) if quick else (768, 1600)):
                cases.append(dict(wdtype=wdtype, m=m, k=d, n=VOCAB, nt=True, epilogue=None))
        # the decode layout: transposed matrices, LayerNorm fused into QKV / FC / LM head
        for d in ((768, 1600) if quick else WIDTHS):
            for m in ((1, 8) if quick else (1, 3, 8)):
                cases += [dict(wdtype=wdtype, m=m, k=d, n=3 * d, nt=True, epilogue="bias", ln=True),
                          dict(wdtype=wdtype, m=m, k=d, n=d, nt=True, epilogue="bias_residual"),
                          dict(wdtype=wdtype, m=m, k=d, n=4 * d, nt=True, epilogue="bias_gelu", ln=True),
                          dict(wdtype=wdtype, m=m, k=4 * d, n=d, nt=True, epilogue="bias_residual")]
            cases.append(dict(wdtype=wdtype, m=8, k=d, n=VOCAB, nt=True, epilogue=None, ln=True))
        cases.append(dict(wdtype=wdtype, m=4, k=3072, n=768, nt=True, epilogue="bias_residual", inplace=True))
        cases.append(dict(wdtype=wdtype, m=2, k=104, n=33, nt=True, epilogue="bias_gelu"))
    return cases


# ---------------------------------------------------------------------------------------------
# Timing.


def _median_ms(run, reps: int, samples: int = 20, warmup: int = 3, graph: bool = False) -> float:
    """Median over ``samples`` of (time of ``reps`` back-to-back runs) / reps."""
    stream = cp.cuda.Stream()  # blocking: ordered after the uploads on the default stream
    with stream:
        for _ in range(warmup):
            run()
        g = None
        if graph:
            stream.begin_capture()
            for _ in range(reps):
                run()
            g = stream.end_capture()
            g.launch()
        times = []
        for _ in range(samples):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record(stream)
            if g is not None:
                g.launch(stream)
            else:
                for _ in range(reps):
                    run()
            e.record(stream)
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) / reps)
    return float(np.median(times))


def _torch_ms(fn, reps: int) -> float:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
        times = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / reps)
    return float(np.median(times))


def _torch_tf32(on: bool):
    torch.backends.cuda.matmul.allow_tf32 = on


def time_gemms(d: int = 768, m: int = 1024) -> list[str]:
    tiles = " ".join(f"{f'x3 {t.bm}x{t.bn}':>10s}" for t in L.TILES)
    rows = [f"GEMM, M = {m} (TFLOP/s; torch fp32 = TF32 off; x3 <tile> = tf32x3 forced to that tile)",
            f"{'shape':24s} {'tf32x3':>8s} {'tf32':>8s} {'torch32':>8s} {'torchTF':>8s} {tiles}  picked"]
    rng = np.random.default_rng(3)
    shapes = [(k, n, False) for k, n in gpt2_shapes(d)] + [(d, VOCAB, True)]
    for k, n, nt in shapes:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray((rng.standard_normal((n, k) if nt else (k, n), dtype=np.float32) * 0.02).astype(np.float32))
        bias = cp.zeros(n, dtype=cp.float32)
        out = cp.empty((m, n), dtype=cp.float32)
        flops = 2.0 * m * k * n

        def ours(variant, tile=None):
            if nt:
                return lambda: L.gemm_nt(a, b, out, variant=variant, tile=tile)
            return lambda: L.gemm(a, b, bias, out, variant=variant, tile=tile)

        figs = [flops / _median_ms(ours(v), reps=5) / 1e9 for v in ("tf32x3", "tf32")]
        ta, tb, tbias = (torch.as_tensor(v, device="cuda") for v in (a, b, bias))
        for on in (False, True):
            _torch_tf32(on)
            fn = (lambda: ta @ tb.T) if nt else (lambda: torch.addmm(tbias, ta, tb))
            figs.append(flops / _torch_ms(fn, reps=5) / 1e9)
        _torch_tf32(False)
        figs += [flops / _median_ms(ours("tf32x3", t), reps=5) / 1e9 for t in L.TILES]
        tile = L.pick_tile(m, n)
        label = f"{'NT ' if nt else ''}K={k} N={n}"
        rows.append(f"{label:24s} " + " ".join(f"{f:8.1f}" for f in figs[:4]) + " "
                    + " ".join(f"{f:10.1f}" for f in figs[4:]) + f"  {tile.bm}x{tile.bn}")
    return rows


def time_gemvs(d: int = 768) -> list[str]:
    rows = ["GEMV (GB/s of weights read; torch = addmm / matmul, not graphed)",
            f"{'shape':28s} {'f32':>8s} {'bf16':>8s} {'torch32':>8s}  (M = 1 | M = 8)"]
    rng = np.random.default_rng(4)
    shapes = [(k, n, False) for k, n in gpt2_shapes(d)] + [(d, VOCAB, True)]
    for k, n, nt in shapes:
        w32 = cp.asarray((rng.standard_normal((n, k) if nt else (k, n), dtype=np.float32) * 0.02).astype(np.float32))
        w16 = L.to_bf16_bits(w32)
        bias = cp.zeros(n, dtype=cp.float32)
        cells = []
        for m in (1, 8):
            x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
            out = cp.empty((m, n), dtype=cp.float32)
            figs = []
            for w in (w32, w16):
                if nt:
                    ms = _median_ms(lambda: L.gemv_nt(x, w, out), reps=20, graph=True)
                else:
                    ms = _median_ms(lambda: L.gemv(x, w, bias, out), reps=20, graph=True)
                figs.append(w.nbytes / ms / 1e6)
            tx, tw, tbias = (torch.as_tensor(v, device="cuda") for v in (x, w32, bias))
            fn = (lambda: tx @ tw.T) if nt else (lambda: torch.addmm(tbias, tx, tw))
            figs.append(w32.nbytes / _torch_ms(fn, reps=20) / 1e6)
            cells.append(" ".join(f"{f:8.0f}" for f in figs))
        label = f"{'NT ' if nt else ''}K={k} N={n}"
        rows.append(f"{label:28s} {cells[0]}  | {cells[1]}")
    return rows


# ---------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer shapes, no timings")
    p.add_argument("--no-time", action="store_true", help="accuracy checks only")
    args = p.parse_args()
    _torch_tf32(False)
    torch.backends.cudnn.allow_tf32 = False

    failures, worst = 0, {}
    for i, c in enumerate(gemm_cases(args.quick)):
        res = gemm_case(seed=i, **c)
        print(res.line(), flush=True)
        failures += not res.ok
        key = f"gemm {c['variant']}" + (" planes" if c.get("planes") else "")
        ratio = res.err / res.limit if res.limit > 0 else float("inf")
        worst[key] = max(worst.get(key, 0.0), ratio)
    for i, c in enumerate(gemv_cases(args.quick)):
        res = gemv_case(seed=10_000 + i, **c)
        print(res.line(), flush=True)
        failures += not res.ok
        key = f"gemv {c['wdtype']}"
        ratio = res.err / res.limit if res.limit > 0 else float("inf")
        worst[key] = max(worst.get(key, 0.0), ratio)
    for name, ok in (("tf32x3 GEMM repeats bit for bit", gemm_repeat_case("tf32x3")),
                     ("f32 GEMV (split-K) repeats bit for bit", gemv_repeat_case("f32")),
                     ("bf16 GEMV (split-K) repeats bit for bit", gemv_repeat_case("bf16"))):
        print(("ok   " if ok else "FAIL ") + name)
        failures += not ok
    print("\nworst error / limit per family: " + ", ".join(f"{k} {v:.3f}" for k, v in worst.items()))
    print(f"{failures} failure(s)")

    if not (args.quick or args.no_time):
        dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"\nTimings on {dev['name'].decode()} ({sm_count()} SMs)")
        for line in time_gemms() + [""] + time_gemms(m=4096) + [""] + time_gemvs():
            print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

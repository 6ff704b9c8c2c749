#!/usr/bin/env python
"""GPU check of kernels/attention.cu through gpt2block.backends.cuda.attention: accuracy, then speed.

Accuracy: every prefill variant (f32, tf32x3f, tf32; the last two on attention_wgmma.cu where the GPU
has wgmma and, as "@mma", on attention.cu's mma.sync kernels) on causal and non-causal cases (S from 1 to
8192, every GPT-2 width, chunked prefill with q_start > 0, the solve() layout with q/k/v inside
one [S, 3D] buffer and the model's layout with K/V in a cache), and decode (B = 1, 3, 8, mixed
lengths, K/V cache positions past each row's length filled with NaN); fresh N(0, 1) data, also
scaled x10 to stress the softmax; outputs poisoned with NaN before each run. Each output is
compared with a float64 NumPy reference and with torch float32 (TF32 off) against the same
reference: f32 and tf32x3f must stay within 2x torch's error plus one float32 ulp of the output's
scale; tf32 (1 pass) within TF32_LIMIT. Large cases compare a sample of query rows (all rows
are still checked for NaN). The checks are tests/gpu/attention_checks.py's (the GPU tests run a
subset of these cases); the full case lists and the timings are this script's.

Speed: prefill at S = 1024 (D = 768, non-causal and causal) and decode (B = 1 and 8, length
1024, D = 768 and 1600), median of 20 after warm-up with CUDA events, torch SDPA (fp32) beside.
"graph" is the kernel time (10 calls captured in a CUDA graph per sample), "eager" a Python call
including the argument checks.

    python dev/check_attention.py [--quick] [--no-timing]

Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # attention_checks: the checks the GPU tests run

import cupy as cp  # noqa: E402
from attention_checks import (  # noqa: E402
    VARIANTS, check_decode, check_decode_repeat, check_prefill, decode_inputs, run_prefill)

from gpt2block.backends.cuda import attention as ca  # noqa: E402


# -- cases ------------------------------------------------------------------------------------

def prefill_cases(quick):
    """(s_q, d, causal, q_start, scale)"""
    cases = []
    widths = (768, 1024, 1280, 1600)
    small = (1, 2, 3, 30, 64, 100)
    for d in widths:
        for s in small:
            cases += [(s, d, False, 0, 1.0), (s, d, True, 0, 1.0)]
    for d in ((768, 1600) if quick else widths):
        for s in (1023, 1025):
            cases += [(s, d, False, 0, 1.0), (s, d, True, 0, 1.0)]
    for d in (768, 1600):  # chunked prefill: S_kv = q_start + S_q
        cases += [(1, d, True, 5, 1.0), (30, d, True, 100, 1.0), (24, d, True, 1000, 1.0),
                  (64, d, True, 64, 1.0), (1023, d, True, 1, 1.0)]
    for s, d, causal in ((3, 768, False), (100, 1280, True), (1025, 768, False), (1025, 1600, True)):
        cases.append((s, d, causal, 0, 10.0))
    cases += [(4096, 768, False, 0, 1.0), (4096, 1024, True, 0, 1.0), (4096, 768, False, 0, 10.0)]
    if not quick:
        cases += [(8192, 768, False, 0, 1.0), (3000, 1600, True, 1000, 1.0)]
    return cases


def decode_cases():
    """(lengths, d, scale, n_ctx, tight)"""
    return [
        ([1], 768, 1.0, 1024, False), ([1024], 768, 1.0, 1024, False), ([300], 1600, 1.0, 1024, True),
        ([1, 7, 300], 768, 1.0, 1024, False), ([1024, 1, 7], 1600, 1.0, 1024, True),
        ([1, 7, 300, 1024, 1024, 300, 7, 1], 768, 1.0, 1024, False),
        ([5, 1000, 64, 65, 1023, 2, 513, 999], 1280, 1.0, 1024, True),
        ([1024, 300, 7], 1024, 10.0, 1024, False), ([2048, 1500], 768, 1.0, 2048, False),
    ]


# -- timing -----------------------------------------------------------------------------------

def median_ms(fn, reps=20, warm=3, inner=1):
    for _ in range(warm):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) / inner)
    return statistics.median(times)


def graph_ms(call, calls=10):
    """Kernel time of ``call``: ``calls`` of it captured in one CUDA graph, per call."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        call()  # warm-up on this stream (compiles, sizes the decode workspace of this stream)
        stream.synchronize()
        stream.begin_capture()
        for _ in range(calls):
            call()
        graph = stream.end_capture()

        def run():
            graph.launch(stream)

        def timed():
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record(stream)
            run()
            e.record(stream)
            e.synchronize()
            return cp.cuda.get_elapsed_time(s, e) / calls

        for _ in range(3):
            run()
        stream.synchronize()
        return statistics.median(timed() for _ in range(20))


def eager_ms(call, calls=10):
    def loop():
        for _ in range(calls):
            call()
    return median_ms(loop, inner=calls)


def timing(torch, rng):
    import torch.nn.functional as F

    rows = []
    for causal in (False, True):
        s, d = 1024, 768
        n_head = d // 64
        qkv = cp.asarray(rng.standard_normal((s, 3 * d)).astype(np.float32))
        out = cp.empty((s, d), np.float32)
        for variant in VARIANTS:
            def call(variant=variant):
                run_prefill(variant, qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], out, n_head=n_head, s_q=s, s_kv=s,
                            causal=causal, q_stride=3 * d, kv_stride=3 * d)
            g = graph_ms(call)
            flops = 4.0 * s * s * d * (0.5 if causal else 1.0)
            rows.append((f"prefill {variant} S={s} D={d} {'causal' if causal else 'full'}",
                         g, eager_ms(call), f"{flops / g / 1e6:,.0f} GFLOP/s"))
        t = torch.from_numpy(cp.asnumpy(qkv)).cuda()
        tq, tk, tv = (t[:, i * d:(i + 1) * d].reshape(s, n_head, 64).transpose(0, 1)[None].contiguous() for i in range(3))
        ms = median_ms(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal), inner=1)
        rows.append((f"torch SDPA fp32 S={s} D={d} {'causal' if causal else 'full'}", None, ms, ""))
    for d in (768, 1600):
        for b in (1, 8):
            n_head = d // 64
            lengths = [1024] * b
            qkv, cache = decode_inputs(rng, lengths, d, 1024, 1.0)
            qkv_d, cache_d = cp.asarray(qkv), cp.asarray(cache)
            lens = cp.asarray(np.asarray(lengths, np.int32))
            out = cp.empty((b, d), np.float32)

            def call(qkv_d=qkv_d, cache_d=cache_d, lens=lens, out=out, d=d, n_head=n_head):
                ca.attention_decode(qkv_d, cache_d[0, 1, 0], cache_d[0, 1, 1], lens, out, n_head=n_head,
                                    q_stride=3 * d, cache_batch_stride=cache_d[0].size, max_len=1024)
            g = graph_ms(call)
            gbs = 2 * b * 1024 * d * 4 / g / 1e6  # K and V bytes read
            rows.append((f"decode f32 B={b} len=1024 D={d}", g, eager_ms(call), f"{gbs:,.0f} GB/s (K+V)"))
            tq = torch.from_numpy(qkv[:, :d]).cuda().reshape(b, n_head, 1, 64)
            tk = torch.from_numpy(np.ascontiguousarray(cache[:, 1, 0])).cuda().reshape(b, 1024, n_head, 64).transpose(1, 2)
            tv = torch.from_numpy(np.ascontiguousarray(cache[:, 1, 1])).cuda().reshape(b, 1024, n_head, 64).transpose(1, 2)
            ms = median_ms(lambda: F.scaled_dot_product_attention(tq, tk, tv), inner=1)
            rows.append((f"torch SDPA fp32 B={b} len=1024 D={d}", None, ms, ""))
    print("\n| what | kernel, CUDA graph (ms) | eager call (ms) | rate |")
    print("| --- | --- | --- | --- |")
    for name, g, e, rate in rows:
        print(f"| {name} | {'' if g is None else f'{g:.4f}'} | {e:.4f} | {rate} |")


# -- main -------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer large cases")
    ap.add_argument("--no-timing", action="store_true", help="accuracy only")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    results = []
    for case in prefill_cases(args.quick):
        for r in check_prefill(torch, rng, *case):
            results.append(r)
            print(r.line(), flush=True)
    for lengths, d, scale, n_ctx, tight in decode_cases():
        for r in check_decode(torch, rng, lengths, d, scale, n_ctx, tight):
            results.append(r)
            print(r.line(), flush=True)
    for r in check_decode_repeat(rng):
        results.append(r)
        print(r.line(), flush=True)
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} checks passed in {time.perf_counter() - t0:.1f} s")
    for label, prefix in [(v, f"prefill {v:11s} ") for v in VARIANTS] + [("decode", "decode f32 ")]:
        sel = [r for r in results if r.name.startswith(prefix) and r.peer > 0]
        if sel:
            worst = max(sel, key=lambda r: r.err / r.peer)
            print(f"worst error / torch fp32 error, {label}: {worst.err / worst.peer:.2f} ({worst.name})")
    if not args.no_timing:
        timing(torch, rng)
    for r in failed:
        print("FAILED:", r.line())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

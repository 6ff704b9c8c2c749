#!/usr/bin/env python3
"""Batched prefill on the CUDA backend: B prompts of T random tokens, timed three ways on one random
checkpoint of gpt2's shape.

    python dev/prefill/time_prefill_batch.py [--precision fp32] [--runs 10] [--out FILE.json]

  packed      CudaRunner.prefill_batch: packed passes of at most pass_tokens tokens, last logits to the host
  sample      CudaRunner.sample_prefill, greedy rows: the same passes, the logits left on the device, the
              device sampler's draw (what generate() waits for before its first step)
  rowwise     Runner.prefill_batch, the default: one prefill() a row (the path before the packed one)
  v1024       packed with passes of at most 1024 tokens (the variant of a pass as wide as one context)

Cases: 64 x 128, 128 x 128, 1 x 1024 (and 8 x 1000 mixed with 1 x 1). Wall time after a synchronize,
median of --runs after two warm-up calls; the device's kernels dominate (the host only packs ints).

Measured on the H200 (fp32, ms; two runs, the second on a slower machine, its row-by-row path slower too):
  case          packed        sample        rowwise        v1024
  64 x 128      23.8* / 16.9  16.3 / 16.8   228 / 369      34.8 / 45.2
  128 x 128     39.5* / 34.0  32.3 / 33.3   449 / 764      65.6 / 101
  1 x 1024      3.76 / 6.27   3.69 / 7.79   3.67 / 6.10    3.72 / 6.33
  8x1000 + 1x1  20.5 / 20.8   20.1 / 20.8   31.7 / 63.6    30.1 / 55.1
  (* the logits copied into pageable memory; since then prefill_batch returns page-locked memory)
So passes of up to PREFILL_MAX_TOKENS = 8192 tokens, not one context's 1024.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.backends.base import Runner  # noqa: E402
from gpt2block.sampler import SamplingBatch, SamplingParams  # noqa: E402


def timed(fn, runs: int, sync) -> float:
    for _ in range(2):
        fn()
    sync()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from hf_checkpoints import make_hf_checkpoint
    from gpt2block.checkpoint import load_weights

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_hf_checkpoint(Path(tmp) / "ckpt", 12, 768, 12, vocab_size=50257, n_positions=1024, seed=7)
        weights = load_weights(ckpt.path)
    runner = make_runner(weights, "cuda", args.precision)
    sync = runner.stream.synchronize
    rng = np.random.default_rng(0)
    results = []
    cases = [("64x128", [128] * 64), ("128x128", [128] * 128), ("1x1024", [1024]), ("8x1000+1x1", [1000] * 8 + [1])]
    for name, lengths in cases:
        B = len(lengths)
        prompts = [rng.integers(0, 50257, n) for n in lengths]
        cache = runner.new_cache(B)
        greedy = SamplingBatch([SamplingParams(temperature=0)] * B, [0] * B, [0] * B, [list(p) for p in prompts])

        def packed():
            cache.reset()
            runner.prefill_batch(cache, range(B), prompts)

        def sample():
            cache.reset()
            runner.sample_prefill(cache, prompts, greedy)

        def rowwise():
            cache.reset()
            Runner.prefill_batch(runner, cache, range(B), prompts)

        def v1024():
            keep = runner.pass_tokens
            runner.pass_tokens = 1024
            try:
                packed()
            finally:
                runner.pass_tokens = keep

        row = {"case": name, "tokens": int(sum(lengths)), "precision": args.precision}
        for label, fn in (("packed", packed), ("sample", sample), ("rowwise", rowwise), ("v1024", v1024)):
            row[label + "_ms"] = round(timed(fn, args.runs if label != "rowwise" else 3, sync), 3)
        runner._packed = None  # v1024 may have left a smaller workspace: the next case grows its own
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

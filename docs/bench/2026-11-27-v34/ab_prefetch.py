"""Version 34: bulk L2 prefetches before pdl_wait. (1) The LayerNorm's first rows (layernorm.cu LN_PREFETCH):
8192 x 768 in the benchmark's bursts (gpt2block.bench.bench_layernorm, 20 reps a figure), with and without,
three rounds, beside the device copy ceiling of the same process. (2) The screen's later passes
(lm_screen.cu LM_SCREEN_PREFETCH): gpt2 b1 greedy tokens of both (64 steps, the same expected), then tok/s
(decode_rate.rate, 128 steps), bf16 three rounds, fp32 two."""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block import bench  # noqa: E402
from gpt2block.backends import cuda_linear, cuda_ops, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

ceil = bench.measure_ceilings(torch, 20)
print(f"ceilings: copy {ceil['copy_TBps']:.3f} TB/s", flush=True)
for rnd in range(3):
    for pf in (0, 1):
        cuda_ops.LN_DEFINES = (("LN_PREFETCH", pf),)
        r = bench.bench_layernorm(torch, 20)
        print(f"round {rnd} LayerNorm 8192x768 prefetch {pf}: {r['ours_ms'] * 1e3:.2f} us, {r['ours_TBps']:.3f} TB/s "
              f"({r['ours_TBps'] / ceil['copy_TBps']:.1%} of copy), plain {r['ours_plain_TBps']:.3f}, same-size copy "
              f"{r['copy_same_size_TBps']:.3f} ({r['copy_same_size_TBps'] / ceil['copy_TBps']:.1%}), max err {r['max_err']:.2g}",
              flush=True)
cuda_ops.LN_DEFINES = ()

prompt = np.random.default_rng(1).integers(0, 50257, 16)
for size, prec, rounds in (("gpt2", "bf16", 3), ("gpt2", "fp32", 2)):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    toks = {}
    for pf in (0, 1):
        cuda_linear.SCREEN_DEFINES = (("LM_SCREEN_PREFETCH", pf),)
        cache = r.new_cache(1)
        first = r.prefill(cache, 0, prompt).argmax(-1)
        toks[pf] = np.concatenate([t for t in r.greedy_steps(cache, np.array([first]), max_steps=64)])
    print(f"{size} {prec}: greedy tokens equal with and without the screen's prefetch: "
          f"{bool((toks[0] == toks[1]).all())}", flush=True)
    for rnd in range(rounds):
        for pf in (0, 1):
            cuda_linear.SCREEN_DEFINES = (("LM_SCREEN_PREFETCH", pf),)
            print(f"round {rnd} {size} {prec} b1 screen prefetch {pf}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda_linear.SCREEN_DEFINES = ()

"""Version 34: the end of a greedy step. (a) The argmax finish's step ints (position, length) loaded before the
ticket instead of after the winner (gemv.cu GEMV_ARGMAX_PRELOAD_STEP 1 / 0, through SCREEN_DEFINES: the chained
steps' rescore); (b) for measuring only, the chained steps without their write of the token into mapped host
memory (the runner's _decode_kernels wrapped to drop host_out: what that write costs the step). Greedy tokens of
(a)'s two builds first (64 steps, the same expected), then gpt2 b1 tok/s (decode_rate.rate, 128 steps), one
process: bf16 three rounds, fp32 two."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

prompt = np.random.default_rng(1).integers(0, 50257, 16)
for size, prec, rounds in (("gpt2", "bf16", 3), ("gpt2", "fp32", 2)):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    plain_kernels = r._decode_kernels
    toks = {}
    for pre in (0, 1):
        cuda_linear.SCREEN_DEFINES = (("GEMV_ARGMAX_PRELOAD_STEP", pre),)
        cache = r.new_cache(1)
        first = r.prefill(cache, 0, prompt).argmax(-1)
        toks[pre] = np.concatenate([t for t in r.greedy_steps(cache, np.array([first]), max_steps=64)])
    print(f"{size} {prec}: greedy tokens equal with the step ints loaded early and late: "
          f"{bool((toks[0] == toks[1]).all())}", flush=True)
    for rnd in range(rounds):
        for name, pre, mapped in (("ints after the winner (v33)", 0, True), ("ints before the ticket", 1, True),
                                  ("ints before, no mapped write (probe)", 1, False)):
            cuda_linear.SCREEN_DEFINES = (("GEMV_ARGMAX_PRELOAD_STEP", pre),)
            r._decode_kernels = plain_kernels if mapped else (
                lambda cache, step, host_out=None, logits=True: plain_kernels(cache, step, None, logits))
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    r._decode_kernels = plain_kernels
    del r
cuda_linear.SCREEN_DEFINES = ()

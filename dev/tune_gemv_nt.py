#!/usr/bin/env python3
"""A/B of the decode GEMVs' register budget: graph replay time of a decode step per variant.

    python dev/tune_gemv_nt.py

Each variant compiles kernels/gemv.cu's nt kernels with other GEMV_NT_UNROLL (16-byte weight
chunks per row and lane in flight) and GEMV_NT_MIN_BLOCKS (blocks per SM the registers must
allow; the launch grid follows it, except for the builds with their own count: one float32 token,
GEMV_NT_MIN_BLOCKS_M1_F32 and its width table, one bf16 token likewise, and 4 rows per warp, 2:
so gpt2's bf16 batch 1, 4 rows per warp since version 18, gets the same kernels in every variant). Prints microseconds per step (dev/profile_decode.py's
graph replay) and the largest logit difference from the default, for gpt2 at batch 1 and 8
and gpt2-xl at batch 1, on random weights. Nothing is changed: the defaults stay in gemv.cu.
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from profile_decode import graph_step_us  # noqa: E402

from gpt2block.backends import make_runner  # noqa: E402

from gpt2block.backends.cuda import linear as cuda_linear  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

VARIANTS = [(), (("GEMV_NT_UNROLL", 8), ("GEMV_NT_MIN_BLOCKS", 2)), (("GEMV_NT_UNROLL", 6), ("GEMV_NT_MIN_BLOCKS", 2))]
CASES = (("gpt2", [("fp32", 1), ("fp32", 8), ("bf16", 1)]), ("gpt2-xl", [("fp32", 1)]))


def main() -> int:
    for size, cases in CASES:
        w = ModelWeights.random(SIZES[size], seed=0)
        for prec, b in cases:
            runner = make_runner(w, "cuda", prec)
            ref = None
            for defines in VARIANTS:
                cuda_linear.NT_DEFINES = defines
                cache = runner.new_cache(b)
                for r in range(b):
                    runner.prefill(cache, r, np.arange(16) + r)
                tok = np.arange(b) + 5
                logits = runner.decode(cache, tok)
                for _ in range(3):  # the second step captures the graph
                    tok = runner.decode_greedy(cache, tok)
                us = graph_step_us(runner, cache)
                ref = logits if ref is None else ref
                print(f"{size} {prec} b{b} {dict(defines) or 'default'}: {us:7.1f} us/step, "
                      f"max |logit diff| vs default {np.abs(logits - ref).max():.2e}", flush=True)
            cuda_linear.NT_DEFINES = ()
            del runner
    return 0


if __name__ == "__main__":
    sys.exit(main())

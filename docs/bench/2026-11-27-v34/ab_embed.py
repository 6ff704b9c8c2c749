"""Version 34: the next step's embedding written by the batch-1 head's last block (cuda.EMBED_IN_HEAD; the
chained greedy steps start at layer 0's QKV, launched plainly) against the embedding kernel first in every step.
First the greedy tokens of both (64 steps of greedy_steps, the same tokens expected), then gpt2 b1 tok/s
(decode_rate.rate, 128 steps; each rate() call a new cache, so new graphs), one process: bf16 three rounds, fp32
two, gpt2-medium bf16 two."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

prompt = np.random.default_rng(1).integers(0, 50257, 16)
for size, prec, rounds in (("gpt2", "bf16", 3), ("gpt2", "fp32", 2), ("gpt2-medium", "bf16", 2)):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    toks = {}
    for emb in (False, True):
        cuda.EMBED_IN_HEAD = emb
        cache = r.new_cache(1)
        first = r.prefill(cache, 0, prompt).argmax(-1)
        toks[emb] = np.concatenate([t for t in r.greedy_steps(cache, np.array([first]), max_steps=64)])
    print(f"{size} {prec}: greedy tokens equal with and without the head's embedding: "
          f"{bool((toks[True] == toks[False]).all())} ({toks[True][:8]} ...)", flush=True)
    for rnd in range(rounds):
        for emb in (False, True):
            cuda.EMBED_IN_HEAD = emb
            name = "head writes the embedding" if emb else "embedding kernel (v33)"
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda.EMBED_IN_HEAD = True

"""Version 27, visit 4: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5),
tok/s. The five-kernel step's embeddings formed in layer 0's ln_1 + QKV kernel, launched plainly as the
step's first (cuda.EMBED_IN_QKV, on), against the embedding kernel before it (off, version 26)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

for size, prec, batch, steps, rounds in (("gpt2", "bf16", 1, 128, 3), ("gpt2", "fp32", 1, 128, 3),
                                         ("gpt2", "bf16", 8, 128, 2), ("gpt2", "fp32", 8, 128, 2),
                                         ("gpt2-medium", "bf16", 1, 64, 2), ("gpt2-xl", "fp32", 1, 48, 2)):
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for on in (False, True):
            cuda.EMBED_IN_QKV = on
            print(f"round {rnd} {size} {prec} b{batch} embed in QKV {'on ' if on else 'off'}: "
                  f"{rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w
cuda.EMBED_IN_QKV = True

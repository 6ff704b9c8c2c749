"""Version 31: one process, decode_rate.rate, tok/s: a captured decode step's embedding launched with the
programmatic attribute (cuda.EMBED_PROGRAMMATIC) against the plain launch. Visit 4's timeline had layer 0's QKV
start 2.8 us after the embedding ended (every other kernel starts before the one ahead of it ends) and end 6.9 us
after it (2.5 in the other layers). The decode attention and the QKV path at version 30's (block softmax, two
kernels)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_attention, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

cuda.QKV_ATTENTION = False
cuda_attention.DECODE_DEFINES = (("ATTN_DEC_GROUP_SOFTMAX", 0),)
CASES = (("gpt2", "bf16", 1, 128, 3), ("gpt2", "fp32", 1, 128, 2), ("gpt2", "fp32", 8, 128, 2))
for size, prec, batch, steps, rounds in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for emb in (False, True):
            cuda.EMBED_PROGRAMMATIC = emb
            print(f"round {rnd} {size} {prec} b{batch} embedding {'programmatic' if emb else 'plain'}: "
                  f"{rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w

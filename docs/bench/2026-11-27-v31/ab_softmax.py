"""Version 31: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5), tok/s: the decode
attention's rounds with a softmax per group of 16 lanes (ATTN_DEC_GROUP_SOFTMAX 1) against the block-wide softmax
of version 30 (0), each with and without ln_1 + QKV + attention in one kernel (cuda.QKV_ATTENTION; bf16 batch 1
only). gpt2 bf16 b1 (three rounds), gpt2 fp32 b1 and b8 (two), gpt2-medium bf16 b1 and gpt2-xl fp32 b1 (one)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_attention, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

CASES = (("gpt2", "bf16", 1, 128, 3, (False, True)), ("gpt2", "fp32", 1, 128, 2, (False,)),
         ("gpt2", "fp32", 8, 128, 2, (False,)), ("gpt2-medium", "bf16", 1, 96, 1, (False, True)),
         ("gpt2-xl", "fp32", 1, 48, 1, (False,)))
for size, prec, batch, steps, rounds, fused_opts in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for fused in fused_opts:
            for group in (0, 1):
                cuda.QKV_ATTENTION = fused
                cuda_attention.DECODE_DEFINES = (("ATTN_DEC_GROUP_SOFTMAX", group),)
                print(f"round {rnd} {size} {prec} b{batch} {'qkv+attention' if fused else 'two kernels'} "
                      f"{'group softmax' if group else 'block softmax'}: {rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w
cuda.QKV_ATTENTION = True
cuda_attention.DECODE_DEFINES = ()

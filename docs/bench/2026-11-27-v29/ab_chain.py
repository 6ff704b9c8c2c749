"""Version 29: one process, decode_rate.rate (greedy_steps after a 16-token prompt, 128 steps, median of 5),
tok/s: greedy_steps' chained steps one to a CUDA graph (cuda.CHAIN_STEPS = 1, version 28) against 2, 4 and 8
to a graph. gpt2 b1 bf16 and fp32, b8 fp32; gpt2-xl b1 bf16 (the fused step). It ran on commit 67c246e's code;
the change was dropped, and lives on as chain_dropped.patch beside this script (apply it to run this again)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

CASES = (("gpt2", "bf16", 1, 128, 3), ("gpt2", "fp32", 1, 128, 3), ("gpt2", "fp32", 8, 128, 2),
         ("gpt2-xl", "bf16", 1, 48, 1))
for size, prec, batch, steps, rounds in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for chain in (1, 2, 4, 8):
            cuda.CHAIN_STEPS = chain
            print(f"round {rnd} {size} {prec} b{batch} chain {chain}: {rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w
cuda.CHAIN_STEPS = 2

"""Version 26, visit 3: the batch-1 chain (the MLP projection inside the FC kernel, the residual stream
in fixed point until the next LayerNorm; four kernels a block) against the five-kernel step, one
process, decode_rate.rate (greedy_steps, 128 steps after a 16-token prompt, median of 5), tok/s."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

for size, steps, rounds, precs in (("gpt2", 128, 3, ("bf16", "fp32")), ("gpt2-medium", 64, 1, ("bf16", "fp32")),
                                   ("gpt2-xl", 48, 1, ("fp32",))):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in precs}
    for rnd in range(rounds):
        for chain in (False, True):
            for prec, r in runners.items():
                r.chain = chain
                print(f"round {rnd} chain {'on ' if chain else 'off'} {size} {prec} b1: {rate(r, 1, steps):,.0f} tok/s",
                      flush=True)
    del runners, w

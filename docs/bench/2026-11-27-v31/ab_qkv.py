"""Version 31: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5), tok/s: the
batch-1 bf16 step with ln_1 + QKV + attention in one kernel (cuda.QKV_ATTENTION, the default) against the QKV
GEMV then the attention kernel (version 30's kernels). gpt2 b1 bf16 (three rounds, alternating), gpt2-medium
bf16 b1 (one round); gpt2 fp32 b1 once as the control (the fused kernel serves bf16 weights only)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

CASES = (("gpt2", "bf16", 1, 128, 3), ("gpt2-medium", "bf16", 1, 96, 1), ("gpt2", "fp32", 1, 128, 1))
for size, prec, batch, steps, rounds in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for fused in (False, True):
            cuda.QKV_ATTENTION = fused
            print(f"round {rnd} {size} {prec} b{batch} {'qkv+attention' if fused else 'two kernels'}: "
                  f"{rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w
cuda.QKV_ATTENTION = True

"""Version 30: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5), tok/s: the
batch-1 step with ln_1 and ln_2 folded into the QKV and FC products (cuda.FOLD_LN, kept default) against the
staged LayerNorm (version 29's kernels). gpt2 b1 bf16 and fp32 (three rounds, alternating), gpt2-medium bf16
b1 and gpt2-xl fp32 b1 (the five-kernel path; xl bf16 runs the fused step, which has no fold). It ran on
commits a523283 (visit 1), bc79a01 (visit 2) and 03a976a (visit 4); the fold was dropped, and 03a976a's lives on as
fold_dropped.patch beside this script (apply it to run this again; the visit scripts' --fold option of
scripts/trace_decode_step.py is in it too)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

CASES = (("gpt2", "bf16", 1, 128, 3), ("gpt2", "fp32", 1, 128, 3), ("gpt2-medium", "bf16", 1, 96, 1),
         ("gpt2-xl", "fp32", 1, 48, 1))
for size, prec, batch, steps, rounds in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for fold in (False, True):
            cuda.FOLD_LN = fold
            print(f"round {rnd} {size} {prec} b{batch} {'folded' if fold else 'staged'}: "
                  f"{rate(r, batch, steps):,.0f} tok/s", flush=True)
    del r, w
cuda.FOLD_LN = True

"""Version 31: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5), tok/s: the
batch-1 step's ln_1 and ln_2 staged (FOLD_LN off, the kept path), folded with their statistics formed from x
(version 30's second fold, LN_STATS off), and folded with the statistics from the pairs the projection before
writes (LN_STATS on). gpt2 bf16 b1 (three rounds), gpt2 fp32 b1 (two), gpt2-medium bf16 b1 (one). Then the
CUDA profiler's timeline of a bf16 b1 step, staged and with the pairs. Ran on commit a75726f (visit 10); the
change was dropped, so rerunning it needs ln_stats_dropped.patch (beside this script) applied to the final code."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts import timeline_decode  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

MODES = {"staged": (False, False), "fold, stats from x": (True, False), "fold, stats from pairs": (True, True)}
CASES = (("gpt2", "bf16", 3), ("gpt2", "fp32", 2), ("gpt2-medium", "bf16", 1))
for size, prec, rounds in CASES:
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    for rnd in range(rounds):
        for name, (fold, stats) in MODES.items():
            cuda.FOLD_LN, cuda.LN_STATS = fold, stats
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128 if size == 'gpt2' else 96):,.0f} tok/s",
                  flush=True)
    if size == "gpt2" and prec == "bf16":
        for name in ("staged", "fold, stats from pairs"):
            cuda.FOLD_LN, cuda.LN_STATS = MODES[name]
            print(f"== timeline, {name}", flush=True)
            print("\n".join(timeline_decode.run_case(r, 1, 64)), flush=True)
    del r
cuda.FOLD_LN, cuda.LN_STATS = True, True

"""Version 31: one process, decode_rate.rate, tok/s, gpt2 bf16 b1: gemv_nt_plan's new rule (the one-token attention
projection at 4 warps a row group, 96 blocks) against version 30's plan forced back (2, 48 blocks); three rounds.
Also gpt2 fp32 b1 (its plans unchanged) once as a control."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

new_plan = cuda_linear.gemv_nt_plan


def old_plan(n, k, cpt, mp=1, bf16=False, lm_head=False, sms=None, defines=None):
    wpr, grid = new_plan(n, k, cpt, mp, bf16, lm_head, sms, defines)
    return (2, 48) if (n, k, mp, bf16, wpr, grid) == (768, 768, 1, True, 4, 96) else (wpr, grid)


for prec, rounds in (("bf16", 3), ("fp32", 1)):
    r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", prec)
    for rnd in range(rounds):
        for name, plan in (("version 30's plan", old_plan), ("the new rule", new_plan)):
            cuda_linear.gemv_nt_plan = plan
            print(f"round {rnd} gpt2 {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda_linear.gemv_nt_plan = new_plan

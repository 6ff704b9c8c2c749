"""Version 31: one process, decode_rate.rate, tok/s: the one-token attention projection's warps per row group
(wpr) 2 (gemv_nt_plan's rule at gpt2 bf16: 48 blocks), 4 (96 blocks; visit 12: +3.7%) and 8 (192 blocks), every
other GEMV as planned. gpt2 bf16 b1, three rounds; gpt2 bf16 b2 (the m2 build, not forced) once as a control."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

planned = cuda_linear.gemv_nt_plan
FORCE = {}


def plan(n, k, cpt, mp=1, bf16=False, lm_head=False, sms=None, defines=None):
    wpr, grid = planned(n, k, cpt, mp, bf16, lm_head, sms, defines)
    if mp == 1 and (n, k) in FORCE:
        rows, per_sm = cuda_linear._gemv_nt_build(mp, bf16, lm_head, cuda_linear._gemv_nt_defines(n, k, mp, bf16)
                                                  if defines is None else defines)
        wpr = FORCE[n, k]
        sms = cuda_linear.sm_count() if sms is None else sms
        grid = min(-(-n // (rows * 8 // wpr)), per_sm * sms)
    return wpr, grid


cuda_linear.gemv_nt_plan = plan
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
for rnd in range(3):
    for wpr in (2, 4, 8):
        FORCE[768, 768] = wpr
        print(f"round {rnd} gpt2 bf16 b1 attention projection wpr {wpr}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
FORCE.clear()
print(f"gpt2 bf16 b2 as planned: {rate(r, 2, 128):,.0f} tok/s", flush=True)

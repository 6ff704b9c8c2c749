"""Version 31: one process, decode_rate.rate, tok/s, gpt2 bf16 b1: the one-token GEMVs' warps per row group (wpr,
so their grids) chosen per matrix instead of by gemv_nt_plan's rule (the fewest that give every SM two blocks).
The timeline (visit 4) has the MLP projection's blocks start only as ln_2 + FC's leave (192 blocks of 96
registers fill 60 SMs), so some load their weights after their wait; fewer FC blocks (wpr 1: 96 blocks) leave
room for every MLP-projection block from the start, at the price of more work per warp. Sweep: ln_1 + QKV wpr
1 / 2 (72 / 144 blocks), ln_2 + FC 1 / 2 (96 / 192), the MLP projection 4 / 8 (96 / 192); the attention
projection as planned (2: 48 blocks). One round each, then three rounds of the plan against the best.
Visit 11 ran that (SWEEP = "fewer"); visit 12 the other way, more warps a row group than the rule allows (some lanes
without a piece of K): the attention projection, ln_1 + QKV and ln_2 + FC at 2 or 4, the MLP projection at 8
(SWEEP = "more")."""
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

planned = cuda_linear.gemv_nt_plan
FORCE = {}  # (n, k) -> wpr at one token


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
D = 768
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
print("planned:", {name: planned(n, k, 8, 1, True) for name, (n, k) in
                   {"qkv": (3 * D, D), "attn": (D, D), "fc": (4 * D, D), "proj": (D, 4 * D)}.items()}, flush=True)
SWEEP = sys.argv[1] if len(sys.argv) > 1 else "fewer"
GRID = (itertools.product((2,), (1, 2), (1, 2), (4, 8)) if SWEEP == "fewer"
        else itertools.product((2, 4), (2, 4), (2, 4), (8,)))
results = {}
for cfg in GRID:  # (attn, qkv, fc, proj)
    FORCE.clear()
    FORCE.update({(D, D): cfg[0], (3 * D, D): cfg[1], (4 * D, D): cfg[2], (D, 4 * D): cfg[3]})
    results[cfg] = rate(r, 1, 128)
    print(f"wpr attn {cfg[0]} qkv {cfg[1]} fc {cfg[2]} proj {cfg[3]}: {results[cfg]:,.0f} tok/s", flush=True)
best = max(results, key=results.get)
for rnd in range(3):
    for cfg in ((2, 2, 2, 8), best):
        FORCE.clear()
        FORCE.update({(D, D): cfg[0], (3 * D, D): cfg[1], (4 * D, D): cfg[2], (D, 4 * D): cfg[3]})
        print(f"round {rnd} wpr attn {cfg[0]} qkv {cfg[1]} fc {cfg[2]} proj {cfg[3]}: {rate(r, 1, 128):,.0f} tok/s",
              flush=True)

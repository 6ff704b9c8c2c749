"""Version 26, visit 1: the balanced one-token bf16 GEMVs (one block per SM, rows shared evenly) against
the strided build (version 25: QKV 144 blocks, FC and MLP projection 192, attention projection 48), in one
process, decode_rate.rate (greedy_steps, 128 steps after a 16-token prompt, median of 5), tok/s.
Also the upper bound of any L2 prefetch of the layers' weights: every layer's decode matrices aliased
to layer 0's (14 MB in bf16, which stays in the L2 across the step)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

STRIDED = (("GEMV_NT_BALANCED_M1_BF16", 0),)
ALL = (("GEMV_NT_BALANCED_M1_BF16", 2),)  # every product with an epilogue (the visit ran this as the default, 1)
print("# plans at D = 768, bf16, one token (wpr, grid): strided / balanced")
for n, k in ((2304, 768), (768, 768), (3072, 768), (768, 3072)):
    plans = []
    for cuda_linear.NT_DEFINES in (STRIDED, ALL):
        plans.append(cuda_linear.gemv_nt_plan(n, k, 8, 1, True, False, epilogue=True, ln=n > k))
    print(f"  N={n} K={k}:", *plans)
variants = (("strided", STRIDED), ("balanced", ALL))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
for rnd in range(3):
    for name, d in variants:
        cuda_linear.NT_DEFINES = d
        print(f"round {rnd} {name:8s} gpt2 bf16 b1: {rate(runners['bf16'], 1, 128):,.0f} tok/s", flush=True)
cuda_linear.NT_DEFINES = ()
for prec, b in (("fp32", 1), ("bf16", 8), ("fp32", 8)):
    print(f"unchanged builds, gpt2 {prec} b{b}: {rate(runners[prec], b, 128):,.0f} tok/s", flush=True)
r = runners["bf16"]
saved = list(r.dec_mats)
r.dec_mats = [saved[0]] * len(saved)
for rnd in range(2):
    for name, d in variants:
        cuda_linear.NT_DEFINES = d
        print(f"aliased (every layer's matrices = layer 0's) round {rnd} {name:8s} gpt2 bf16 b1: "
              f"{rate(r, 1, 128):,.0f} tok/s", flush=True)
r.dec_mats = saved
cuda_linear.NT_DEFINES = ()

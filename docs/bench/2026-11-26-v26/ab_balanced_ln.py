"""Version 26, visit 2: one process, decode_rate.rate (greedy_steps, 128 steps after a 16-token prompt,
median of 5), tok/s. The one-token bf16 GEMVs strided (version 25), balanced for the LayerNorm products
only (QKV, FC), balanced for all four; and the bf16 LM head's 24 MB kept in the L2 as its first rows
(version 23) or as row groups spread evenly over all rows (GEMV_LM_PIN_SPREAD)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

V = {
    "strided": (("GEMV_NT_BALANCED_M1_BF16", 0),),
    "balanced LN": (("GEMV_NT_BALANCED_M1_BF16", 1),),
    "balanced all": (("GEMV_NT_BALANCED_M1_BF16", 2),),
    "strided + spread": (("GEMV_NT_BALANCED_M1_BF16", 0), ("GEMV_LM_PIN_SPREAD", 1)),
    "balanced LN + spread": (("GEMV_NT_BALANCED_M1_BF16", 1), ("GEMV_LM_PIN_SPREAD", 1)),
    "bal LN + spread 32MB": (("GEMV_NT_BALANCED_M1_BF16", 1), ("GEMV_LM_PIN_SPREAD", 1),
                             ("GEMV_LM_PIN_BYTES_BF16", 32 << 20)),
}
print("# plans at D = 768, bf16, one token (wpr, grid) per variant: QKV, attention projection, FC, MLP projection")
for name, d in V.items():
    cuda_linear.NT_DEFINES = d
    plans = [cuda_linear.gemv_nt_plan(n, k, 8, 1, True, False, epilogue=True, ln=ln)
             for n, k, ln in ((2304, 768, True), (768, 768, False), (3072, 768, True), (768, 3072, False))]
    print(f"  {name:22s}", plans)
w = ModelWeights.random(SIZES["gpt2"], seed=0)
r = make_runner(w, "cuda", "bf16")
for rnd in range(3):
    for name, d in V.items():
        cuda_linear.NT_DEFINES = d
        print(f"round {rnd} {name:22s} gpt2 bf16 b1: {rate(r, 1, 128):,.0f} tok/s", flush=True)
del r, w
for size, steps in (("gpt2-medium", 64), ("gpt2-xl", 48)):
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", "bf16")
    for rnd in range(2):
        for name in ("strided", "strided + spread"):
            cuda_linear.NT_DEFINES = V[name]
            print(f"round {rnd} {name:22s} {size} bf16 b1: {rate(r, 1, steps):,.0f} tok/s", flush=True)
    del r, w
cuda_linear.NT_DEFINES = ()

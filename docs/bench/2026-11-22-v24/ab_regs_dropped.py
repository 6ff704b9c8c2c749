import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# one bf16 token at 4 rows a warp (gpt2): 2 resident blocks per SM (kept; LN builds 96-110 registers) vs 3 "
      "(GEMV_NT_MIN_BLOCKS_M1_BF16_R4 3: every build at 80 registers, no spill; the LM head 396 blocks), with and "
      "without the float32 Newton step (LN_NEWTON_F32); one process; decode_rate.rate, tok/s")
V = (("kept", ()), ("3 blocks", (("GEMV_NT_MIN_BLOCKS_M1_BF16_R4", 3),)), ("f32 newton", (("LN_NEWTON_F32", 1),)),
     ("3 blocks + f32 newton", (("GEMV_NT_MIN_BLOCKS_M1_BF16_R4", 3), ("LN_NEWTON_F32", 1))))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
for rnd in range(3):
    for name, d in V:
        cuda_linear.NT_DEFINES = d
        for prec, r in runners.items():
            for b in ((1,) if prec == "fp32" or rnd else (1, 8)):
                print(f"round {rnd} {name:22s} gpt2 {prec} b{b}: {rate(r, b, 128):,.0f} tok/s", flush=True)
cuda_linear.NT_DEFINES = ()

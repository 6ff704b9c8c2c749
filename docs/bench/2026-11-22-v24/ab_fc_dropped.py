import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# ln_2 + FC at one token: its build's 2 resident blocks per SM (kept; bf16 96 registers) vs 3 "
      "(GEMV_NT_MIN_BLOCKS_FC_M1 3: 80 registers, so a block of the MLP projection fits beside two FC blocks and "
      "loads its weights before the FC ends); one process; decode_rate.rate, tok/s")
V = (("kept", ()), ("FC 3 blocks", (("GEMV_NT_MIN_BLOCKS_FC_M1", 3),)))
for size, steps, rounds in (("gpt2", 128, 3), ("gpt2-medium", 48, 1)):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
    for rnd in range(rounds):
        for name, d in V:
            cuda_linear.NT_DEFINES = d
            for prec, r in runners.items():
                print(f"round {rnd} {name:12s} {size} {prec} b1: {rate(r, 1, steps):,.0f} tok/s", flush=True)
    del runners, w
cuda_linear.NT_DEFINES = ()

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# one-token GEMVs' LayerNorm: one warp per row (GEMV_LN_BLOCK_M1 0) vs the whole block (1); one process; decode_rate.rate, tok/s")
for size, steps, batches, rounds in (("gpt2", 128, (1, 8), 3), ("gpt2-xl", 48, (1,), 1)):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
    for rnd in range(rounds):
        for name, d in (("warp 0", (("GEMV_LN_BLOCK_M1", 0),)), ("block", ())):
            cuda_linear.NT_DEFINES = d
            for prec, r in runners.items():
                for b in batches:
                    t = rate(r, b, steps)
                    print(f"round {rnd} {name:7s} {size} {prec} b{b}: {t:,.0f} tok/s", flush=True)
    del runners, w

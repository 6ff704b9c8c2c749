import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# the LayerNorm GEMVs' float64 sum and sum of squares: a warp_sum each (GEMV_LN_SUM_HALVE 0) vs both in one butterfly (1); one process; decode_rate.rate, tok/s")
variants = (("each", (("GEMV_LN_SUM_HALVE", 0),)), ("together", ()))
for size, steps, rounds, precs in (("gpt2", 128, 3, ("bf16", "fp32")),):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in precs}
    for rnd in range(rounds):
        for name, d in variants:
            cuda_linear.NT_DEFINES = d
            for prec, r in runners.items():
                for b in ((1, 8) if size == "gpt2" and prec == "fp32" and rnd == 0 else (1,)):
                    t = rate(r, b, steps)
                    print(f"round {rnd} {name:8s} {size} {prec} b{b}: {t:,.0f} tok/s", flush=True)
    del runners, w

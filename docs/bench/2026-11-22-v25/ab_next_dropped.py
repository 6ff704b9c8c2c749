import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# GEMVs that loop over row groups (the LM head): the next group's weights at its top (GEMV_NEXT_EARLY 0) vs under this group's sums (1); one process; decode_rate.rate, tok/s")
variants = (("at top", (("GEMV_NEXT_EARLY", 0),)), ("early", ()))
for size, steps, rounds, precs in (("gpt2", 128, 3, ("bf16", "fp32")), ("gpt2-xl", 48, 1, ("fp32",))):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in precs}
    for rnd in range(rounds):
        for name, d in variants:
            cuda_linear.NT_DEFINES = d
            for prec, r in runners.items():
                for b in ((1, 8) if rnd == 0 else (1,)):
                    t = rate(r, b, steps)
                    print(f"round {rnd} {name:7s} {size} {prec} b{b}: {t:,.0f} tok/s", flush=True)
    del runners, w

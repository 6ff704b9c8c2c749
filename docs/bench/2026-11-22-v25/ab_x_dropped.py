import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# the GEMVs' x after pdl_wait: base (cp.async) vs x's lines prefetched into L2 before the wait vs the LN row by ld.global.cg; one process; decode_rate.rate, tok/s")
variants = (("base", ()), ("prefetch", (("GEMV_X_PREFETCH", 1),)), ("ldg", (("GEMV_LN_X_LDG", 1),)),
            ("both", (("GEMV_X_PREFETCH", 1), ("GEMV_LN_X_LDG", 1))))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
for rnd in range(2):
    for name, d in variants:
        cuda_linear.NT_DEFINES = d
        for prec, r in runners.items():
            for b in ((1, 8) if prec == "fp32" and rnd == 0 else (1,)):
                t = rate(r, b, 128)
                print(f"round {rnd} {name:9s} gpt2 {prec} b{b}: {t:,.0f} tok/s", flush=True)

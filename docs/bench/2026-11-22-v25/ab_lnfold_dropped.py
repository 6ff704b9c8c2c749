import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda, cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate
from scripts import check_linear as CL

print("# one-token GEMVs: LayerNorm staged vs folded (check_linear.gemv_case, error vs float64; torch32 = torch fp32's)")
for wd in ("f32", "bf16"):
    for d in (768, 1024, 1280, 1600):
        for k, n, epi, mean in ((d, 3 * d, "bias", 5.0), (d, 4 * d, "bias_gelu", 5.0), (d, 50257, None, 5.0),
                                (d, 3 * d, "bias", 3000.0)):
            for fold in (False, True):
                r = CL.gemv_case(wd, 1, k, n, epilogue=epi, nt=True, ln=True, ln_mean=mean, fold=fold, seed=d + n)
                print(r.line(), flush=True)

print("# decode rate: staged vs folded (late / early statistics), one process; decode_rate.rate, tok/s")
variants = (("staged", False, ()), ("fold late", True, ()), ("fold early", True, (("GEMV_FOLD_LATE", 0),)))
for size, steps, rounds in (("gpt2", 128, 2), ("gpt2-xl", 48, 1)):
    w = ModelWeights.random(SIZES[size], seed=0)
    runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
    for rnd in range(rounds):
        for name, fold, d in variants:
            cuda.LN_FOLD = fold
            cuda_linear.NT_DEFINES = d
            for prec, r in runners.items():
                t = rate(r, 1, steps)
                print(f"round {rnd} {name:10s} {size} {prec} b1: {t:,.0f} tok/s", flush=True)
    del runners, w

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("# where the nt GEMVs trigger the next kernel's launch: at their start (kept), after pdl_wait (1), after the "
      "LayerNorm rows (2); one process; decode_rate.rate, tok/s")
V = (("start", ()), ("after wait", (("GEMV_PDL_TRIGGER", 1),)), ("after LN", (("GEMV_PDL_TRIGGER", 2),)))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
for rnd in range(2):
    for name, d in V:
        cuda_linear.NT_DEFINES = d
        for prec, r in runners.items():
            for b in (1, 8):
                print(f"round {rnd} {name:10s} gpt2 {prec} b{b}: {rate(r, b, 128):,.0f} tok/s", flush=True)
cuda_linear.NT_DEFINES = ()

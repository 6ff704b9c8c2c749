import sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
from gpt2block.backends import cuda, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

sizes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["gpt2"]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
runners = {}
for size in sizes:
    w = ModelWeights.random(SIZES[size], seed=0)
    for prec in ("bf16", "fp32"):
        runners[(size, prec)] = make_runner(w, "cuda", prec)
print("# attention projection in the attention kernel (ATTN_PROJ) vs five kernels; one process; scripts/decode_rate.rate, 128 steps")
for rnd in range(rounds):
    for flag in (False, True):
        cuda.ATTN_PROJ = flag
        for (size, prec), r in runners.items():
            for b in ((1, 8) if size == "gpt2" else (1,)):
                if r._fused_fits(b):
                    continue
                t = rate(r, b, 128)
                print(f"round {rnd} {'attn_proj' if flag else 'five kernels':12s} {size} {prec} b{b}: {t:,.0f} tok/s", flush=True)

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cupy as cp
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

print("L2 bytes:", cp.cuda.Device().attributes["L2CacheSize"], "persisting max:", cp.cuda.Device().attributes.get("MaxPersistingL2CacheSize"))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
MB = 1 << 20
configs = [("base", ())] + [(f"evict_first + LM pin {m} MB", (("GEMV_W_POLICY", 1), ("GEMV_LM_PIN_BYTES", m * MB))) for m in (0, 16, 24, 32, 40)]
print("# GEMV weight loads' L2 policy; one process; decode_rate.rate, 128 steps, tok/s")
for rnd in range(2):
    for name, d in configs:
        cuda_linear.NT_DEFINES = d
        for prec, r in runners.items():
            for b in (1, 8):
                if b == 8 and name not in ("base", "evict_first + LM pin 24 MB", "evict_first + LM pin 0 MB"):
                    continue
                t = rate(r, b, 128)
                print(f"round {rnd} {name:28s} {prec} b{b}: {t:,.0f} tok/s", flush=True)

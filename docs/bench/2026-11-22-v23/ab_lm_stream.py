import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cupy as cp, numpy as np
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate

MB = 1 << 20
# 1. bits: the streamed LM head against the general loop
rng = np.random.default_rng()
bad = 0
for bf16 in (True, False):
    for k in (768, 1024, 1280, 1600, 64, 200):
        for n in (50257, 4097, 1000, 33, 7):
            x = cp.asarray(rng.standard_normal((1, k)).astype(np.float32) * 3 + 1)
            w32 = rng.standard_normal((n, k)).astype(np.float32)
            w = cp.asarray((w32.view(np.uint32) >> 16).astype(np.uint16)) if bf16 else cp.asarray(w32)
            g = cp.asarray(rng.random(k).astype(np.float32) + 0.5); b = cp.asarray(rng.standard_normal(k).astype(np.float32))
            outs = []
            for d in ((("GEMV_LM_STREAM", 0),), (("GEMV_LM_STREAM", 1),), (("GEMV_LM_STREAM", 1), ("GEMV_LM_DEPTH_BF16", 3), ("GEMV_LM_DEPTH_F32", 4)),
                      (("GEMV_LM_STREAM", 1), ("GEMV_W_POLICY", 1), ("GEMV_LM_PIN_BYTES", 24 * MB))):
                cuda_linear.NT_DEFINES = d
                o = cp.full((1, n), cp.nan, cp.float32)
                cuda_linear.gemv_nt(x, w, o, ln=(g, b, 1e-5))
                outs.append(o)
            same = all(bool((o.view(cp.uint32) == outs[0].view(cp.uint32)).all()) for o in outs[1:])
            if not same or bool(cp.isnan(outs[0]).any()):
                bad += 1
                print(f"MISMATCH bf16={bf16} k={k} n={n}", flush=True)
print(f"bits: {bad} mismatches over 60 shapes x 3 variants", flush=True)
cuda_linear.NT_DEFINES = ()

w = ModelWeights.random(SIZES["gpt2"], seed=0)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
configs = [("general loop", (("GEMV_LM_STREAM", 0),)), ("stream P 2/3", ()),
           ("stream P 3/4", (("GEMV_LM_DEPTH_BF16", 3), ("GEMV_LM_DEPTH_F32", 4))),
           ("stream + policy + pin 24MB", (("GEMV_W_POLICY", 1), ("GEMV_LM_PIN_BYTES", 24 * MB))),
           ("stream P3/4 + policy + pin 24MB", (("GEMV_LM_DEPTH_BF16", 3), ("GEMV_LM_DEPTH_F32", 4), ("GEMV_W_POLICY", 1), ("GEMV_LM_PIN_BYTES", 24 * MB)))]
print("# the LM head's weight stream; one process; decode_rate.rate, 128 steps, tok/s")
for rnd in range(2):
    for name, d in configs:
        cuda_linear.NT_DEFINES = d
        for prec, r in runners.items():
            for b in (1, 8):
                if b == 8 and name not in ("general loop", "stream P 2/3"):
                    continue
                t = rate(r, b, 128)
                print(f"round {rnd} {name:32s} {prec} b{b}: {t:,.0f} tok/s", flush=True)

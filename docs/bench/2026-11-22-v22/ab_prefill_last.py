import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
import torch
from gpt2block import bench
from gpt2block.backends import cuda_ops, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights

runner = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "fp32")
ids = np.random.default_rng(0).integers(0, 50257, 1024)
cache = runner.new_cache(1)


def last():
    cache.reset()
    runner.prefill(cache, 0, ids)


print("# prefill 1024 with the last logits (runner.prefill, as bench_prefill's ours_last_logits_ms), ms; LN hints plain vs kept")
for rnd in range(3):
    for name, defs in (("plain", (("LN_LOAD_HINT", 0), ("LN_STORE_HINT", 0))), ("hints", ())):
        cuda_ops.LN_DEFINES = defs
        last()
        t = bench._torch_median(torch, last, 20)
        tb = bench._torch_median(torch, last, 20, busy_cycles=5_000_000)
        print(f"round {rnd} {name}: {t:.3f} ms between events; {tb:.3f} behind a spin (host launch hidden)", flush=True)

"""Version 35, visit 12: the benchmark's own measurement of greedy decode (gpt2block.bench._ours_decode_rate: 128
steps, median of 5 generations) for gpt2 bf16 and fp32 at batch 1, the cluster kernel on (the default) and off."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block import bench  # noqa: E402
from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

w = ModelWeights.random(SIZES["gpt2"], seed=0)
for prec in ("bf16", "fp32"):
    r = make_runner(w, "cuda", prec)
    for rnd in range(2):
        for on in ((True, False) if prec == "bf16" else (True,)):
            r.cluster_decode = on
            tok_s = bench._ours_decode_rate(torch, r, 1, 128, 5)
            print(f"round {rnd} {prec} b1 cluster {on} (runs: {r._cluster_fits(1)}): {tok_s:,.0f} tok/s "
                  f"({1e6 / tok_s:.1f} us a step)", flush=True)

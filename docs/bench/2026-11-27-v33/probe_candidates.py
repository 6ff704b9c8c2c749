"""Version 33: how many rows of the LM head's screen are candidates, globally (ub >= L, the largest lb: what
lm_rescore forms exactly) and within each screen block (ub >= L_b, the block's own largest lb: what a block
could form on its own, without the grid-wide L). Greedy decode at batch 1 on random gpt2 weights (the A/B
scripts' ModelWeights.random, and the benchmark's transformers initialisation), 32 steps each; the screen's
workspace (ub, lb_part) read after every step."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear as L, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402


def hf_weights():
    import torch

    from gpt2block.bench import _hf_model, _weights_from_hf
    return _weights_from_hf(_hf_model(torch, "gpt2"))


for label, weights in (("ModelWeights.random", ModelWeights.random(SIZES["gpt2"], seed=0)), ("transformers init", hf_weights())):
    for prec in ("bf16", "fp32"):
        r = make_runner(weights, "cuda", prec)
        n, k = r.wte_dec.shape
        g1 = L._screen_grids(n, k)[0]
        rows_blk = 8 * 8  # 8 warps x LM_SCREEN_ROWS (J <= 4)
        blk = (np.arange(n) % (g1 * rows_blk)) // rows_blk  # each row's screen block
        cache = r.new_cache(1)
        tok = np.array([int(np.argmax(r.prefill(cache, 0, np.random.default_rng(5).integers(0, 50257, 16))))])
        glob, loc_max, loc_mean, over8 = [], [], [], []
        steps = r.greedy_steps(cache, tok, max_steps=32)
        for _ in steps:
            r.stream.synchronize()
            ub, lb_part, h = (cp.asnumpy(a) for a in L._screen_workspace(n, k, g1, r.stream))
            glob.append(int((ub >= lb_part.max()).sum()))
            loc = np.bincount(blk[ub >= lb_part[blk]], minlength=g1)
            loc_max.append(int(loc.max()))
            loc_mean.append(float(loc.mean()))
            over8.append(int((loc > 8).sum()))
        print(f"{label} {prec}: global candidates a step median {np.median(glob):.0f} (max {max(glob)}); "
              f"local a block: mean {np.mean(loc_mean):.2f}, largest {max(loc_max)}; blocks over 8 a step: "
              f"median {np.median(over8):.0f}", flush=True)

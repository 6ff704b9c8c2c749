"""Version 35: where a layer's time goes in the cluster kernel (DC_TRACE build): gpt2 bf16 b1, 40 greedy steps,
then the last step's stamps of the first and last block, thread 0, per stage averaged over layers 1-11 (us, from
the clock with the global timer's rate of the same launch)."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_cluster, cuda_modules, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

STAGES = ["x wait + gather (A)", "LN1 (+ vectors)", "QKV weights wait", "QKV + broadcast + cluster sync",
          "attention + block combine", "cluster sync + combine", "proj weights + proj + arrive (C)",
          "x1 wait + gather (D)", "LN2 + FC weights wait", "FC + broadcast + cluster sync", "PR weights wait", "PR rows (E)", "arrive (E)"]
NS = len(STAGES) + 1  # stamps a layer (DC_STAGES)
cuda_cluster.DEFINES = (("DC_TRACE", 1),) + tuple((a.split("=")[0], a.split("=")[1]) for a in sys.argv[1:])
w = ModelWeights.random(SIZES["gpt2"], seed=1)
r = make_runner(w, "cuda", "bf16")
cache = r.new_cache(1)
first = r.prefill(cache, 0, np.arange(16)).argmax()
for _ in r.greedy_steps(cache, np.array([first]), max_steps=40):
    pass
r.stream.synchronize()
mod = cuda_modules.module("decode_cluster", cuda_cluster.DEFINES)
tr = cp.ndarray((2, NS * 64), cp.int64, memptr=mod.get_global("dc_trace")).get().reshape(2, 64, NS)[:, :12]
pair = cp.ndarray((2, 4), cp.int64, memptr=mod.get_global("dc_trace_pair")).get()
for b, name in ((0, "block 0"), (1, "last block")):
    us_per_clk = (pair[b, 3] - pair[b, 1]) / 1e3 / (pair[b, 2] - pair[b, 0])
    t = tr[b].astype(np.float64) * us_per_clk
    d = np.diff(t, axis=1)  # [layer, NS - 1]
    layer = np.diff(t[:, 0])
    print(f"{name}: launch {(pair[b, 3] - pair[b, 1]) / 1e3:.1f} us (clock {1 / us_per_clk:.0f} MHz), "
          f"layer {layer[1:].mean():.2f} us (min {layer[1:].min():.2f}, max {layer[1:].max():.2f})")
    for i, s in enumerate(STAGES):
        print(f"  {s:36s} {d[1:, i].mean():6.2f} us  (layer 0: {d[0, i]:.2f})")
    print(f"  {'arrive end -> next layer start':36s} {(t[1:, 0] - t[:-1, -1]).mean():6.2f} us")
cuda_cluster.DEFINES = ()

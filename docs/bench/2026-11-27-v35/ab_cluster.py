"""Version 35: gpt2 bf16 batch-1 greedy decode with every block in the cluster kernel
(kernels/decode_cluster.cu, runner.cluster_decode True) against the five-kernel chain (False), in one
process, three rounds of scripts/decode_rate.rate (128 steps after a 16-token prompt, median of 5);
fp32 (which the cluster kernel does not run) as a control; the greedy tokens of both paths compared."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from decode_rate import rate  # noqa: E402
from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

size = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
w = ModelWeights.random(SIZES[size], seed=1)
runners = {p: make_runner(w, "cuda", p) for p in ("bf16", "fp32")}
r = runners["bf16"]
r.cluster_decode = True
print(f"{size}: cluster kernel fits: {r._cluster_fits(1)}", flush=True)
if r._cluster is not None and r._cluster.kernel is not None:
    from gpt2block.backends import cuda_launch
    k = r._cluster
    print(f"max active clusters {cuda_launch.max_active_clusters(k.kernel.kernel.ptr, (k.grid, 1, 1), (256, 1, 1), k.smem)}"
          f", grid {k.grid}, smem {k.smem}, regs {k.kernel.num_regs}", flush=True)
toks = {}
rng = np.random.default_rng(3)
prompt = rng.integers(0, 50257, 16)
for on in (True, False):
    r.cluster_decode = on
    cache = r.new_cache(1)
    first = r.prefill(cache, 0, prompt).argmax()
    toks[on] = [int(t[0]) for t in r.greedy_steps(cache, np.array([first]), max_steps=128)]
same = sum(a == b for a, b in zip(toks[True], toks[False]))
print(f"greedy tokens, 128 steps: {same} of 128 the same (first difference at "
      f"{next((i for i, (a, b) in enumerate(zip(toks[True], toks[False])) if a != b), None)})", flush=True)
for rnd in range(3):
    for on in (True, False):
        r.cluster_decode = on
        print(f"round {rnd} bf16 b1 cluster {on}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    print(f"round {rnd} fp32 b1 (control): {rate(runners['fp32'], 1, 128):,.0f} tok/s", flush=True)

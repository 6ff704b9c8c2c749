"""Version 31: what a graph boundary costs a greedy step on this GPU. Visits 4-6's timelines put about 7.6 us at
each step's start (the gap after the last graph, the embedding, layer 0's QKV starting 4.4 us after the graph's
first kernel and loading its weights after that) against 2.5 us for a QKV inside the step. Here K chained
greedy steps (the kernels greedy_steps captures for one step, K times) are captured as one graph and the graph
replayed back to back, R times, with no host wait between replays: GPU time per step, K = 1 (as greedy_steps
runs now), 2, 4, 8, alternating, three rounds; each run from a fresh 16-token prompt and one decode_greedy step
(which uploads the step's ints), 96 steps. Prints us per step and tok/s. gpt2, bf16 and fp32, batch 1.
Visit 7 ran it with every step's embedding launched plainly, CONFIGS = [("plain", k) for k in (1, 2, 4, 8)] (and
no `chained` argument); visit 8 as written here, also with the steps after a graph's first chained
(cuda_ops.embedding(chained=True): programmatic, the kernels after it launched only once it has waited), which needs
chained_embedding_dropped.patch (beside this script) applied: both were measured no faster and dropped."""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cupy as cp  # noqa: E402

from gpt2block.backends import cuda_modules, cuda_ops, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

STEPS = 96
MODES = ("plain", "chained")
CONFIGS = [("plain", 1)] + [(m, k) for k in (4, 16) for m in MODES]
for prec in ("bf16", "fp32"):
    r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", prec)
    cache = r.new_cache(1)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 50257, 16)

    def start():
        cache.reset()
        tok = r.prefill(cache, 0, prompt).argmax(-1, keepdims=True)
        r.decode_greedy(cache, tok)  # uploads the step's ints; the chained steps advance them on the device
        r.stream.synchronize()

    start()
    for _ in r.greedy_steps(cache, r.decode_greedy(cache, np.array([1])), max_steps=4):  # screen, kernels built
        pass
    ring = cuda_ops.MappedInts(1)
    graphs = {}
    for mode, k in CONFIGS:
        start()
        with r.stream:
            r.stream.begin_capture()
            try:
                with cuda_modules.programmatic_launches(r.programmatic):
                    for i in range(k):
                        r._decode_kernels(cache, cache.step, host_out=ring, logits=False,
                                          chained=mode == "chained" and i > 0)
            finally:
                graphs[mode, k] = r.stream.end_capture()
    for rnd in range(3):
        for mode, k in CONFIGS:
            start()
            t0 = time.perf_counter()
            with r.stream:
                for _ in range(STEPS // k):
                    graphs[mode, k].launch(r.stream)
            r.stream.synchronize()
            dt = (time.perf_counter() - t0) / STEPS
            print(f"round {rnd} gpt2 {prec} b1, {k} steps a graph, {mode}: {dt * 1e6:6.1f} us a step, "
                  f"{1 / dt:,.0f} tok/s", flush=True)
    del r

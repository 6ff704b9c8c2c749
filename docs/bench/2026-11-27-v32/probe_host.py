"""Version 32: what greedy_steps' host loop costs a step against graphs replayed back to back. One process,
gpt2 b1 (bf16, then fp32), 96 steps from one start, three rounds, us a step:
  replay          the step's graph (as greedy_steps captures it) launched 96 times, no event, one wait at the end;
  replay+events   the same with an event recorded after each launch (as greedy_steps records one);
  greedy_steps    decode_rate.rate's loop (one step ahead, an event wait and the argmax read per step; its
                  step 0 is decode_greedy's, with the ints' upload and a host wait)."""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cupy as cp  # noqa: E402

from gpt2block.backends import cuda_modules, cuda_ops, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

STEPS = 96
for prec in sys.argv[1:] or ("bf16", "fp32"):
    r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", prec)
    cache = r.new_cache(1)
    prompt = np.random.default_rng(0).integers(0, 50257, 16)

    def start():
        cache.reset()
        tok = r.prefill(cache, 0, prompt).argmax(-1, keepdims=True)
        r.decode_greedy(cache, tok)
        r.stream.synchronize()

    start()
    for _ in r.greedy_steps(cache, r.decode_greedy(cache, np.array([1])), max_steps=4):
        pass
    ring = cuda_ops.MappedInts(1)
    start()
    with r.stream:
        r.stream.begin_capture()
        try:
            with cuda_modules.programmatic_launches(r.programmatic):
                r._decode_kernels(cache, cache.step, host_out=ring, logits=False)
        finally:
            graph = r.stream.end_capture()
    events = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
    for rnd in range(3):
        for mode in ("replay", "replay+events"):
            start()
            t0 = time.perf_counter()
            with r.stream:
                for i in range(STEPS):
                    graph.launch(r.stream)
                    if mode == "replay+events":
                        events[i % 2].record(r.stream)
            r.stream.synchronize()
            dt = (time.perf_counter() - t0) / STEPS
            print(f"round {rnd} gpt2 {prec} b1 {mode}: {dt * 1e6:6.1f} us a step, {1 / dt:,.0f} tok/s", flush=True)
        tps = rate(r, 1, STEPS)
        print(f"round {rnd} gpt2 {prec} b1 greedy_steps: {1e6 / tps:6.1f} us a step, {tps:,.0f} tok/s", flush=True)
    del r

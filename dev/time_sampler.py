#!/usr/bin/env python3
"""Device time of one sample_rows_f32 launch (kernels/sampler.cu) at batch B, per mode, on random logits.

python3 dev/time_sampler.py [--batches 1,8,64,256]

Per (B, mode): the median of 20 launches between CUDA events (the kernel alone: the parameter words are
uploaded before the first event), in microseconds, and per row. Needs a GPU and CuPy; a few seconds.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy as cp  # noqa: E402

from gpt2block.backends.cuda import sampler as ds  # noqa: E402
from gpt2block.sampler import SamplingBatch, SamplingParams  # noqa: E402

MODES = {"greedy": SamplingParams(temperature=0), "t=1 top-k 50": SamplingParams(top_k=50),
         "t=0.8 top-p 0.95": SamplingParams(temperature=0.8, top_k=0, top_p=0.95),
         "repetition 1.2": SamplingParams(top_k=50, repetition_penalty=1.2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64,256")
    a = ap.parse_args()
    V = 50257
    stream = cp.cuda.Stream()
    print(f"{'B':>4} {'mode':>17} {'us':>9}")
    for B in map(int, a.batches.split(",")):
        rng = np.random.default_rng(B)
        logits = cp.asarray((rng.standard_normal((B, V)) * 3).astype(np.float32))
        prompts = [list(rng.integers(0, V, 128)) for _ in range(B)]
        for mode, p in MODES.items():
            batch = SamplingBatch([p] * B, np.arange(B), np.zeros(B, np.int64), prompts)
            dev = ds.DeviceSampler(B, V)
            dev.launch(logits, batch, np.full(B, 128), stream)
            dev.result(stream)
            with stream:
                dev.start_chain(batch, stream)
            step = cp.zeros((4, B), cp.int32)
            times = []
            for _ in range(20):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                dev._launch_kernel(logits, batch.penalised, False, 0, None, step, None, stream)
                e1.record(stream)
                e1.synchronize()
                times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
            dev.end_chain()
            print(f"{B:>4} {mode:>17} {np.median(times):>9.1f}", flush=True)


if __name__ == "__main__":
    main()

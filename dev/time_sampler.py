#!/usr/bin/env python3
"""Device time of one sample_rows_f32 launch (kernels/sampler.cu) at batch B, per mode, on random logits.

cd <a checkout> && PYTHONPATH=$PWD python3 <this file> [--batches 1,8,64,256]   (times the checkout's sampler)

Per (B, mode): the median of 20 DeviceSampler.launch calls between CUDA events (the kernel, with the upload
of the parameter words and the download of the ids: a few microseconds), in microseconds. Needs a GPU and
CuPy; a few seconds. dev/run_sampler_check_gpu.sh runs it on this tree and on a base checkout, side by side.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path.cwd()))  # the tree to time: the working directory

import cupy as cp  # noqa: E402

from gpt2block.backends.cuda import sampler as ds  # noqa: E402
from gpt2block.sampler import SamplingBatch, SamplingParams  # noqa: E402

MODES = {"greedy": SamplingParams(temperature=0), "t=1 top-k 50": SamplingParams(top_k=50),
         "t=1 top-k 200": SamplingParams(top_k=200), "t=1 top-k 1000": SamplingParams(top_k=1000),
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
            positions = np.full(B, 128)
            dev.launch(logits, batch, positions, stream)
            dev.result(stream)
            times = []
            for _ in range(20):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                dev.launch(logits, batch, positions, stream)
                e1.record(stream)
                dev.result(stream)
                times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
            print(f"{B:>4} {mode:>17} {np.median(times):>9.1f}", flush=True)


if __name__ == "__main__":
    main()

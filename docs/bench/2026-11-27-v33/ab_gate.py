"""Version 33: the decode step's weight-load gate (cuda.DECODE_GATE, cuda_linear.GateChain, kernels/gemv.cu
GemvGate): ln_2 + FC, the MLP projection and the next ln_1 + QKV hold their weight loads until every block of
the kernel before has its activations (or 3 us), so that their weights do not stream in while that kernel
reads its x. gpt2 b1 tok/s (decode_rate.rate, 128 steps), one process, three rounds, bf16 and fp32; first the
decode logits of both (the same bits expected), then the bf16 step's timeline of each."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

size = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
ids = np.random.default_rng(1).integers(0, 50257, 20)
for prec in ("bf16", "fp32"):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    out = {}
    for gate in (False, True):
        cuda.DECODE_GATE = gate
        cache = r.new_cache(1)
        r.prefill(cache, 0, ids[:16])
        out[gate] = np.stack([r.decode(cache, np.array([t])) for t in ids[16:]])
    print(f"{size} {prec}: logits gated vs not, max |diff| {float(np.abs(out[True] - out[False]).max()):.3g}", flush=True)
    for rnd in range(3):
        for gate in (False, True):
            cuda.DECODE_GATE = gate
            print(f"round {rnd} {size} {prec} b1 gate {'on ' if gate else 'off'}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    if prec == "bf16" and size == "gpt2":
        from scripts.timeline_decode import run_case
        for gate in (False, True):
            cuda.DECODE_GATE = gate
            print(f"== timeline, gate {'on' if gate else 'off'}")
            print("\n".join(run_case(r, 1, 64)))
    del r
cuda.DECODE_GATE = True

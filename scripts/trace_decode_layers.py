#!/usr/bin/env python3
"""Where the fused decode kernel's time goes, phase by phase: kernels/decode_layers.cu built with
DL_TRACE, whose first and last blocks stamp clock64() at each phase's start and end.

    python scripts/trace_decode_layers.py [SIZE] [--batch B] [--precision fp32|bf16] [--steps N]
                                          [--define NAME[=VALUE] ...]

Random weights; after a 16-token prefill per row, N eager steps. Prints, per phase, the median over
steps and layers of the time in the phase and of the wait at the grid barrier after it, for the
first and the last block (their clocks are separate SMs', so only durations are compared).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends import make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

PHASES = ("QKV", "ATT", "PROJ", "FC", "PROJ2")


def main() -> int:
    import cupy as cp

    from gpt2block.backends.cuda import decode_layers as cuda_decode

    from gpt2block.backends.cuda import modules as cuda_modules

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", nargs="?", default="gpt2", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--define", action="append", default=[], metavar="NAME[=VALUE]",
                    help="an extra #define of decode_layers.cu (a tuning switch); may repeat")
    a = ap.parse_args()
    extra = tuple((d.split("=", 1)[0], d.split("=", 1)[1] if "=" in d else 1) for d in a.define)
    cuda_decode.DEFINES = (("DL_TRACE", 1),) + extra
    runner = make_runner(ModelWeights.random(SIZES[a.size], seed=0), "cuda", a.precision)
    runner.use_graphs, runner.fused_decode = False, True
    cache = runner.new_cache(a.batch)
    for r in range(a.batch):
        runner.prefill(cache, r, np.arange(16) + r)
    tok = np.zeros(a.batch, np.int64)
    tok = runner.decode_greedy(cache, tok)
    mod = cuda_modules.module("decode_layers", cuda_decode.DEFINES)
    trace = cp.ndarray((2, 640), cp.int64, mod.get_global("dl_trace"))
    n = runner.config.n_layer
    stamps = []
    for _ in range(a.steps):
        tok = runner.decode_greedy(cache, tok)
        stamps.append(cp.asnumpy(trace[:, :10 * n]).reshape(2, n, 10))
    st = np.stack(stamps)  # [steps, block, layer, 10]
    ghz = cp.cuda.Device().attributes["ClockRate"] / 1e6  # kHz -> GHz
    start, end = st[..., 0::2], st[..., 1::2]  # [steps, block, layer, phase]
    busy = (end - start) / ghz / 1e3  # us
    nxt = np.concatenate([start[..., 1:], np.roll(start[..., :1], -1, axis=2)], axis=-1)
    wait = (nxt - end) / ghz / 1e3
    wait[..., -1, -1] = np.nan  # no barrier after the last phase
    print(f"{a.size} {a.precision} batch {a.batch} {' '.join(a.define)}: us per phase (median over steps and layers)")
    print(f"{'phase':6} {'first busy':>10} {'first wait':>10} {'last busy':>10} {'last wait':>10}")
    for p, name in enumerate(PHASES):
        row = [np.nanmedian(x[:, blk, :, p]) for blk in (0, 1) for x in (busy, wait)]
        print(f"{name:6} " + " ".join(f"{v:10.2f}" for v in row))
    det = cp.asnumpy(cp.ndarray((4 * 64, 4), cp.int64, mod.get_global("dl_detail"))[:4 * n]).reshape(n, 4, 4)
    d = det[..., :2] / ghz / 1e3  # last step: [layer, phase, (waiting for weights, all)]
    phase_start = st[-1, 0][:, [0, 4, 6, 8]]  # [layer, matrix phase]: the first block's stamps
    inputs = (det[..., 3] - phase_start) / ghz / 1e3
    ln = (det[..., 2] - det[..., 3]) / ghz / 1e3
    print("first block, matrix phases (us, median over layers): inputs landed, LayerNorm, "
          "waiting for weights, arithmetic in all")
    for p, name in enumerate(("QKV", "PROJ", "FC", "PROJ2")):
        row = [np.median(inputs[:, p]), np.median(ln[:, p])] + list(np.median(d[:, p], axis=0))
        print(f"{name:6} " + " ".join(f"{v:8.2f}" for v in row))
    chs = cp.asnumpy(cp.ndarray((2, 4 * 64, 8, 3), cp.int64, mod.get_global("dl_chunk"))[:, :4 * n])
    for wi, p, name in [(wi, p, name) for wi in (0, 1) for p, name in enumerate(("QKV", "PROJ", "FC", "PROJ2"))]:
        ch = chs[wi].reshape(n, 4, 8, 3)
        if p == 0:
            print(f"first block, warp {wi}, per stage chunk (us, median over layers): to acquired / arithmetic / sums + store")
        prev = det[:, p, 2].astype(np.float64)
        cells = []
        for c in range(8):
            a, b, e = (ch[:, p, c, i].astype(np.float64) for i in range(3))
            if not (a > prev).all():
                break
            done = e if (e > b).all() else b
            cells.append("%.2f/%.2f/%.2f" % tuple(np.median(v) / ghz / 1e3 for v in (a - prev, b - a, done - b)))
            prev = done
        print(f"{name:6} " + "  ".join(cells))
    tail = cp.asnumpy(cp.ndarray((64, 4), cp.int64, mod.get_global("dl_tail"))[:n])
    ends = st[-1, 0][:, [1, 5, 7, 9]]  # [layer, matrix phase]: the first block's phase-end stamps
    arith_end = det[..., 2] + det[..., 1]
    print("first block, after each matrix phase (us, median over layers): its last stamp to its return / "
          "its return to the phase's end stamp (the next parameters' loads issued)")
    print("       " + "  ".join(f"{name} {np.median((tail[:, p] - arith_end[:, p]) / ghz / 1e3):.2f}/"
                                f"{np.median((ends[:, p] - tail[:, p]) / ghz / 1e3):.2f}"
                                for p, name in enumerate(("QKV", "PROJ", "FC", "PROJ2"))))
    cl = cp.asnumpy(cp.ndarray((4,), cp.int64, mod.get_global("dl_clock_pair")))
    print(f"SM clock during the last step: {(cl[2] - cl[0]) / max(cl[3] - cl[1], 1):.3f} GHz "
          f"(ClockRate attribute {ghz:.3f}; the us above use the attribute)")
    layer = (start[:, 0, -1, 0] - start[:, 0, 0, 0]) / ghz / 1e3 / max(n - 1, 1)
    print(f"per layer (first block, start to start): {np.median(layer):.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

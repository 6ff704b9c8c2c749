"""Version 28: one process, decode_rate.rate (greedy_steps after a 16-token prompt, median of 5), tok/s.
The batch-1 greedy steps' LM head through its int8 screen (cuda.SCREEN_HEAD on) against the full head
with its own argmax (off, version 27). After each screened rate, the candidates of its last step
(rows with ub >= the largest lb, read from the screen's workspace)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cupy as cp  # noqa: E402

from gpt2block.backends import cuda, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

CASES = (("gpt2", "bf16", 1, 128, 3), ("gpt2", "fp32", 1, 128, 3), ("gpt2-medium", "bf16", 1, 64, 2),
         ("gpt2-xl", "fp32", 1, 48, 1))
if len(sys.argv) > 1:  # a count of the cases, or the sizes to run
    CASES = CASES[: int(sys.argv[1])] if sys.argv[1].isdigit() else [c for c in CASES if c[0] in sys.argv[1].split(",")]
for size, prec, batch, steps, rounds in CASES:
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", prec)
    for rnd in range(rounds):
        for on in (False, True):
            cuda.SCREEN_HEAD = on
            tps = rate(r, batch, steps)
            extra = ""
            if on:
                r.stream.synchronize()
                n, k = r.wte_dec.shape
                ub, lbp, _ = cuda_linear._screen_ws[(cp.cuda.Device().id, r.stream.ptr, n, k,
                                                      cuda_linear._screen_grids(n, k)[0])]
                extra = f" (last step: {int((ub >= lbp.max()).sum())} candidates)"
            print(f"round {rnd} {size} {prec} b{batch} screen {'on ' if on else 'off'}: {tps:,.0f} tok/s{extra}",
                  flush=True)
    del r, w
cuda.SCREEN_HEAD = True

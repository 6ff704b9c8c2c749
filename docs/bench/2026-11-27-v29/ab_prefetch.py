"""Version 29: one process, decode_rate.rate (greedy_steps, median of 5), gpt2 b1, tok/s: the full head
(screen off), the screen as committed (8 rows a warp, one group in flight, 2 blocks a SM), and the screen
with the next row group's loads issued before the current group's sums (LM_SCREEN_PREFETCH=1) at 4 rows
and 2 blocks a SM, and at 8 rows and 1 block a SM (the registers allow no more)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

PF = ("LM_SCREEN_PREFETCH", 1)
VARIANTS = (("full head", False, ()), ("screen R8 B2", True, ()),
            ("screen prefetch R4 B2", True, (PF, ("LM_SCREEN_ROWS", 4))),
            ("screen prefetch R8 B1", True, (PF, ("LM_SCREEN_MIN_BLOCKS", 1))))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
for prec in ("bf16", "fp32"):
    r = make_runner(w, "cuda", prec)
    for rnd in range(3):
        for label, on, defs in VARIANTS:
            cuda.SCREEN_HEAD, cuda_linear.SCREEN_DEFINES = on, defs
            print(f"round {rnd} gpt2 {prec} b1 {label}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda.SCREEN_HEAD, cuda_linear.SCREEN_DEFINES = True, ()

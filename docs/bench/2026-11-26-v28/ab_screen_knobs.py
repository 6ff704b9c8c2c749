"""Version 28: one process, decode_rate.rate (greedy_steps, median of 5), gpt2 b1, tok/s: the full head
(screen off) against the register screen (lm_screen.cuh as committed) in builds of its knobs: rows a
warp at a time (LM_SCREEN_ROWS), blocks a SM (LM_SCREEN_MIN_BLOCKS), int8 bytes kept in the L2
(LM_SCREEN_PIN_BYTES)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

MB = 1 << 20
# visit 4 (the committed default then R4 B2 pin24): R4/R8/B3/pin0/pin40; visit 5 (default R8 B2 pin24)
# with --round2: R8 pin0 / pin16 and R16 at one block a SM
VARIANTS = (("full head", False, ()), ("screen R4 B2 pin24", True, (("LM_SCREEN_ROWS", 4),)),
            ("screen R8 B2 pin24", True, (("LM_SCREEN_ROWS", 8),)),
            ("screen R4 B3 pin24", True, (("LM_SCREEN_ROWS", 4), ("LM_SCREEN_MIN_BLOCKS", 3))),
            ("screen R4 B2 pin0", True, (("LM_SCREEN_ROWS", 4), ("LM_SCREEN_PIN_BYTES", 0))),
            ("screen R4 B2 pin40", True, (("LM_SCREEN_ROWS", 4), ("LM_SCREEN_PIN_BYTES", 40 * MB))))
if "--round2" in sys.argv:
    VARIANTS = (("full head", False, ()), ("screen R8 B2 pin24", True, ()),
                ("screen R8 B2 pin0", True, (("LM_SCREEN_PIN_BYTES", 0),)),
                ("screen R8 B2 pin16", True, (("LM_SCREEN_PIN_BYTES", 16 * MB),)),
                ("screen R16 B1 pin24", True, (("LM_SCREEN_ROWS", 16), ("LM_SCREEN_MIN_BLOCKS", 1))))
w = ModelWeights.random(SIZES["gpt2"], seed=0)
for prec in ("bf16", "fp32"):
    r = make_runner(w, "cuda", prec)
    for rnd in range(2):
        for label, on, defs in VARIANTS:
            cuda.SCREEN_HEAD, cuda_linear.SCREEN_DEFINES = on, defs
            print(f"round {rnd} gpt2 {prec} b1 {label}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
cuda.SCREEN_HEAD, cuda_linear.SCREEN_DEFINES = True, ()

"""Version 28: one process, decode_rate.rate (greedy_steps, median of 5), gpt2 b1, tok/s: the full head
(screen off) against the staged screen with at most S table stages in flight a block (8 = all its
shared memory holds at K = 768; fewer leave room for the kernels before it), and the staged screen with
every decode kernel built for the largest shared-memory carveout (so that no SM must drain before a
screen block fits beside the kernel ahead)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_linear, cuda_modules, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

w = ModelWeights.random(SIZES["gpt2"], seed=0)
for prec in ("bf16", "fp32"):
    r = make_runner(w, "cuda", prec)
    for rnd in range(2):
        for label, on, stages, carve in (("full head", False, 16, None), ("screen, 8 stages", True, 16, None),
                                         ("screen, 2 stages", True, 2, None), ("screen, 1 stage", True, 1, None),
                                         ("full head, carveout 100", False, 16, 100),
                                         ("screen, 8 stages, carveout 100", True, 16, 100)):
            cuda.SCREEN_HEAD, cuda_linear.SCREEN_STAGES_MAX = on, stages
            rate(r, 1, 8, reps=1)  # kernels built before the carveout is set
            for k in cuda_modules._kernels.values():
                k.preferred_shared_memory_carveout = -1 if carve is None else carve
            print(f"round {rnd} gpt2 {prec} b1 {label}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    del r
for k in cuda_modules._kernels.values():
    k.preferred_shared_memory_carveout = -1
cuda.SCREEN_HEAD, cuda_linear.SCREEN_STAGES_MAX = True, 16

"""Version 32: visit 6 found the one-token GEMVs slower with the copy-engine path built in, even when it is not
taken. Three modes in one process, decode_rate.rate, tok/s, gpt2 b1 bf16 and fp32, three rounds:
  no-bulk build   NT_DEFINES GEMV_W_BULK=0: the kernels without the path (version 31's code);
  bulk build off  the build with the path, cuda_linear.GEMV_W_BULK False (no room given: registers);
  bulk build on   the path taken.
Then the GPU's timeline of gpt2 bf16 b1 in the first and the third.
The path is in bulk_dropped.patch (git apply late_trigger_dropped.patch, then it; visit 7) or bulk_cta_dropped.patch
(alone; visit 9): both measured slower, dropped."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402
from scripts.timeline_decode import run_case  # noqa: E402

MODES = {"no-bulk build": ((("GEMV_W_BULK", 0),), False), "bulk build off": ((), False), "bulk build on": ((), True)}


def mode(name):
    cuda_linear.NT_DEFINES, cuda_linear.GEMV_W_BULK = MODES[name]


runners = {p: make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", p) for p in ("bf16", "fp32")}
for rnd in range(3):
    for p, r in runners.items():
        for name in MODES:
            mode(name)
            print(f"round {rnd} gpt2 {p} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
for name in ("no-bulk build", "bulk build on"):
    mode(name)
    print(f"\n== timeline gpt2 bf16 b1 {name}")
    print("\n".join(run_case(runners["bf16"], 1, 64)), flush=True)

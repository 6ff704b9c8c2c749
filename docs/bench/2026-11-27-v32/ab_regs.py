"""Version 32: fewer registers for the one-token GEMVs, so that more of the next kernels' blocks fit beside them
(visits 2 and 6-9: +12 to +16 registers in ln_1 + QKV cost 5-16%). One process, decode_rate.rate, tok/s, three
rounds: gpt2 bf16 b1 with the 4-rows-a-warp builds' register bound at 2 blocks a SM (kept; 96 registers in the
LayerNorm GEMVs), 3 (78-80, no spill) and 4 (64, 12-40 bytes spilled) (GEMV_NT_MIN_BLOCKS_ROWS4; the grids
unchanged); gpt2 fp32 b1 at 3 (kept) and 4 blocks a SM (GEMV_NT_MIN_BLOCKS_M1_F32); then the GPU's timeline of
gpt2 bf16 b1 at 2 and 3. GEMV_NT_MIN_BLOCKS_ROWS4 is in min_blocks_rows4_probe.patch (beside this script; git apply
it first): fewer registers measured slower, not kept."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402
from scripts.timeline_decode import run_case  # noqa: E402

CASES = {"bf16": ("GEMV_NT_MIN_BLOCKS_ROWS4", (2, 3, 4)), "fp32": ("GEMV_NT_MIN_BLOCKS_M1_F32", (3, 4))}
runners = {p: make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", p) for p in CASES}
for rnd in range(3):
    for p, (name, values) in CASES.items():
        for v in values:
            cuda_linear.NT_DEFINES = ((name, v),)
            print(f"round {rnd} gpt2 {p} b1 {name}={v}: {rate(runners[p], 1, 128):,.0f} tok/s", flush=True)
for v in (2, 3):
    cuda_linear.NT_DEFINES = (("GEMV_NT_MIN_BLOCKS_ROWS4", v),)
    print(f"\n== timeline gpt2 bf16 b1 GEMV_NT_MIN_BLOCKS_ROWS4={v}")
    print("\n".join(run_case(runners["bf16"], 1, 64)), flush=True)
cuda_linear.NT_DEFINES = ()

"""Version 27, visit 2: one process, decode_rate.rate (greedy_steps, 128 steps after a 16-token prompt,
median of 5), tok/s, bf16 batch 1. The attention projection and ln_2 + FC as one cluster kernel
(cuda.PROJ_FC, kernels/proj_fc.cu) in its builds (cluster, warps, grid, Wo in shared memory), against
the two GEMVs (off, version 26). Each build's availability (the driver's count of active clusters)
and registers are printed first."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda, cuda_launch, cuda_proj_fc, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

BUILDS = {
    768: [(16, 12, 128, 1), (16, 12, 128, 0), (16, 12, 64, 1), (8, 12, 128, 1)],
    1024: [(16, 16, 128, 1), (16, 16, 64, 1)],
}
for d, builds in BUILDS.items():
    for b in builds:
        cuda_proj_fc.PROJ_FC_BY_WIDTH[d] = b
        plan = cuda_proj_fc.proj_fc_plan(d)
        k, smem = cuda_proj_fc._build(d, b)
        held = cuda_launch.max_active_clusters(k.kernel.ptr, k.name, (b[2],), (32 * b[1],), smem)
        print(f"D={d} build {b}: {k.num_regs} registers, {smem} B dynamic smem, {held} clusters at once "
              f"(needs {b[2] // b[0]}): {'runs' if plan else 'falls back'}", flush=True)


def run(size, steps, builds, rounds):
    d = SIZES[size].n_embd
    w = ModelWeights.random(SIZES[size], seed=0)
    r = make_runner(w, "cuda", "bf16")
    for rnd in range(rounds):
        for b in [None] + builds:
            cuda.PROJ_FC = b is not None
            if b is not None:
                cuda_proj_fc.PROJ_FC_BY_WIDTH[d] = b
                if cuda_proj_fc.proj_fc_plan(d) is None:
                    continue
            print(f"round {rnd} {size} bf16 b1 proj_fc {b or 'off'}: {rate(r, 1, steps):,.0f} tok/s", flush=True)
    del r, w


run("gpt2", 128, BUILDS[768], 3)
run("gpt2-medium", 64, BUILDS[1024], 2)
cuda.PROJ_FC = True

"""Version 32: one process, decode_rate.rate, tok/s: the one-token GEMVs' weight rows into shared memory by the
copy engine (cuda_linear.GEMV_W_BULK True: one cp.async.bulk a block before the wait) against the warps'
register loads (False, version 31's path); the same kernels and bits. gpt2 bf16 and fp32 b1 three rounds;
gpt2 fp32 b8 (the m8 build, unchanged: a control), gpt2-medium bf16 b1 and gpt2-xl fp32 b1 once each; then
the GPU's timeline of gpt2 bf16 b1 under each.
GEMV_W_BULK is in bulk_dropped.patch (git apply late_trigger_dropped.patch, then it): measured slower, dropped."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block.backends import cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402
from scripts.timeline_decode import run_case  # noqa: E402

runners = {(s, p): make_runner(ModelWeights.random(SIZES[s], seed=0), "cuda", p)
           for s, p in (("gpt2", "bf16"), ("gpt2", "fp32"))}
for rnd in range(3):
    for (s, p), r in runners.items():
        for bulk in (False, True):
            cuda_linear.GEMV_W_BULK = bulk
            print(f"round {rnd} {s} {p} b1 bulk {int(bulk)}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
for bulk in (False, True):
    cuda_linear.GEMV_W_BULK = bulk
    print(f"gpt2 fp32 b8 bulk {int(bulk)}: {rate(runners['gpt2', 'fp32'], 8, 128):,.0f} tok/s", flush=True)
del runners
for s, p in (("gpt2-medium", "bf16"), ("gpt2-xl", "fp32"), ("gpt2-xl", "bf16")):
    r = make_runner(ModelWeights.random(SIZES[s], seed=0), "cuda", p)
    for bulk in (False, True):
        cuda_linear.GEMV_W_BULK = bulk
        print(f"{s} {p} b1 bulk {int(bulk)}: {rate(r, 1, 64):,.0f} tok/s", flush=True)
    del r
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
for bulk in (False, True):
    cuda_linear.GEMV_W_BULK = bulk
    print(f"\n== timeline gpt2 bf16 b1 bulk {int(bulk)}")
    print("\n".join(run_case(r, 1, 64)), flush=True)
cuda_linear.GEMV_W_BULK = True

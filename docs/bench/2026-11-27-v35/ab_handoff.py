"""Version 35: the cluster kernel's global handoff, gpt2 bf16 b1 greedy tok/s in one process (three rounds of
decode_rate.rate, 128 steps) against the five-kernel chain. Visit 5: the grid counter (DC_COUNTER 1) against
readers polling the flagged partials themselves with a sleep of 50, 200 or 1000 ns between polls. Visit 6
(argument "visit6"): the counter with plain (weak) partial stores and loads (DC_WEAK 1, the new default), with
relaxed gpu-scope ones (visit 5's), each warp arriving on its own, and the first key not fetched early."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from decode_rate import rate  # noqa: E402
from gpt2block.backends import cuda_cluster, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

w = ModelWeights.random(SIZES["gpt2"], seed=1)
r = make_runner(w, "cuda", "bf16")
variants6 = [("counter weak", ()), ("counter relaxed", (("DC_WEAK", 0),)),
             ("warp arrive", (("DC_WARP_ARRIVE", 1),)), ("no kv prefetch", (("DC_KV_PREFETCH", 0),)),
             ("chain", None)]
variants = [("counter", (("DC_WEAK", 0),)), ("poll 50 ns", (("DC_COUNTER", 0), ("DC_WEAK", 0), ("DC_POLL_NS", 50))),
            ("poll 200 ns", (("DC_COUNTER", 0), ("DC_WEAK", 0), ("DC_POLL_NS", 200))),
            ("poll 1000 ns", (("DC_COUNTER", 0), ("DC_WEAK", 0), ("DC_POLL_NS", 1000))), ("chain", None)]
if sys.argv[1:] == ["visit6"]:
    variants = variants6
for rnd in range(3):
    for name, defines in variants:
        r.cluster_decode = defines is not None
        if defines is not None:
            cuda_cluster.DEFINES = defines
            r._cluster = None  # rebuilt (and its kernel fetched) with these defines
        print(f"round {rnd} {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
cuda_cluster.DEFINES = ()

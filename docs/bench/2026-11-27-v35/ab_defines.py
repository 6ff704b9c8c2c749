"""Version 35: the cluster kernel built with different #defines against each other and the five-kernel chain:
gpt2 bf16 b1 greedy tok/s in one process, three rounds of decode_rate.rate (128 steps after a 16-token prompt).
Arguments: variants as NAME or NAME:DEF=V,DEF=V (defines of decode_cluster.cu), and "chain"."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from decode_rate import rate  # noqa: E402
from gpt2block.backends import cuda_cluster, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

variants = []
for a in sys.argv[1:]:
    name, _, spec = a.partition(":")
    defines = None if name == "chain" else tuple(tuple(d.split("=")) for d in spec.split(",") if d)
    variants.append((name, defines))
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=1), "cuda", "bf16")
for rnd in range(3):
    for name, defines in variants:
        r.cluster_decode = defines is not None
        if defines is not None:
            cuda_cluster.DEFINES = defines
            r._cluster = None  # rebuilt (and its kernel fetched) with these defines
        print(f"round {rnd} {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
cuda_cluster.DEFINES = ()

"""Version 36: the cluster kernel's weight copies with an L2 evict-first hint or none (DC_W_EVICT_FIRST), against
how many bytes of the LM screen's int8 table stay in the L2 from step to step (LM_SCREEN_PIN_BYTES, evict-last):
gpt2 bf16 b1 greedy tok/s in one process, three rounds of decode_rate.rate (128 steps after a 16-token prompt),
then the greedy tokens of each variant against the first's. Variants: NAME:DC_DEFINES:SCREEN_DEFINES, each a
comma list of DEF=V."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from decode_rate import rate  # noqa: E402
from gpt2block.backends import cuda_cluster, cuda_linear, make_runner  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402


def defs(spec):
    """DEF=V,DEF=V as #define pairs; a V of digits alone as an int (cuda_linear reads some of them, e.g. the screen's
    LM_SCREEN_MIN_BLOCKS for its grid)."""
    pairs = (d.split("=") for d in spec.split(",") if d)
    return tuple((k, int(v) if v.isdigit() else v) for k, v in pairs)


variants = []
for a in sys.argv[1:]:
    name, dc, sc = (a.split(":") + ["", ""])[:3]
    variants.append((name, defs(dc), defs(sc)))
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=1), "cuda", "bf16")


def use(dc, sc):
    cuda_cluster.DEFINES, cuda_linear.SCREEN_DEFINES = dc, sc
    r._cluster = None  # rebuilt (and its kernel fetched) with these defines; new caches capture new graphs


for rnd in range(3):
    for name, dc, sc in variants:
        use(dc, sc)
        print(f"round {rnd} {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
prompt = np.random.default_rng(7).integers(0, 50257, 16)
toks = []
for name, dc, sc in variants:
    use(dc, sc)
    cache = r.new_cache(1)
    first = r.prefill(cache, 0, prompt).argmax()
    toks.append([int(t[0]) for t in r.greedy_steps(cache, np.array([first]), max_steps=128)])
print("greedy tokens equal to the first variant's:", [t == toks[0] for t in toks])
use((), ())

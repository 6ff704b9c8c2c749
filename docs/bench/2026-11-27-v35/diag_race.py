"""Version 35: the cluster step at length 1024 repeated (the same cache, position 1023 re-run 40 times a
variant) against the five-kernel chain's logits: how often it departs, and in which 96-column pieces of the
residual stream, with the dependents' early release on / off, a cluster barrier before exit, and plain launches."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "gpu"))
from gpt2block.backends import cuda_cluster, cuda_modules  # noqa: E402
from test_decode_cluster import _runner, _weights  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
w = _weights()
seq = np.random.default_rng(5).integers(0, 4096, n)


def step(r, cache):
    cache.pos[:] = n - 1
    logits = r.decode(cache, np.array([seq[-1]])).astype(np.float64)[0]
    return logits, r.x[0].get()


peer = _runner(w, cluster=False)
pc = peer.new_cache(1)
peer.prefill(pc, 0, seq[:-1])
ref_logits, ref_x = step(peer, pc)
for name, defines, programmatic, graphs in [("default", (), True, False), ("default graphs", (), True, True),
                                            ("no trigger", (("DC_TRIGGER", 0),), True, False),
                                            ("exit sync", (("DC_EXIT_SYNC", 1),), True, False),
                                            ("plain launch", (), False, False)]:
    cuda_cluster.DEFINES = defines
    r = _runner(w, graphs=graphs)
    r.programmatic = programmatic
    cache = r.new_cache(1)
    r.prefill(cache, 0, seq[:-1])
    bad, pieces, worst = 0, set(), 0.0
    for _ in range(40):
        logits, x = step(r, cache)
        e = np.abs(logits - ref_logits).max()
        if e > 1e-4:
            bad += 1
            dx = np.abs(x - ref_x).reshape(8, 96).max(axis=1)
            pieces |= {int(i) for i in np.nonzero(dx > 1e-4)[0]}
            worst = max(worst, e)
    print(f"{name}: {bad} of 40 steps depart (worst logits {worst:.3g}), 96-column pieces of x: {sorted(pieces)}",
          flush=True)
cuda_cluster.DEFINES = ()

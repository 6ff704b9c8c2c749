"""Version 35: where the cluster kernel's one step departs from the five-kernel chain's, by attention length
(the KV rows it writes for the new position at each layer, the residual stream after the layers, the logits)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "gpu"))
from test_decode_cluster import _decode_once, _runner, _weights  # noqa: E402

lengths = [int(a) for a in sys.argv[1:]] or [129, 200, 256, 257, 384, 512, 513, 1000, 1023, 1024]
w = _weights()
rng = np.random.default_rng(5)
seq_all = rng.integers(0, 4096, 1024)
for n in lengths:
    seq = seq_all[:n]
    out = {}
    for on in (True, False):
        r = _runner(w, cluster=on)
        cache = r.new_cache(1)
        if n > 1:
            r.prefill(cache, 0, seq[:-1])
        logits = r.decode(cache, np.array([seq[-1]])).astype(np.float64)[0]
        out[on] = (logits, r.x[0].get(), cache.kv[0, :, :, n - 1].get(), cache.kv[0, :, :, : n - 1].get())
    a, b = out[True], out[False]
    kv = np.abs(a[2] - b[2]).max(axis=-1)  # [layer, k/v]
    print(f"len {n}: logits {np.abs(a[0] - b[0]).max():.3g}, x {np.abs(a[1] - b[1]).max():.3g}, new k/v per layer "
          f"{np.array2string(kv, precision=3)}, older cache rows {np.abs(a[3] - b[3]).max():.3g}, "
          f"nan {np.isnan(a[0]).any()}", flush=True)

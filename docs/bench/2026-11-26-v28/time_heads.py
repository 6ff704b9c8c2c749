"""Version 28: the batch-1 LM head alone, plain launches back to back (CUDA events over 200 calls, median
of 5 such runs, us a call: kernel time plus the launch gap): ln_f + the full head with its argmax
(gemv_*_nt_ln_m1) against the screened head (lm_screen_j3 + lm_rescore_*), gpt2's shape, fresh data."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from gpt2block.backends import cuda_linear as L  # noqa: E402

rng = np.random.default_rng()
for d in (768, 1600):
    for wd in ("bf16", "fp32"):
        n = 50257
        x = cp.asarray(rng.standard_normal((1, d)).astype(np.float32) + 1)
        g = cp.asarray(rng.uniform(0.8, 1.2, d).astype(np.float32))
        b = cp.asarray((rng.standard_normal(d) * 0.1).astype(np.float32))
        w = cp.asarray((rng.standard_normal((n, d)) * 0.02).astype(np.float32))
        if wd == "bf16":
            w = L.to_bf16_bits(w)
        out = cp.empty((1, n), cp.float32)
        ids = cp.zeros(1, cp.int32)
        t = L.screen_table(w)
        ln = (g, b, 1e-5)
        fns = {"full": lambda: L.gemv_nt(x, w, out, ln=ln, argmax=(ids, None, None)),
               "screened": lambda: L.lm_head_screened(x, t, w, ln, (ids, None, None))}
        res = {}
        for name, fn in fns.items():
            for _ in range(20):
                fn()
            runs = []
            for _ in range(5):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                for _ in range(200):
                    fn()
                e1.record()
                e1.synchronize()
                runs.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / 200)
            res[name] = float(np.median(runs))
        ub, lbp, _ = L._screen_ws[(cp.cuda.Device().id, cp.cuda.get_current_stream().ptr, n, d, L._screen_grids(n)[0])]
        print(f"d={d} {wd}: full {res['full']:.2f} us, screened {res['screened']:.2f} us "
              f"(stages {L._screen_stages(n, d, L._screen_grids(n)[0])[:2]}, "
              f"{int((ub >= lbp.max()).sum())} candidates)", flush=True)

"""Version 33: the screened LM head in one kernel (each block forms its own local candidates exactly and the
blocks meet in the argmax finish) against version 32's two (lm_screen, then lm_rescore over the global
candidates). The old kernels are docs/bench/2026-11-27-v33/lm_screen_v32.cu, copied into kernels/ for this run
as lm_screen_v32.cu and launched as version 32's cuda_linear.lm_head_screened did. gpt2 b1 tok/s
(decode_rate.rate, 128 steps), one process, three rounds, bf16 and fp32; first the greedy tokens of both
over 64 steps (equal expected), and how many exact rows each formed on one step."""
import shutil
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
shutil.copy(Path(__file__).with_name("lm_screen_v32.cu"), ROOT / "kernels" / "lm_screen_v32.cu")
from gpt2block.backends import cuda_linear as L, make_runner  # noqa: E402
from gpt2block.backends.cuda_modules import kernel, launch  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402
from scripts.decode_rate import rate  # noqa: E402

new_head = L.lm_head_screened
_ws2 = {}


def old_head(x, table, w, ln, argmax, *, stream=None):
    """Version 32's lm_head_screened: the screen, then the rescore on one block a SM."""
    n, k = w.shape
    g, b, eps = ln
    bf16 = w.dtype != np.float32
    g1, g2 = L._screen_grid(n, k), min(L.sm_count(), n)
    key = (n, k, g1, stream.ptr if stream is not None else cp.cuda.get_current_stream().ptr)
    if key not in _ws2:
        _ws2[key] = (cp.empty(n, cp.float32), cp.empty(g1, cp.float32), cp.empty(k, cp.float32))
    ub, lb_part, h = _ws2[key]
    wpr, _ = L.gemv_nt_plan(n, k, L._cpt(w), 1, bf16, True, defines=L._gemv_nt_defines(n, k, 1, bf16))
    defines = L._screen_defines(n, k, bf16)
    launch(kernel("lm_screen_v32", "lm_screen", defines), (g1, 1, 1), (256, 1, 1),
           (x, table.q, table.rowp, g, b, np.float32(eps), np.int32(n), np.int32(k), ub, lb_part, h),
           3 * k * 4 + 2 * k, stream, programmatic=True)
    args = (w, h, ub, lb_part, np.int32(g1), np.int32(n), np.int32(k), np.int32(wpr))
    args += L._gemv_argmax_args(argmax, 1, g2, stream)
    launch(kernel("lm_screen_v32", f"lm_rescore_{'bf16' if bf16 else 'f32'}", defines), (g2, 1, 1),
           (256, 1, 1), args, k * 4, stream, programmatic=True)


def use(name):
    L.lm_head_screened = old_head if name == "two kernels (v32)" else new_head


size = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
NAMES = ["two kernels (v32)", "one kernel, local candidates"]  # (its threshold: the running largest lb)
rng = np.random.default_rng(3)
for prec in ("bf16", "fp32"):
    r = make_runner(ModelWeights.random(SIZES[size], seed=0), "cuda", prec)
    r._screen_prepare()  # the table; then the old kernels built and their workspaces made before any capture
    with r.stream:
        old_head(r.x[:1], r._screen, r.wte_dec, (r.ln_f_g, r.ln_f_b, 1e-5), (cp.zeros(1, cp.int32), None, None))
    r.stream.synchronize()
    prompt = rng.integers(0, 50257, 16)
    toks = {}
    for name in NAMES:
        use(name)
        cache = r.new_cache(1)
        t0 = np.array([int(np.argmax(r.prefill(cache, 0, prompt)))])
        toks[name] = [int(t[0]) for t in r.greedy_steps(cache, t0, max_steps=64)]
    print(f"{size} {prec}: greedy tokens over 64 steps equal: {toks[NAMES[0]] == toks[NAMES[1]]}", flush=True)
    for rnd in range(3):
        for name in NAMES:
            use(name)
            print(f"round {rnd} {size} {prec} b1 {name}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
    use(NAMES[1])
    del r
(ROOT / "kernels" / "lm_screen_v32.cu").unlink()

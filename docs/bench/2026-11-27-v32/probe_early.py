"""Version 32: chained greedy steps in one graph whose layer 0 QKV loads its weights under the step before.
probe_chain.py (version 31) found K chained steps a graph no faster with the embedding plain or with it
letting the kernels after it launch only after its wait: either way layer 0's QKV could launch, and load
its weights, only after the step before had finished. Here ("early") every step after a graph's first has
its embedding launched programmatically and letting the next kernel launch at once (embedding_f32 as it
is: trigger, wait, then the row), and its layer 0 QKV built with GEMV_LATE_TRIGGER (trigger after its own
wait): so that QKV may launch, and load its weights, while the step before is still in its LM head, and
attention_decode_f32 (which reads lengths and older keys before its wait) still launches only once the
step before has finished. Per mode and K steps a graph: us a step over 96 steps with graphs replayed back
to back (GPU time; no host wait), three rounds; and first, 8 steps from one start in each mode against
8 plain steps: the KV cache's rows and the step's ints bit for bit. GEMV_LATE_TRIGGER is in
late_trigger_dropped.patch (beside this script; apply it with git apply first): measured no faster, dropped."""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cupy as cp  # noqa: E402

from gpt2block.backends import cuda_linear, cuda_modules, cuda_ops, make_runner  # noqa: E402
from gpt2block.backends.cuda_modules import kernel, launch  # noqa: E402
from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import ModelWeights  # noqa: E402

STEPS = 96
CONFIGS = [("plain", 1), ("plain", 4), ("early", 4), ("early", 8)]
state = {"early": False, "late_qkv": False}
orig_embedding, orig_gemv = cuda_ops.embedding, cuda_linear.gemv_nt


def embedding(ids, pos, wte, wpe, x):
    if not state["early"]:
        return orig_embedding(ids, pos, wte, wpe, x)
    t, d = x.shape
    launch(kernel("embedding", "embedding_f32"), (t,), (128,), (ids, pos, wte, wpe, x, cp.int32(d)), programmatic=True)
    state["late_qkv"] = True


def gemv_nt(*a, **kw):
    if not (state["late_qkv"] and kw.get("kv") is not None):
        return orig_gemv(*a, **kw)
    state["late_qkv"] = False
    saved = cuda_linear.NT_DEFINES
    cuda_linear.NT_DEFINES = saved + (("GEMV_LATE_TRIGGER", 1),)
    try:
        orig_gemv(*a, **kw)
    finally:
        cuda_linear.NT_DEFINES = saved


cuda_ops.embedding, cuda_linear.gemv_nt = embedding, gemv_nt

for prec in sys.argv[1:] or ("bf16", "fp32"):
    r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", prec)
    cache = r.new_cache(1)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 50257, 16)

    def start():
        cache.reset()
        tok = r.prefill(cache, 0, prompt).argmax(-1, keepdims=True)
        r.decode_greedy(cache, tok)  # uploads the step's ints; the chained steps advance them on the device
        r.stream.synchronize()

    start()
    for _ in r.greedy_steps(cache, r.decode_greedy(cache, np.array([1])), max_steps=4):  # screen, kernels built
        pass
    ring = cuda_ops.MappedInts(1)
    graphs = {}
    for mode, k in CONFIGS:
        start()
        with r.stream:
            r.stream.begin_capture()
            try:
                with cuda_modules.programmatic_launches(r.programmatic):
                    for i in range(k):
                        state["early"] = mode == "early" and i > 0
                        r._decode_kernels(cache, cache.step, host_out=ring, logits=False)
                        state["early"] = state["late_qkv"] = False
            finally:
                graphs[mode, k] = r.stream.end_capture()

    def run(mode, k, steps):
        with r.stream:
            for _ in range(steps // k):
                graphs[mode, k].launch(r.stream)
        r.stream.synchronize()

    want = None
    for mode, k in CONFIGS:  # 8 steps from one start, bit for bit
        start()
        run(mode, k, 8)
        n = int(cp.asnumpy(cache.step)[2, 0]) + 1
        got = (cp.asnumpy(cache.step).copy(), cp.asnumpy(cache.kv[:, :, :, :n]).view(np.uint32).copy())
        if want is None:
            want = got
        same = np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        print(f"gpt2 {prec} b1 {mode} K={k}: 8 steps, step ints {got[0][:, 0].tolist()}, KV rows 0..{n - 1} "
              f"{'bit-equal to plain K=1' if same else 'DIFFER from plain K=1'}", flush=True)
    for rnd in range(3):
        for mode, k in CONFIGS:
            start()
            t0 = time.perf_counter()
            run(mode, k, STEPS)
            dt = (time.perf_counter() - t0) / STEPS
            print(f"round {rnd} gpt2 {prec} b1, {k} steps a graph, {mode}: {dt * 1e6:6.1f} us a step, "
                  f"{1 / dt:,.0f} tok/s", flush=True)
    from torch.profiler import ProfilerActivity, profile

    from scripts.timeline_decode import kernel_records, split_steps, summarize
    for mode, k in (("plain", 1), ("early", 4)):
        start()
        run(mode, k, 16)
        r.stream.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(mode, k, 64)
            r.stream.synchronize()
        steps = split_steps(kernel_records(prof), "embedding")
        ends = [max(a + d for a, d, _ in st) for st in steps]
        for pos in range(k):  # the whole steps' start to start, and the last kernel's end to end, by place
            per = [steps[j + 1][0][0] - steps[j][0][0] for j in range(pos, len(steps) - 1, k)]
            e2e = [ends[j] - ends[j - 1] for j in range(max(pos, 1), len(steps), k)]
            print(f"gpt2 {prec} b1 {mode} K={k} step {pos} of each graph: start to next start "
                  f"{np.median(per):.1f} us, end after the end before {np.median(e2e):.1f} us", flush=True)
        for pos in range(k):
            sub = steps[pos::k]
            lines = summarize(sub)
            print(f"== timeline gpt2 {prec} b1 {mode} K={k}, step {pos} of each graph")
            print("\n".join(lines[:8] + lines[-3:]), flush=True)
    del r

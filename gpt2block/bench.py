"""The benchmark: gpt2block and its peers on the same GPU, in one run.

Every figure is the median of at least ``reps`` timed runs after warm-up, timed with CUDA
events (whole generations: wall clock after synchronizing; the LayerNorm kernel: per call in
bursts of back-to-back calls), on fresh random data, after checking the output. The ceilings (device copy bandwidth, cuBLAS fp32 and TF32 GEMM rates)
are measured in the same run. Results: a JSON file, a Markdown table and a PNG plot.

Peers: the challenge's torch reference block (fp32, and TF32 + SDPA), torch layer_norm,
and transformers' GPT2LMHeadModel (sdpa; static cache + torch.compile).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Row:
    what: str
    ours: float | None = None  # ms (or tok/s for decode rows: see unit)
    peer: float | None = None
    peer_name: str = ""
    unit: str = "ms"
    target: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self):
        if self.ours is None or self.peer is None:
            return None
        return self.ours / self.peer

    def verdict(self):
        """'met' / 'MISSED' against the target, where the target is a ratio or a floor."""
        if not self.target or self.ours is None:
            return ""
        kind, value = self.target.split(" ", 1)
        v = float(value)
        if kind == "ratio<=":
            ok = self.ratio is not None and self.ratio <= v
        elif kind == "ratio>=":
            ok = self.ratio is not None and self.ratio >= v
        elif kind == "<=":
            ok = self.ours <= v
        elif kind == ">=":
            ok = self.ours >= v
        elif kind == "peer_x>=":
            ok = self.peer is not None and self.ours >= v * self.peer
        else:
            raise ValueError(self.target)
        return "met" if ok else "MISSED"


def _events_median(fn, reps, warmup=3):
    import cupy as cp

    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def _torch_median(torch, fn, reps, warmup=3, busy_cycles=0):
    """Median ms of fn between CUDA events. busy_cycles > 0: each timed call is queued behind
    a spin kernel of that many cycles (torch.cuda._sleep), so the start event and the call's
    kernels already wait when the GPU reaches them and the host's launch cost is not counted."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if busy_cycles:
            torch.cuda._sleep(busy_cycles)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def _device_median(torch, fn, reps):
    """Device time of fn (ms, median), a ~1 ms spin ahead of each call: for single kernels."""
    return _torch_median(torch, fn, reps, busy_cycles=2_000_000)


def _burst_median(torch, fn, reps, burst=10, warmup=3):
    """Median ms per call of fn(i) run ``burst`` times back to back (i counting on from call to
    call) between two CUDA events, all queued behind a ~1 ms spin kernel: the kernels' own time
    in a stream of launches, each one's launch gap included once but not the wait for the first.
    (A single ~15 us kernel timed alone between events also carries the gap from the spin to its
    start: about 2 us, against Nsight Compute's 13.9-14.3 us for the LayerNorm, version 9.)"""
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times, k = [], 0
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        a.record()
        for _ in range(burst):
            fn(k)
            k += 1
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / burst)
    return float(np.median(times))


def _wall_median(sync, fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


# -- ceilings ------------------------------------------------------------------

def measure_ceilings(torch, reps):
    """Device copy bandwidth (bytes read + written) and cuBLAS fp32 / TF32 GEMM rates."""
    n = 1 << 28  # 1 GiB of float32
    a = torch.empty(n, device="cuda").uniform_()
    b = torch.empty_like(a)
    ms = _torch_median(torch, lambda: b.copy_(a), reps)
    copy_tbs = 2 * 4 * n / ms / 1e9
    del a, b
    m = 8192
    x = torch.randn(m, m, device="cuda")
    y = torch.randn(m, m, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32 = 2 * m ** 3 / _torch_median(torch, lambda: x @ y, max(5, reps // 4)) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = True
    tf32 = 2 * m ** 3 / _torch_median(torch, lambda: x @ y, max(5, reps // 4)) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"copy_TBps": copy_tbs, "sgemm_fp32_TFLOPs": fp32, "gemm_tf32_TFLOPs": tf32}


def block_flops(s, d=768):
    """FLOPs of one non-causal block: 24 s d^2 (GEMMs) + 4 s^2 d (attention)."""
    return 24 * s * d * d + 4 * s * s * d


# -- one block: solve() against the challenge's torch reference -------------------

def bench_solve(torch, seq_lens, reps):
    import gpt2block
    from gpt2block.layout import block_layout

    from_tests = _torch_block_fns(torch)
    out = []
    for s in seq_lens:
        gen = torch.Generator(device="cuda").manual_seed(s)
        x = torch.rand(s, 768, device="cuda", generator=gen) * 2 - 1
        w = _challenge_weights(torch, block_layout(768), gen)
        o = torch.full_like(x, float("nan"))
        ref64 = from_tests["ref"](x.double(), w.double())
        res = {"seq_len": s, "gflop": block_flops(s) / 1e9}
        for prec in ("fp32", "tf32"):
            gpt2block.solve(x, o, w, s, precision=prec)
            torch.cuda.synchronize()
            res[f"ours_{prec}_err"] = (o.double() - ref64).abs().max().item()
            res[f"ours_{prec}_ms"] = _torch_median(torch, lambda p=prec: gpt2block.solve(x, o, w, s, precision=p),
                                                   reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        r32 = from_tests["ref"](x, w)
        res["torch_fp32_err"] = (r32.double() - ref64).abs().max().item()
        res["torch_fp32_ms"] = _torch_median(torch, lambda: from_tests["ref"](x, w), reps)
        torch.backends.cuda.matmul.allow_tf32 = True
        rt = from_tests["sdpa"](x, w)
        res["torch_tf32_err"] = (rt.double() - ref64).abs().max().item()
        res["torch_tf32_ms"] = _torch_median(torch, lambda: from_tests["sdpa"](x, w), reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        out.append(res)
    return out


def _challenge_weights(torch, lay, gen):
    flat = torch.zeros(lay.numel, device="cuda")
    for slot in lay.slots:
        v = flat[slot.offset:slot.end]
        if slot.name.endswith("_g"):
            v.uniform_(0.8, 1.2, generator=gen)
        else:
            v.normal_(0.0, 0.02, generator=gen)
    return flat


def _torch_block_fns(torch):
    """The challenge's reference block (explicit softmax attention) and its SDPA variant."""
    import torch.nn.functional as F

    from gpt2block.layout import block_layout

    def block(x, flat, sdpa=False):
        s, d = x.shape
        w = block_layout(d).views(flat)
        h = F.layer_norm(x, (d,), w["ln1_g"], w["ln1_b"], 1e-5)
        qkv = h @ w["w_qkv"] + w["b_qkv"]
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(s, d // 64, 64).transpose(0, 1) for i in range(3))
        if sdpa:
            a = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
        else:
            a = torch.softmax((q @ k.transpose(1, 2)) / 8.0, dim=-1) @ v
        x1 = x + a.transpose(0, 1).reshape(s, d) @ w["w_attn"] + w["b_attn"]
        f = F.gelu(F.layer_norm(x1, (d,), w["ln2_g"], w["ln2_b"], 1e-5) @ w["w_fc"] + w["b_fc"], approximate="tanh")
        return x1 + f @ w["w_proj"] + w["b_proj"]

    return {"ref": block, "sdpa": lambda x, w: block(x, w, sdpa=True)}


# -- LayerNorm -----------------------------------------------------------------

def layernorm_sets(torch, rows, d, sets):
    """The LayerNorm benchmark's data: ``sets`` fresh inputs x [rows, d] (torch.randn) with NaN-filled
    outputs y, and g, b [d]; as torch tensors and as CuPy views of them:
    (xs, ys, g, b, xs_cupy, ys_cupy, g_cupy, b_cupy)."""
    import cupy as cp

    xs = [torch.randn(rows, d, device="cuda") for _ in range(sets)]
    ys = [torch.full_like(xs[0], float("nan")) for _ in range(sets)]
    g = torch.rand(d, device="cuda") + 0.5
    b = torch.randn(d, device="cuda")
    return xs, ys, g, b, [cp.asarray(t) for t in xs], [cp.asarray(t) for t in ys], cp.asarray(g), cp.asarray(b)


def bench_layernorm(torch, reps, rows=8192, d=768, sets=4):
    """LayerNorm of rows x d, ours against torch's layer_norm and a same-size torch copy. The
    row's figure is the time per call in bursts of back-to-back calls (``_burst_median``); each
    call takes the next of ``sets`` input / output pairs (sets x 2 x 25 MB, several times the
    50 MB L2), so no call finds its input in L2 from the call before. Our calls are launched as the
    engine launches its kernels, with programmatic dependent launch (each still waits for the call
    before it to finish before it reads; layernorm.cu), and also plainly (``ours_plain_*``). Also kept:
    one call timed between CUDA events behind a spin kernel (version 1-8's figure), and as a Python
    caller sees it."""
    from gpt2block.backends.cuda import ops as cuda_ops
    from gpt2block.backends.cuda.modules import programmatic_launches

    xs, ys, g, b, xc, yc, gc, bc = layernorm_sets(torch, rows, d, sets)
    err = 0.0
    for i in range(sets):
        cuda_ops.layernorm(xc[i], gc, bc, yc[i], 1e-5)
        ref = torch.nn.functional.layer_norm(xs[i].double(), (d,), g.double(), b.double(), 1e-5)
        err = max(err, (ys[i].double() - ref).abs().max().item())
    ours_fn = lambda i=0: cuda_ops.layernorm(xc[i % sets], gc, bc, yc[i % sets], 1e-5)  # noqa: E731
    peer_fn = lambda i=0: torch.nn.functional.layer_norm(xs[i % sets], (d,), g, b, 1e-5)  # noqa: E731
    copy_fn = lambda i=0: ys[i % sets].copy_(xs[i % sets])  # noqa: E731
    with programmatic_launches():
        ours = _burst_median(torch, ours_fn, reps)
    ours_plain, peer, copy = (_burst_median(torch, f, reps) for f in (ours_fn, peer_fn, copy_fn))
    # between events behind a spin (the kernel plus the gap before it), and a call as Python sees it
    ours_ev, peer_ev = _device_median(torch, ours_fn, reps), _device_median(torch, peer_fn, reps)
    ours_call, peer_call = _torch_median(torch, ours_fn, reps), _torch_median(torch, peer_fn, reps)
    nbytes = 2 * rows * d * 4
    return {"ours_ms": ours, "torch_ms": peer, "copy_same_size_ms": copy, "ours_plain_ms": ours_plain,
            "ours_TBps": nbytes / ours / 1e9, "torch_TBps": nbytes / peer / 1e9,
            "ours_plain_TBps": nbytes / ours_plain / 1e9,
            "copy_same_size_TBps": nbytes / copy / 1e9,
            "ours_event_ms": ours_ev, "torch_event_ms": peer_ev, "ours_event_TBps": nbytes / ours_ev / 1e9,
            "ours_call_ms": ours_call, "torch_call_ms": peer_call, "max_err": err}


# -- the whole model -------------------------------------------------------------

def _hf_model(torch, size, attn="sdpa"):
    from transformers import GPT2Config as HFConfig
    from transformers import GPT2LMHeadModel

    from .config import SIZES

    c = SIZES[size]
    cfg = HFConfig(n_layer=c.n_layer, n_embd=c.n_embd, n_head=c.n_head, n_positions=1024, vocab_size=50257)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval().cuda()
    return model


def _weights_from_hf(model):
    """Our packed weights of a live transformers model, through the real checkpoint path
    (save_pretrained, then checkpoint.load_weights: the arrays are copies, not file maps)."""
    import tempfile

    from .checkpoint import load_weights

    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        return load_weights(d)


def bench_prefill(torch, reps, size="gpt2", t=1024):
    from .backends import make_runner

    model = _hf_model(torch, size)
    runner = make_runner(_weights_from_hf(model), "cuda", "fp32")
    ids = np.random.default_rng().integers(0, 50257, t)
    tid = torch.tensor(ids, device="cuda")[None]
    with torch.no_grad():
        ref = model(tid).logits[0].float().cpu().numpy()
    got = runner.forward(ids)
    err = float(np.abs(got - ref).max())
    cache = runner.new_cache(1)

    def ours_last():
        cache.reset()
        runner.prefill(cache, 0, ids)

    res = {"tokens": t, "max_logit_diff_vs_hf": err}
    res["ours_last_logits_ms"] = _torch_median(torch, ours_last, reps)
    # all logits as transformers gives them, on the GPU; and copied to a NumPy array (forward())
    res["ours_all_logits_ms"] = _torch_median(torch, lambda: runner.forward_device(ids), reps)
    res["ours_all_logits_to_host_ms"] = _torch_median(torch, lambda: runner.forward(ids), reps)
    with torch.no_grad():
        res["hf_sdpa_ms"] = _torch_median(torch, lambda: model(tid), reps)
        res["hf_sdpa_last_logits_ms"] = _torch_median(torch, lambda: model(tid, logits_to_keep=1), reps)
    return res


def _ours_decode_rate(torch, runner, batch, steps, reps, prompt_len=16):
    """Tokens/s of runner.greedy_steps (as generate() runs greedy decode) after random prompts of prompt_len
    tokens: _greedy_stream_rate. (Until version 13 the prefill was timed in a separate loop and subtracted,
    which let its noise swing the batch-8 rows by a fifth.)"""
    rng = np.random.default_rng()
    return _greedy_stream_rate(torch, runner, rng.integers(0, 50257, (batch, prompt_len)), steps, reps)


def _greedy_stream_rate(torch, runner, prompts, steps, reps):
    """Tokens/s of runner.greedy_steps after ``prompts`` (one row each): the loop alone timed by the wall
    clock, the prefill before it run and synchronized outside the timing (median of reps after 2 warm-up runs)."""
    batch = len(prompts)
    cache = runner.new_cache(batch)
    times = []
    for i in range(reps + 2):
        cache.reset()
        tok = np.stack([runner.prefill(cache, r, prompts[r]) for r in range(batch)]).argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in runner.greedy_steps(cache, tok, max_steps=steps):
            pass
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return batch * steps / float(np.median(times))


def _hf_decode_rate(torch, model, batch, steps, reps, compiled, prompt_len=16):
    ids = torch.randint(0, 50257, (batch, prompt_len), device="cuda")
    kw = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    if compiled:
        kw["cache_implementation"] = "static"

    def gen(n=steps):
        if compiled:  # a new step for torch.compile's CUDA graphs: earlier outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            model.generate(ids, **{**kw, "max_new_tokens": n, "min_new_tokens": n})

    ms = _wall_median(torch.cuda.synchronize, gen, reps)
    one = _wall_median(torch.cuda.synchronize, lambda: gen(1), reps)
    return batch * (steps - 1) / ((ms - one) / 1e3)


def bench_decode(torch, reps, size="gpt2", batches=(1, 8), steps=128, compile_peer=True):
    from .backends import make_runner

    model = _hf_model(torch, size)
    w = _weights_from_hf(model)
    res = {"size": size, "steps": steps}
    for prec in ("fp32", "bf16"):
        runner = make_runner(w, "cuda", prec)
        for b in batches:
            res[f"ours_{prec}_b{b}_tok_s"] = _ours_decode_rate(torch, runner, b, steps, max(3, reps // 4))
        del runner
    for b in batches:
        res[f"hf_sdpa_b{b}_tok_s"] = _hf_decode_rate(torch, model, b, steps, max(3, reps // 4), False)
    if compile_peer:
        # transformers' recipe (static cache, forward compiled with CUDA graphs); where this torch /
        # transformers pair refuses it, the same without CUDA graphs, and the report says which ran
        eager_forward = model.forward
        for mode in ("reduce-overhead", "default"):
            torch._dynamo.reset()
            model.forward = torch.compile(eager_forward, mode=mode, fullgraph=True)
            try:
                for b in batches:
                    res[f"hf_compiled_b{b}_tok_s"] = _hf_decode_rate(torch, model, b, steps, max(3, reps // 4),
                                                                     True)
                res["hf_compiled_mode"] = mode
                break
            except Exception as e:  # noqa: BLE001 - a peer's failure is reported, not fatal
                res[f"hf_compiled_error_{mode}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        model.forward = eager_forward
    return res


# -- generate(): the Python API, as a user runs it --------------------------------

GENERATE_BATCHES = (1, 8, 64, 128, 256)
GENERATE_PROMPT_LEN = 128  # tokens per prompt
GENERATE_NEW = 128  # new tokens per prompt
GENERATE_MODES = {  # name -> gpt2block.Model.generate's sampling arguments
    "greedy": dict(temperature=0.0),
    "t=1 top-k 50": dict(temperature=1.0, top_k=50),
    "t=0.8 top-p 0.95": dict(temperature=0.8, top_k=0, top_p=0.95),
    "repetition 1.2": dict(temperature=1.0, top_k=50, repetition_penalty=1.2),
}
GENERATE_PEER_MODES = ("greedy", "t=1 top-k 50")  # transformers' generate runs these (its sampled: the CLI default)
GENERATE_REPS = 3  # timed generate() calls per batch and mode (after one warm-up): the section's time on an H200
GENERATE_PEER_BUDGET_S = 60.0  # transformers' runs stop where the next one would pass this
# The targets (fp32 weights): sampled / greedy decode rate per batch, and wall tok/s at t=1 top-k 50.
GENERATE_RATIO_TARGETS = {1: 0.85, 8: 0.95, 64: 0.95}
GENERATE_WALL_TARGETS = {1: 4000, 8: 20000, 64: 80000, 128: 90000}
GENERATE_PEER_X = 8  # t=1 top-k 50 wall tok/s against transformers' sampled, every batch
GENERATE_PREFILL_TARGET_MS = (64, 20.0)  # prefill of 64 prompts within this many ms
GENERATE_KERNEL_RATIO = 0.95  # b1 greedy decode through generate() / the runner's greedy stream


def byte_tokenizer(vocab_size: int):
    """A byte-level tokenizer without merges for a random checkpoint (tokenizers.Tokenizer): id b (< 256) is
    byte b, ids 256 .. vocab_size - 2 are filler "<|unusedN|>" entries no text encodes to, the last id is
    <|endoftext|>. A text of n ASCII letters encodes to exactly their n byte ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from .tokenizer import byte_to_unicode

    if vocab_size < 258:
        raise ValueError(f"a byte tokenizer needs at least 258 ids; got {vocab_size}")
    b2u = byte_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab.update({f"<|unused{i}|>": i for i in range(256, vocab_size - 1)})
    vocab["<|endoftext|>"] = vocab_size - 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def generate_prompts(batch: int, length: int = GENERATE_PROMPT_LEN, seed: int = 0) -> list[list[int]]:
    """batch lists of ``length`` random ids of ASCII letters (byte_tokenizer's ids), from a fixed seed."""
    letters = np.array([ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.choice(letters, length)] for _ in range(batch)]


def bench_generate(torch, quick=False, batches=GENERATE_BATCHES, log=print):
    """gpt2block.load(...).generate(...) on a random gpt2 checkpoint in Hugging Face's format (written by
    save_pretrained, with byte_tokenizer), fp32: B prompts of GENERATE_PROMPT_LEN random letters (as many
    tokens), GENERATE_NEW new tokens each, in each of GENERATE_MODES; per (B, mode) the median of
    GENERATE_REPS timed calls after a warm-up (a call's seed is its index) of the result's timing: wall
    tok/s (new tokens / the call's wall time, prefill included), decode tok/s (the decode steps alone),
    prefill ms (every row's prefill and first token). transformers' generate on the same model and ids
    (sdpa, fp32, min_new_tokens = max_new_tokens, eos ignored), greedy and t=1 top-k 50, one timed call per
    batch after a warm-up, until the next call would pass GENERATE_PEER_BUDGET_S (the rest are skipped and
    say so). Also the runner's greedy stream at batch 1 (the kernel benchmark's loop, bench._ours_decode_rate,
    on the same prompt length) for the b1 ratio."""
    import tempfile

    from . import api

    model_hf = _hf_model(torch, "gpt2")
    V = model_hf.config.vocab_size
    res = {"prompt_len": GENERATE_PROMPT_LEN, "new_tokens": GENERATE_NEW, "reps": GENERATE_REPS, "runs": []}
    with tempfile.TemporaryDirectory() as d:
        model_hf.save_pretrained(d)
        byte_tokenizer(V).save(str(Path(d) / "tokenizer.json"))
        model = api.load(d, backend="cuda", precision="fp32", log=lambda m: log(f"generate: {m}"))
    tok = model.tokenizer
    new = 32 if quick else GENERATE_NEW
    res["new_tokens"] = new
    for b in batches:
        ids = generate_prompts(b)
        texts = [tok.decode(x) for x in ids]
        for t, x in zip(texts, ids):
            if tok.encode(t) != x:
                raise RuntimeError("bench_generate: a prompt does not encode back to its ids")
        for mode, kw in GENERATE_MODES.items():
            runs = []
            for rep in range(GENERATE_REPS + 1):
                out = model.generate(texts, new, seed=rep, **kw)
                t = out[0].timing
                if rep:
                    runs.append((t.new_tokens / t.wall_s, t.decode_tokens_per_s, t.prefill_ms, t.new_tokens))
            wall, dec, pre, n = (float(np.median(v)) for v in zip(*runs))
            row = {"batch": b, "mode": mode, "wall_tok_s": wall, "decode_tok_s": dec, "prefill_ms": pre,
                   "new_tokens": int(n), "asked_tokens": b * new}
            res["runs"].append(row)
            log(f"generate b{b} {mode}: wall {wall:,.0f} tok/s, decode {dec:,.0f} tok/s, prefill {pre:.1f} ms")
    runner_ids = np.array(generate_prompts(1)[0])
    res["runner_greedy_b1_tok_s"] = _greedy_stream_rate(torch, model.runner, [runner_ids], new, reps=5)
    # transformers' generate, bounded in time
    spent, peer = 0.0, {}
    model_hf.generation_config.pad_token_id = V - 1
    for mode in GENERATE_PEER_MODES:
        sample = mode != "greedy"
        kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=sample, pad_token_id=V - 1)
        if sample:
            kw.update(temperature=1.0, top_k=50, top_p=1.0)
        with torch.no_grad():
            warm = torch.tensor(generate_prompts(1), device="cuda")
            model_hf.generate(warm, attention_mask=torch.ones_like(warm), **kw)
        rate_per_row = None
        for b in batches:
            key = f"{mode}|{b}"
            if rate_per_row is not None and spent + b * new / (rate_per_row * min(b, 64)) > GENERATE_PEER_BUDGET_S:
                peer[key] = {"skipped": f"skipped: the run would pass the section's {GENERATE_PEER_BUDGET_S:.0f} s "
                                        "for transformers"}
                continue
            x = torch.tensor(generate_prompts(b), device="cuda")
            torch.manual_seed(0)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                y = model_hf.generate(x, attention_mask=torch.ones_like(x), **kw)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            spent += dt
            made = (y.shape[1] - x.shape[1]) * b
            peer[key] = {"wall_tok_s": made / dt, "new_tokens": int(made), "s": dt}
            rate_per_row = made / dt / min(b, 64)  # per row, as if batch rows up to 64 ran side by side
            log(f"transformers b{b} {mode}: {made / dt:,.0f} tok/s ({dt:.1f} s)")
    res["peer"] = peer
    del model, model_hf
    return res


def generate_rows(g) -> list:
    """The generate section's rows: the issue's targets against what the run measured."""
    rows = []
    runs = {(x["batch"], x["mode"]): x for x in g["runs"]}
    peer = g.get("peer", {})
    batches = sorted({x["batch"] for x in g["runs"]})

    def peer_of(mode, b):
        p = peer.get(f"{mode}|{b}", {})
        return p.get("wall_tok_s"), p.get("skipped", "")

    for b in batches:
        k = runs.get((b, "t=1 top-k 50"))
        if k is None:
            continue
        hf, skipped = peer_of("t=1 top-k 50", b)
        note = f"decode {k['decode_tok_s']:,.0f} tok/s, prefill {k['prefill_ms']:.1f} ms"
        if k["new_tokens"] < k["asked_tokens"]:
            note += f"; {k['new_tokens']} of {k['asked_tokens']} tokens (rows that drew <|endoftext|> stopped)"
        if b in GENERATE_WALL_TARGETS:
            rows.append(Row(f"generate() b{b}, t=1 top-k 50, wall", k["wall_tok_s"], hf,
                            "transformers generate, sampled", "tok/s", f">= {GENERATE_WALL_TARGETS[b]}",
                            note + (f"; transformers {skipped}" if skipped else "")))
        rows.append(Row(f"generate() b{b}, t=1 top-k 50, wall, against transformers", k["wall_tok_s"], hf,
                        "transformers generate, sampled", "tok/s", f"peer_x>= {GENERATE_PEER_X}" if hf else "",
                        skipped or note))
    for b in batches:
        g0 = runs.get((b, "greedy"))
        if g0 is None:
            continue
        hf, skipped = peer_of("greedy", b)
        rows.append(Row(f"generate() b{b}, greedy, wall", g0["wall_tok_s"], hf, "transformers generate, greedy",
                        "tok/s", "", skipped or f"decode {g0['decode_tok_s']:,.0f} tok/s, prefill "
                                               f"{g0['prefill_ms']:.1f} ms"))
        for mode in GENERATE_MODES:
            if mode == "greedy" or (b, mode) not in runs:
                continue
            target = GENERATE_RATIO_TARGETS.get(b)
            rows.append(Row(f"generate() b{b}, {mode}: decode rate / greedy's", runs[(b, mode)]["decode_tok_s"],
                            g0["decode_tok_s"], "gpt2block greedy decode, same B", "tok/s",
                            f"ratio>= {target}" if target else ""))
    pb, limit = GENERATE_PREFILL_TARGET_MS
    if (pb, "greedy") in runs:
        rows.append(Row(f"generate() prefill of {pb} prompts x {g['prompt_len']} tokens", runs[(pb, "greedy")]["prefill_ms"],
                        None, "", "ms", f"<= {limit}", "the greedy calls' prefill (and first token)"))
    if (1, "greedy") in runs and g.get("runner_greedy_b1_tok_s"):
        rows.append(Row("generate() b1 greedy decode / the runner's greedy stream", runs[(1, "greedy")]["decode_tok_s"],
                        g["runner_greedy_b1_tok_s"], f"runner.greedy_steps b1 after a {g['prompt_len']}-token prompt",
                        "tok/s", f"ratio>= {GENERATE_KERNEL_RATIO}"))
    return rows


def generate_table(g) -> list:
    """Markdown lines: every (B, mode) of the generate section with transformers' figures."""
    peer = g.get("peer", {})
    lines = ["", f"generate(): B prompts x {g['prompt_len']} tokens, {g['new_tokens']} new tokens each, fp32 "
             f"(median of {g['reps']} calls)", "",
             "| B | mode | wall tok/s | decode tok/s | prefill ms | new tokens | transformers wall tok/s | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in g["runs"]:
        p = peer.get(f"{x['mode']}|{x['batch']}", {})
        hf = p.get("wall_tok_s")
        peer_cell = f"{hf:,.0f}" if hf else p.get("skipped", "")
        ratio = f"{x['wall_tok_s'] / hf:.1f}x" if hf else ""
        lines.append(f"| {x['batch']} | {x['mode']} | {x['wall_tok_s']:,.0f} | {x['decode_tok_s']:,.0f} | "
                     f"{x['prefill_ms']:.1f} | {x['new_tokens']} | {peer_cell} | {ratio} |")
    return lines


# -- report ----------------------------------------------------------------------

def make_rows(r):
    rows = []
    s1024 = next((s for s in r.get("solve", []) if s["seq_len"] == 1024), None)
    if s1024:
        rows.append(Row("solve() seq 1024, fp32 mode", s1024["ours_fp32_ms"], s1024["torch_fp32_ms"],
                        "torch fp32 reference block", "ms", "ratio<= 0.5",
                        f"err {s1024['ours_fp32_err']:.2g} vs torch {s1024['torch_fp32_err']:.2g}"))
        rows.append(Row("solve() seq 1024, tf32 mode", s1024["ours_tf32_ms"], s1024["torch_tf32_ms"],
                        "torch TF32 + SDPA block", "ms", "ratio<= 0.4", f"err {s1024['ours_tf32_err']:.2g}"))
    if "prefill" in r:
        p = r["prefill"]
        host = p.get("ours_all_logits_to_host_ms")
        rows.append(Row("gpt2 prefill 1024 tokens, fp32 (all logits, on the GPU)", p["ours_all_logits_ms"],
                        p["hf_sdpa_ms"], "transformers sdpa fp32", "ms", "ratio<= 0.4",
                        f"max |logit diff| {p['max_logit_diff_vs_hf']:.2g}"
                        + (f"; to a NumPy array {host:.1f} ms" if host is not None else "")))
        rows.append(Row("gpt2 prefill 1024 tokens, fp32 (last logits)", p["ours_last_logits_ms"],
                        p["hf_sdpa_last_logits_ms"], "transformers sdpa, logits_to_keep=1", "ms", "ratio<= 0.4"))
    if "decode" in r:
        dd = r["decode"]
        peer = lambda b: dd.get(f"hf_compiled_b{b}_tok_s", dd.get(f"hf_sdpa_b{b}_tok_s"))  # noqa: E731
        label = (f"transformers static cache + compile ({dd['hf_compiled_mode']})" if "hf_compiled_mode" in dd
                 else "transformers sdpa (compiled peer did not run)")
        rows.append(Row("gpt2 greedy decode b1, fp32", dd.get("ours_fp32_b1_tok_s"), peer(1), label, "tok/s",
                        ">= 4000"))
        rows.append(Row("gpt2 greedy decode b8, fp32", dd.get("ours_fp32_b8_tok_s"), peer(8), label, "tok/s",
                        ">= 20000"))
        rows.append(Row("gpt2 greedy decode b1, bf16 weights", dd.get("ours_bf16_b1_tok_s"), 16900,
                        "HBM floor (bf16)", "tok/s", ">= 7000"))
    if "layernorm" in r:
        ln = r["layernorm"]
        rows.append(Row("LayerNorm 8192 x 768", ln["ours_TBps"], ln["torch_TBps"], "torch layer_norm", "TB/s",
                        f">= {0.8 * r['ceilings']['copy_TBps']:.3f}",
                        f"{ln['ours_TBps'] / r['ceilings']['copy_TBps']:.0%} of copy bandwidth (bursts of calls, "
                        f"programmatic launch; plain launch {ln['ours_plain_TBps'] / r['ceilings']['copy_TBps']:.0%}); "
                        f"a same-size copy {ln['copy_same_size_TBps'] / r['ceilings']['copy_TBps']:.0%}; "
                        f"between events {ln['ours_event_TBps'] / r['ceilings']['copy_TBps']:.0%}"))
    if "generate" in r:
        rows += generate_rows(r["generate"])
    if "decode_xl" in r:
        x = r["decode_xl"]
        rows.append(Row("gpt2-xl greedy decode b1, fp32", x.get("ours_fp32_b1_tok_s"), x.get("hf_sdpa_b1_tok_s"),
                        "transformers sdpa fp32", "tok/s", "peer_x>= 8"))
    return rows


def markdown(r, rows):
    c = r["ceilings"]
    lines = [
        f"Ceilings measured in this run: copy {c['copy_TBps']:.2f} TB/s, cuBLAS fp32 SGEMM "
        f"{c['sgemm_fp32_TFLOPs']:.1f} TFLOP/s, TF32 {c['gemm_tf32_TFLOPs']:.0f} TFLOP/s.",
        "",
        "| what | gpt2block | peer | peer value | ratio | target | verdict | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        f = lambda v: "" if v is None else (f"{v:,.0f}" if row.unit == "tok/s" else f"{v:.3f}")  # noqa: E731
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(f"| {row.what} | {f(row.ours)} {row.unit} | {row.peer_name} | {f(row.peer)} | {ratio} | "
                     f"{row.target} | {row.verdict()} | {row.note} |")
    if r.get("generate"):
        lines += generate_table(r["generate"])
    if r.get("solve"):
        lines += ["", "| seq_len | ours fp32 ms | ours tf32 ms | torch fp32 ms | torch tf32 ms | ours fp32 TFLOP/s | "
                  "ours fp32 err | torch fp32 err |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s in r["solve"]:
            lines.append(f"| {s['seq_len']} | {s['ours_fp32_ms']:.3f} | {s['ours_tf32_ms']:.3f} | "
                         f"{s['torch_fp32_ms']:.3f} | {s['torch_tf32_ms']:.3f} | "
                         f"{s['gflop'] / s['ours_fp32_ms']:.1f} | {s['ours_fp32_err']:.2g} | "
                         f"{s['torch_fp32_err']:.2g} |")
    return "\n".join(lines) + "\n"


# What a greedy decode step reads, for the plot's floors (bench_decode's runs: prompt_len 16, then `steps` steps).
DECODE_PROMPT_LEN = 16  # _ours_decode_rate's prompt_len


def decode_step_bytes(size, precision, batch, steps, prompt_len=DECODE_PROMPT_LEN):
    """Mean bytes one greedy decode step of ``batch`` rows reads from device memory, as the CUDA backend runs
    it (gpt2block/backends/cuda/runner.py): every block's decode matrices once (12 D^2 values, float32, or bf16 in
    bf16 mode) with its biases and LayerNorm gains (13 D float32); the LM head once: at batch 1 its int8 screen
    (V x D int8 + 16 bytes a row; the few rescored rows left out), else wte (V x D, float32 or bf16); each
    row's KV cache (float32) up to its position, averaged over the run's positions; the embedding rows and
    ln_f. Weights are counted once a step, whatever the L2 keeps between steps."""
    from .config import SIZES

    c = SIZES[size]
    d, n_layer, v = c.n_embd, c.n_layer, c.vocab_size
    wbytes = 2 if precision == "bf16" else 4
    blocks = n_layer * (12 * d * d * wbytes + 13 * d * 4)
    head = v * d + 16 * v if batch == 1 else v * d * wbytes
    mean_keys = prompt_len + (steps + 1) / 2  # a step at position p reads keys 0..p
    kv = batch * n_layer * 2 * mean_keys * d * 4
    return blocks + head + kv + batch * 2 * d * 4 + 2 * d * 4


def plot(r, path):
    """bench.png: solve()'s time per block against sequence length (left) and greedy decode rates (right),
    each with the floor the run's own ceilings give. Returns False, writing nothing, when the results hold
    neither section (a run of other sections only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [k for k in ("solve", "decode") if r.get(k)]
    if not panels:
        return False
    c = r["ceilings"]
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 6.5), squeeze=False)
    axes = dict(zip(panels, axes[0]))
    if "solve" in axes:
        ax = axes["solve"]
        s = [x["seq_len"] for x in r["solve"]]
        for key, label in (("ours_fp32_ms", "gpt2block, fp32 mode"), ("ours_tf32_ms", "gpt2block, tf32 mode"),
                           ("torch_fp32_ms", "torch reference block, fp32"),
                           ("torch_tf32_ms", "torch reference block, TF32 + SDPA")):
            ax.plot(s, [x[key] for x in r["solve"]], marker="o", label=label)
        ax.plot(s, [block_flops(n) / c["sgemm_fp32_TFLOPs"] / 1e9 for n in s], "k--",
                label=f"FLOPs / cuBLAS fp32 SGEMM rate ({c['sgemm_fp32_TFLOPs']:.1f} TFLOP/s)")
        ax.plot(s, [block_flops(n) / c["gemm_tf32_TFLOPs"] / 1e9 for n in s], "k:",
                label=f"FLOPs / cuBLAS TF32 GEMM rate ({c['gemm_tf32_TFLOPs']:.0f} TFLOP/s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("time per block (ms, median)")
        ax.set_title("one GPT-2 block (D = 768): solve()")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    if "decode" in axes:
        ax = axes["decode"]
        cases = []  # (label, results, size, batch, precision)
        for key in ("decode", "decode_xl"):
            dd = r.get(key)
            if not dd:
                continue
            for b in (1, 8):
                for prec in ("fp32", "bf16"):
                    if f"ours_{prec}_b{b}_tok_s" in dd:
                        cases.append((f"{dd['size']}, batch {b}, {'fp32' if prec == 'fp32' else 'bf16 weights'}",
                                      dd, b, prec))
        compiled = "transformers + torch.compile, static cache (fp32)"
        series = (("gpt2block", "ours_{prec}_b{b}_tok_s", "tab:blue"),
                  (compiled, "hf_compiled_b{b}_tok_s", "tab:orange"),
                  ("transformers, sdpa (fp32)", "hf_sdpa_b{b}_tok_s", "tab:green"))
        height = 0.8 / len(series)
        ys = range(len(cases))
        for j, (name, key, color) in enumerate(series):
            vals = []
            for label, dd, b, prec in cases:
                peer = j > 0
                vals.append(dd.get(key.format(prec=prec, b=b)) if not (peer and prec != "fp32") else None)
            pos = [y - 0.4 + height * (j + 0.5) for y in ys]
            got = [(p, x) for p, x in zip(pos, vals) if x]
            if got:
                ax.barh([p for p, _ in got], [x for _, x in got], height=height, color=color, label=name)
            for p, x in got:
                ax.text(x * 1.05, p, f"{x:,.0f}", va="center", fontsize=7)
        copy = c["copy_TBps"] * 1e12
        floors = [copy * b / decode_step_bytes(dd["size"], prec, b, dd["steps"]) for _, dd, b, prec in cases]
        ax.scatter(floors, list(ys), marker="|", s=900, color="k", zorder=3,
                   label=f"floor: bytes a step reads / copy bandwidth ({c['copy_TBps']:.2f} TB/s, this run):\n"
                         "the decode weights once at the step's precision, the LM head (its int8\n"
                         "screen at batch 1), each row's KV cache up to its position")
        for y, f in zip(ys, floors):
            ax.text(f * 1.08, y, f"floor {f:,.0f}", fontsize=7, va="center")
        ax.set_yticks(list(ys))
        ax.set_yticklabels([label for label, *_ in cases])
        ax.invert_yaxis()
        ax.set_xscale("log")
        if floors:  # a decode section without our rates draws no floors
            ax.set_xlim(right=max(floors) * 4)
        ax.set_xlabel("tokens/s (greedy decode, median)")
        ax.set_title(f"greedy decode after a {DECODE_PROMPT_LEN}-token prompt")
        ax.grid(True, axis="x", which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.suptitle(f"gpt2block on {r.get('gpu', 'the GPU')} (torch {r.get('torch', '?')})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


SECTIONS = ("ceilings", "solve", "layernorm", "prefill", "decode", "decode_xl", "generate")


def run_bench(out_dir, reps=20, quick=False, sections=SECTIONS, log=print):
    """Run the benchmark; write bench.json, bench.md and bench.png into out_dir. Returns the results."""
    try:
        import torch
    except ImportError:
        raise RuntimeError("the benchmark's peers need torch (pip install gpt2block[test])") from None
    if not torch.cuda.is_available():
        raise RuntimeError("the benchmark needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "reps": reps}
    seq_lens = [1, 128, 1024] if quick else [1, 16, 128, 256, 512, 1024, 2048, 4096]
    r["ceilings"] = measure_ceilings(torch, reps)
    log(f"ceilings: {r['ceilings']}")
    if "solve" in sections:
        r["solve"] = bench_solve(torch, seq_lens, reps)
        log("solve done")
    if "layernorm" in sections:
        r["layernorm"] = bench_layernorm(torch, reps)
        log(f"layernorm: {r['layernorm']}")
    if "prefill" in sections:
        r["prefill"] = bench_prefill(torch, reps)
        log(f"prefill: {r['prefill']}")
    if "decode" in sections:
        r["decode"] = bench_decode(torch, reps, steps=64 if quick else 128, compile_peer=not quick)
        log(f"decode: {r['decode']}")
    if "decode_xl" in sections:
        r["decode_xl"] = bench_decode(torch, reps, "gpt2-xl", batches=(1,), steps=32 if quick else 64,
                                      compile_peer=False)
        log(f"decode_xl: {r['decode_xl']}")
    if "generate" in sections:
        r["generate"] = bench_generate(torch, quick, log=log)
    rows = make_rows(r)
    r["rows"] = [dict(row.__dict__, ratio=row.ratio, verdict=row.verdict()) for row in rows]
    (out / "bench.json").write_text(json.dumps(r, indent=1, default=float))
    (out / "bench.md").write_text(markdown(r, rows))
    try:
        plot(r, out / "bench.png")
    except ImportError:
        log("matplotlib not installed: no plot")
    return r, rows



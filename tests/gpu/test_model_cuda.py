"""The whole model on the GPU: kernels of the small ops, logits against transformers for every
GPT-2 width, cached decode against recomputation, batched against alone, greedy argmax."""

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.backends.numpy_ref import layer_norm
from gpt2block.checkpoint import load_weights

WIDTHS = [  # (n_layer, n_embd, n_head): full gpt2, fewer layers for the larger widths
    (12, 768, 12),
    (2, 1024, 16),
    (2, 1280, 20),
    (2, 1600, 25),
]


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory, torch_cuda):
    """Random GPT2LMHeadModel checkpoints (save_pretrained format), one per width."""
    torch = torch_cuda
    from transformers import GPT2Config, GPT2LMHeadModel

    out = {}
    for n_layer, d, nh in WIDTHS:
        torch.manual_seed(d)
        cfg = GPT2Config(n_layer=n_layer, n_embd=d, n_head=nh, n_positions=1024, vocab_size=50257)
        model = GPT2LMHeadModel(cfg).eval()
        with torch.no_grad():  # every parameter random, LayerNorm gains near 1
            for name, p in model.named_parameters():
                if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                    p.uniform_(0.8, 1.2)
                else:
                    p.normal_(0.0, 0.02)
        path = tmp_path_factory.mktemp(f"gpt2-{d}")
        model.save_pretrained(path)
        out[d] = (path, model.cuda())
    return out


def _hf_logits(torch, model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids, device="cuda")[None]).logits[0].double().cpu().numpy()


@pytest.mark.parametrize("d", [w[1] for w in WIDTHS])
def test_logits_match_transformers(hf_models, torch_cuda, d):
    torch = torch_cuda
    path, model = hf_models[d]
    weights = load_weights(path)
    runner = make_runner(weights, "cuda")
    rng = np.random.default_rng()
    for t in (1, 2, 30, 100, 1024):
        ids = rng.integers(0, 50257, t)
        ours = runner.forward(ids).astype(np.float64)
        ref32 = _hf_logits(torch, model, ids)
        judge = make_runner(weights, "numpy", "fp64").forward(ids) if t <= 100 else None
        assert np.isfinite(ours).all()
        assert np.abs(ours - ref32).max() <= 1e-4, f"T={t}: max |logit diff| {np.abs(ours - ref32).max():.3g}"
        assert (ours.argmax(-1) == ref32.argmax(-1)).mean() >= 0.99
        if judge is not None:
            e_ours, e_peer = np.abs(ours - judge).max(), np.abs(ref32 - judge).max()
            assert e_ours <= 2 * e_peer + 1e-6, f"T={t}: error vs fp64 {e_ours:.3g} > 2 x torch's {e_peer:.3g}"


def test_cached_decode_equals_recompute(hf_models):
    path, _ = hf_models[768]
    runner = make_runner(load_weights(path), "cuda")
    ids = np.random.default_rng().integers(0, 50257, 40)
    full = runner.forward(ids)
    cache = runner.new_cache(1)
    first = runner.prefill(cache, 0, ids[:25])
    steps = [runner.decode(cache, ids[i:i + 1])[0] for i in range(25, 40)]
    np.testing.assert_allclose(first, full[24], atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.stack(steps), full[25:], atol=1e-4, rtol=0)


def test_chunked_prefill_equals_one_prefill(hf_models):
    path, _ = hf_models[1600]
    runner = make_runner(load_weights(path), "cuda")
    ids = np.random.default_rng().integers(0, 50257, 300)
    full = runner.forward(ids)
    cache = runner.new_cache(1)
    runner.prefill(cache, 0, ids[:77])
    tail = runner.prefill(cache, 0, ids[77:], all_logits=True)
    np.testing.assert_allclose(tail, full[77:], atol=1e-4, rtol=0)


@pytest.mark.parametrize("d", [768, 1600])
def test_batched_equals_alone(hf_models, d):
    path, _ = hf_models[d]
    runner = make_runner(load_weights(path), "cuda")
    rng = np.random.default_rng()
    prompts = [rng.integers(0, 50257, n) for n in (1, 17, 250)]
    nxt = rng.integers(0, 50257, (6, 3))
    cache = runner.new_cache(3)
    batched = [np.stack([runner.prefill(cache, r, p) for r, p in enumerate(prompts)])]
    batched += [runner.decode(cache, nxt[i]) for i in range(6)]
    for r, p in enumerate(prompts):
        alone = runner.forward(np.concatenate([p, nxt[:, r]]))[len(p) - 1:]
        np.testing.assert_allclose(np.stack([b[r] for b in batched]), alone, atol=1e-4, rtol=0)


@pytest.mark.parametrize("batch,precision", [(1, "fp32"), (1, "bf16"), (2, "fp32")])
def test_greedy_argmax_on_device(hf_models, batch, precision):
    """decode_greedy's ids (at batch 1 taken by the LM head GEMV itself, else by argmax_rows_f32)
    equal np.argmax of the same runner's decode logits."""
    path, _ = hf_models[768]
    runner = make_runner(load_weights(path), "cuda", precision)
    rng = np.random.default_rng()
    c1, c2 = runner.new_cache(batch), runner.new_cache(batch)
    for r in range(batch):
        p = rng.integers(0, 50257, 5 + r)
        runner.prefill(c1, r, p)
        runner.prefill(c2, r, p)
    tok = rng.integers(0, 50257, batch)
    for _ in range(5):
        logits = runner.decode(c1, tok)
        greedy = runner.decode_greedy(c2, tok)
        np.testing.assert_array_equal(greedy, logits.argmax(-1))
        tok = greedy


@pytest.mark.parametrize("rows", [1, 2, 30, 100, 1025])
@pytest.mark.parametrize("d", [768, 1024, 1280, 1600])
@pytest.mark.parametrize("blocks", [None, 1, 7])
def test_layernorm_kernel(cp, torch_cuda, rows, d, blocks):
    """Against float64, within twice torch's error; blocks 1 and 7: each warp takes many rows
    (the next one loaded while the current one is stored), odd and even counts of them."""
    from gpt2block.backends.cuda import ops as cuda_ops

    torch = torch_cuda
    rng = np.random.default_rng()
    x = rng.normal(0, 1, (rows, d)).astype(np.float32)
    x[:, :3] *= 3000.0  # the trained residual stream's huge dimensions
    x[0] += 2000.0  # a row whose mean is far from zero
    g = rng.uniform(0.8, 1.2, d).astype(np.float32)
    b = rng.normal(0, 0.1, d).astype(np.float32)
    y = cp.full((rows, d), cp.nan, cp.float32)
    blocks = None if blocks is None else min(blocks, -(-rows // cuda_ops.LN_WARPS))
    cuda_ops.layernorm(cp.asarray(x), cp.asarray(g), cp.asarray(b), y, 1e-5, blocks=blocks)
    ref = layer_norm(x.astype(np.float64), g, b)
    peer = torch.nn.functional.layer_norm(torch.tensor(x).cuda(), (d,), torch.tensor(g).cuda(),
                                          torch.tensor(b).cuda(), 1e-5).double().cpu().numpy()
    ours = cp.asnumpy(y).astype(np.float64)
    assert np.isfinite(ours).all()
    # slack: one float32 ulp of the output's scale (outputs reach about 40 here, ulp 3.8e-6; a plain
    # 1e-6 failed once on a 1-ulp error where torch happened to round closer)
    slack = max(1e-6, float(np.spacing(np.float32(np.abs(ref).max()))))
    assert np.abs(ours - ref).max() <= 2 * np.abs(peer - ref).max() + slack


@pytest.mark.parametrize("d", [768, 640, 512])
@pytest.mark.parametrize("rows, blocks", [(4, 1), (8, 1), (12, 1), (16, 1), (20, 1), (24, 1), (28, 1),
                                          (30, 2), (1025, 7), (8192, None)])
def test_layernorm_schedules_give_the_same_bits(cp, d, rows, blocks):
    """Two rows loaded ahead (LN_DEPTH 3, built at 385 <= D <= 768 where some warp takes three rows
    or more) and one (LN_DEPTH 2) run the same arithmetic on every row: bit-equal outputs, with 1 to 7
    rows a warp (the loop's exits after each of its three buffers), and at the benchmark's shape with
    the default grid (None: LN_BLOCKS_PER_SM per SM)."""
    from gpt2block.backends.cuda import build
    from gpt2block.backends.cuda import ops as cuda_ops
    from gpt2block.backends.cuda.modules import kernel, launch, sm_count

    seed = int(np.random.default_rng().integers(2**31))
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (rows, d)).astype(np.float32) + rng.normal(0, 50, (rows, 1)).astype(np.float32)
    x, g = cp.asarray(x), cp.asarray(rng.uniform(0.8, 1.2, d).astype(np.float32))
    b = cp.asarray(rng.normal(0, 0.1, d).astype(np.float32))
    grid = min(-(-rows // cuda_ops.LN_WARPS), cuda_ops.LN_BLOCKS_PER_SM * sm_count()) if blocks is None else blocks
    outs = []
    for depth in (3, 2):
        y = cp.full((rows, d), cp.nan, cp.float32)
        k = kernel("layernorm", "layernorm_f32", build.layernorm(d, depth))
        launch(k, (grid,), (32 * cuda_ops.LN_WARPS,),
               (x, g, b, y, cp.int32(rows), cp.int32(d), cp.int32(d), cp.int32(d), cp.float32(1e-5)))
        outs.append(cp.asnumpy(y))
    assert np.isfinite(outs[0]).all()
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("rows, d", [(8192, 768), (1025, 1600), (2, 768)])
def test_layernorm_programmatic_chain_waits_for_each_call(cp, rows, d):
    """layernorm_f32 lets the next kernel launch at its start and waits before touching memory, so a
    chain of programmatic launches (y1 = LN(x), y2 = LN(y1), y1 = LN(y2), y2 = LN(y2) in place) gives
    the bits of the same chain launched plainly, each output poisoned with NaN before: a call that read
    its input before the call ahead had finished would see NaN. Five times, on its own stream."""
    from gpt2block.backends.cuda import ops as cuda_ops
    from gpt2block.backends.cuda.modules import programmatic_launches

    seed = int(np.random.default_rng().integers(2**31))
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    x = cp.asarray(rng.normal(0, 1, (rows, d)).astype(np.float32) * 30.0)
    g = cp.asarray(rng.uniform(0.5, 2.0, d).astype(np.float32))
    b = cp.asarray(rng.normal(0, 1.0, d).astype(np.float32))

    def chain(y1, y2):
        cuda_ops.layernorm(x, g, b, y1, 1e-5)
        cuda_ops.layernorm(y1, g, b, y2, 1e-5)
        cuda_ops.layernorm(y2, g, b, y1, 1e-5)
        cuda_ops.layernorm(y1, g, b, y2, 1e-5)
        cuda_ops.layernorm(y2, g, b, y2, 1e-5)

    r1, r2 = (cp.full((rows, d), cp.nan, cp.float32) for _ in range(2))
    chain(r1, r2)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(5):
        y1, y2 = (cp.full((rows, d), cp.nan, cp.float32) for _ in range(2))
        cp.cuda.Device().synchronize()
        with stream, programmatic_launches():
            chain(y1, y2)
        stream.synchronize()
        assert bool(cp.isfinite(y2).all())
        np.testing.assert_array_equal(cp.asnumpy(y1), cp.asnumpy(r1))
        np.testing.assert_array_equal(cp.asnumpy(y2), cp.asnumpy(r2))


def test_layernorm_rejects_a_grid_beyond_its_rows(cp):
    from gpt2block.backends.cuda import ops as cuda_ops

    x = cp.zeros((9, 768), cp.float32)
    g = cp.ones(768, cp.float32)
    with pytest.raises(ValueError, match="layernorm of 9 rows takes 1 to 3 blocks; got 4"):
        cuda_ops.layernorm(x, g, g, x, 1e-5, blocks=4)


def test_embedding_and_argmax_kernels(cp):
    from gpt2block.backends.cuda import ops as cuda_ops

    rng = np.random.default_rng()
    wte = rng.normal(0, 1, (1000, 768)).astype(np.float32)
    wpe = rng.normal(0, 1, (64, 768)).astype(np.float32)
    ids = rng.integers(0, 1000, 37).astype(np.int32)
    pos = rng.integers(0, 64, 37).astype(np.int32)
    x = cp.full((37, 768), cp.nan, cp.float32)
    cuda_ops.embedding(cp.asarray(ids), cp.asarray(pos), cp.asarray(wte), cp.asarray(wpe), x)
    np.testing.assert_array_equal(cp.asnumpy(x), wte[ids] + wpe[pos])

    logits = rng.normal(0, 1, (5, 50257)).astype(np.float32)
    logits[1, [7, 50000]] = 99.0  # a tie: the first index wins, as np.argmax
    logits[2, -1] = 99.0  # the last column
    out = cp.full(5, -1, cp.int32)
    cuda_ops.argmax_rows(cp.asarray(logits), out)
    np.testing.assert_array_equal(cp.asnumpy(out), logits.argmax(-1))


@pytest.mark.parametrize("v", [1, 2, 2047, 2048, 2049, 50257])
def test_argmax_chunks(cp, v):
    """argmax_rows splits a row over ceil(V / ARGMAX_CHUNK) blocks: the winner in any chunk,
    ties across chunks, -inf and NaN rows, more rows than one launch's workspace held."""
    from gpt2block.backends.cuda import ops as cuda_ops

    rng = np.random.default_rng()
    rows = 9
    logits = rng.normal(0, 1, (rows, v)).astype(np.float32)
    if v > 1:
        logits[1, [0, v - 1]] = 50.0  # tie between the first and the last chunk: index 0 wins
        logits[2, v - 1] = 50.0  # the last element
    logits[3] = -np.inf  # every value -inf: index 0, as np.argmax
    logits[4] = np.nan  # every value NaN: index 0 (a NaN never wins)
    logits[5, rng.integers(0, v)] = np.nan  # one NaN: ignored
    expect = np.where(np.isnan(logits), -np.inf, logits).argmax(-1)
    for _ in range(2):  # twice: the tickets were put back to zero
        out = cp.full(rows, -1, cp.int32)
        cuda_ops.argmax_rows(cp.asarray(logits), out)
        np.testing.assert_array_equal(cp.asnumpy(out), expect)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_programmatic_launch_changes_no_bit(hf_models, precision):
    """Decode with programmatic dependent launch (the default) against plain launches, graphs on
    and off: the same kernels in the same order, so the logits must agree bit for bit."""
    from gpt2block.backends.cuda import driver as cuda_launch

    path, _ = hf_models[768]
    weights = load_weights(path)
    rng = np.random.default_rng()
    prompts = [rng.integers(0, 50257, n) for n in (3, 40)]
    steps = rng.integers(0, 50257, (5, 2))
    calls = []
    real = cuda_launch.launch_programmatic

    def counting(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    results = []
    for programmatic, graphs in ((True, True), (False, True), (True, False)):
        runner = make_runner(weights, "cuda", precision)
        runner.programmatic, runner.use_graphs = programmatic, graphs
        cache = runner.new_cache(2)
        for r, p in enumerate(prompts):
            runner.prefill(cache, r, p)
        cuda_launch.launch_programmatic = counting
        try:
            results.append(np.stack([runner.decode(cache, s) for s in steps]))
        finally:
            cuda_launch.launch_programmatic = real
        if programmatic:
            assert any("_kv_m" in n for n in calls), "no programmatic launch ran"
            # a step starts with a plain launch, so that its kernels find the steps before finished
            # (attention_decode_f32 reads lengths and older keys before its wait)
            assert not any(n.startswith("embedding") for n in calls), "the embedding was launched programmatically"
        else:
            assert not calls
        calls.clear()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_decode_graph_survives_other_work(hf_models):
    """A cache's captured decode graph keeps writing where its step reads: after a forward()
    of 20 tokens (which regrows the runner's prefill logits buffer) and another cache's steps
    at a larger batch (another argmax shape), the cache's next steps equal those of a runner
    that never captured a graph."""
    path, _ = hf_models[768]
    weights = load_weights(path)
    rng = np.random.default_rng()
    prompt = rng.integers(0, 50257, 7)
    graphs, plain = make_runner(weights, "cuda"), make_runner(weights, "cuda")
    plain.use_graphs = False
    caches = [r.new_cache(1) for r in (graphs, plain)]
    toks = []
    for r, c in zip((graphs, plain), caches):
        r.prefill(c, 0, prompt)
        tok = np.array([5])
        for _ in range(3):  # the second step captures the graph
            tok = r.decode_greedy(c, tok)
        toks.append(tok)
    graphs.forward(rng.integers(0, 50257, 20))
    other = graphs.new_cache(3)
    for row in range(3):
        graphs.prefill(other, row, rng.integers(0, 50257, 4))
    for _ in range(3):
        graphs.decode_greedy(other, rng.integers(0, 50257, 3))
    for _ in range(4):
        got = graphs.decode(caches[0], toks[0])
        want = plain.decode(caches[1], toks[1])
        np.testing.assert_array_equal(got, want)
        toks = [got.argmax(-1), want.argmax(-1)]


def test_argmax_advances_a_decode_steps_ints(cp):
    """argmax_rows(advance=step): ids become the argmax, pos and lengths move on by one, seq stays."""
    from gpt2block.backends.cuda import ops as cuda_ops

    rng = np.random.default_rng()
    logits = rng.normal(0, 1, (3, 50257)).astype(np.float32)
    step = np.array([[5, 6, 7], [0, 1, 2], [10, 0, 1022], [11, 1, 1023]], np.int32)
    d_step = cp.asarray(step)
    out = cp.full(3, -1, cp.int32)
    cuda_ops.argmax_rows(cp.asarray(logits), out, advance=d_step)
    want = np.stack([logits.argmax(-1), step[1], step[2] + 1, step[3] + 1]).astype(np.int32)
    np.testing.assert_array_equal(cp.asnumpy(d_step), want)
    np.testing.assert_array_equal(cp.asnumpy(out), want[0])
    with pytest.raises(ValueError, match="advance must be"):
        cuda_ops.argmax_rows(cp.asarray(logits), out, advance=cp.zeros((4, 2), cp.int32))


def test_argmax_writes_mapped_host_memory(cp):
    """argmax_rows(host_out=MappedInts): the host sees every row's argmax once the stream is done,
    with no copy; a host_out of the wrong size or kind is refused."""
    from gpt2block.backends.cuda import ops as cuda_ops

    rng = np.random.default_rng()
    for rows in (1, 3, 8):
        logits = rng.normal(0, 1, (rows, 50257)).astype(np.float32)
        logits[0, rng.integers(0, 50257)] = 9.0  # a clear winner somewhere in row 0
        ring = cuda_ops.MappedInts(rows)
        ring.array[:] = -7  # poisoned
        out = cp.full(rows, -1, cp.int32)
        cuda_ops.argmax_rows(cp.asarray(logits), out, host_out=ring)
        cp.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(ring.array, logits.argmax(-1))
        np.testing.assert_array_equal(cp.asnumpy(out), logits.argmax(-1))
    with pytest.raises(ValueError, match="host_out must be MappedInts of 3"):
        cuda_ops.argmax_rows(cp.asarray(logits[:3]), out[:3], host_out=cuda_ops.MappedInts(2))
    with pytest.raises(ValueError, match="host_out must be MappedInts"):
        cuda_ops.argmax_rows(cp.asarray(logits[:3]), out[:3], host_out=np.zeros(3, np.int32))


@pytest.mark.parametrize("d, batch, graphs, precision", [
    (768, 1, True, "fp32"), (768, 1, True, "bf16"), (768, 1, False, "bf16"), (768, 3, True, "fp32"),
    (768, 3, False, "fp32"), (1600, 2, True, "fp32"), (1600, 1, True, "bf16")])
def test_greedy_steps_run_ahead_equal_one_step_at_a_time(hf_models, d, batch, graphs, precision):
    """greedy_steps (one step queued ahead, fed on the device) gives the ids of decode_greedy
    called step by step, bit for bit, on the five-kernel path (768) and the fused one (1600; bf16
    there); at batch 1 its steps take the argmax through the LM head's screen, decode_greedy through
    the full head; closing it early takes the queued step back, so the next decode's logits are
    those of the cache that never ran it; at the end of a context it stops after the step that fills it."""
    path, _ = hf_models[d]
    weights = load_weights(path)
    rng = np.random.default_rng()
    runner, plain = make_runner(weights, "cuda", precision), make_runner(weights, "cuda", precision)
    runner.use_graphs = graphs
    prompts = [rng.integers(0, 50257, n) for n in (5, 17, 2)[:batch]]
    caches = [r.new_cache(batch) for r in (runner, plain)]
    for r, c in zip((runner, plain), caches):
        for row, p in enumerate(prompts):
            r.prefill(c, row, p)
    tok = rng.integers(0, 50257, batch)
    want, t = [], tok
    for _ in range(9):
        t = plain.decode_greedy(caches[1], t)
        want.append(t)
    for start in (0, 4):  # a second stream continues where the first one was closed
        steps = runner.greedy_steps(caches[0], tok if start == 0 else want[start - 1])
        for i in range(start, 9 if start else 4):
            np.testing.assert_array_equal(next(steps), want[i])
        steps.close()
        np.testing.assert_array_equal(caches[0].pos, caches[1].pos if start else caches[1].pos - 5)
    np.testing.assert_array_equal(runner.decode(caches[0], want[-1]), plain.decode(caches[1], want[-1]))
    # a row 3 short of the context: three steps, then the stream ends
    for r, c in zip((runner, plain), caches):
        c.pos[0] = c.n_ctx - 3
    got = list(runner.greedy_steps(caches[0], want[-1], max_steps=50))
    assert len(got) == 3 and caches[0].pos[0] == caches[0].n_ctx
    t = want[-1]
    for g in got:
        t = plain.decode_greedy(caches[1], t)
        np.testing.assert_array_equal(g, t)


def test_forward_device_equals_forward(hf_models, cp):
    """forward_device leaves the logits on the GPU: the same numbers as forward(), a fresh
    array each call (the next call does not overwrite it), ids checked as forward's."""
    path, _ = hf_models[1024]
    runner = make_runner(load_weights(path), "cuda")
    rng = np.random.default_rng()
    ids = rng.integers(0, 50257, 37)
    first = runner.forward_device(ids)
    assert isinstance(first, cp.ndarray) and first.shape == (37, 50257) and first.dtype == cp.float32
    keep = cp.asnumpy(first)
    runner.forward_device(rng.integers(0, 50257, 5))
    np.testing.assert_array_equal(cp.asnumpy(first), keep)
    np.testing.assert_array_equal(keep, runner.forward(ids))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        runner.forward_device([50257])


def test_forward_device_graphs_replay_exactly(hf_models, cp):
    """forward_device's graphs (a length's first call eager, its second captured, later replays),
    lengths interleaved, new ids each call: every call's logits are bit-identical to forward()'s on
    the same ids, and to a runner without graphs; each call returns its own array."""
    path, _ = hf_models[768]
    weights = load_weights(path)
    runner = make_runner(weights, "cuda")
    plain = make_runner(weights, "cuda")
    plain.use_graphs = False
    rng = np.random.default_rng()
    kept = []
    for t in (1, 2, 30, 1, 100, 2, 30, 1, 1024, 100, 1024, 1024):
        ids = rng.integers(0, 50257, t)
        got = runner.forward_device(ids)
        assert bool(cp.isfinite(got).all()), f"length {t}: non-finite logits"
        np.testing.assert_array_equal(cp.asnumpy(got), plain.forward(ids), err_msg=f"length {t}")
        kept.append((got, cp.asnumpy(got)))
    for got, host in kept:  # no later call wrote into an earlier call's array
        np.testing.assert_array_equal(cp.asnumpy(got), host)
    assert set(runner._fwd.graphs) == {1, 2, 30, 100, 1024}

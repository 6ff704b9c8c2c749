"""CudaRunner.sample_rows: a decode step of only the listed rows of a cache (in any order, each row's K / V and
attention at its own cache row), drawn on the device. It draws what a cache holding those rows alone, in that
order, draws through sample_step (the same kernels at the same batch size: the same bits), and leaves every
other row's KV cache and position as they were. A 2-layer model of gpt2's width and vocabulary."""

import numpy as np
import pytest

from gpt2block.sampler import SamplingBatch, SamplingParams

POOL = 12
STEPS = 4  # eager, captured, replayed twice
PARAMS = [SamplingParams(temperature=0.8, top_p=0.95, top_k=0), SamplingParams(temperature=0.0),
          SamplingParams(temperature=1.0, top_k=40, repetition_penalty=1.3, presence_penalty=0.5),
          SamplingParams(temperature=1.2, top_k=0, min_p=0.05)]


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def runner(request, tmp_path_factory):
    from hf_checkpoints import make_hf_checkpoint

    from gpt2block.backends import make_runner
    from gpt2block.checkpoint import load_weights

    ckpt = make_hf_checkpoint(tmp_path_factory.mktemp("rows") / "ckpt", 2, 768, 12, vocab_size=50257,
                              n_positions=1024, seed=45)
    return make_runner(load_weights(ckpt.path), "cuda", request.param)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, 50257, int(n)).tolist() for n in rng.integers(1, 90, POOL)]


def _batch(rows, prompts, outputs):
    return SamplingBatch([PARAMS[r % len(PARAMS)] for r in rows], [1000 + r for r in rows], [r % 3 for r in rows],
                         [prompts[r] for r in rows], [outputs[r] for r in rows], True, 3)


def _prefilled(runner, prompts, rows):
    """A cache of len(rows) rows, row i holding prompts[rows[i]], each prefilled on its own (the same bits
    whatever the cache); and the first token of each."""
    cache = runner.new_cache(len(rows))
    logits = np.stack([runner.prefill(cache, i, prompts[r]) for i, r in enumerate(rows)])
    return cache, logits.argmax(axis=1)


def _alone(runner, prompts, rows, first):
    """The rows in a cache of their own, stepped STEPS times by sample_step -> list of SampleOutput."""
    cache, _ = _prefilled(runner, prompts, rows)
    outputs = {r: [] for r in rows}
    feed, got = first[list(rows)], []
    for _ in range(STEPS):
        for r, t in zip(rows, feed):
            outputs[r].append(int(t))
        out = runner.sample_step(cache, feed, _batch(rows, prompts, outputs))
        got.append(out)
        feed = out.ids
    return got


@pytest.mark.parametrize("subsets", [[[5]], [[7, 2, 10]], [[9, 0, 11, 3, 6, 1, 8, 4, 10, 2]],
                                     [[7, 2, 10], [5]], [list(np.random.default_rng(3).permutation(POOL))]],
                         ids=["one", "three", "ten-gemm", "two-interleaved", "all-permuted"])
def test_sample_rows_draws_as_the_rows_alone_and_leaves_the_others(runner, prompts, subsets):
    cp = pytest.importorskip("cupy")
    cache, first = _prefilled(runner, prompts, range(POOL))
    pos0 = cache.pos.copy()
    kv0 = cp.asnumpy(cache.kv)
    stepped = sorted({r for s in subsets for r in s})
    outputs = {r: [] for r in range(POOL)}
    feeds = [first[list(s)] for s in subsets]
    got = [[] for _ in subsets]
    for _ in range(STEPS):
        for k, rows in enumerate(subsets):  # the subsets take turns on one cache
            for r, t in zip(rows, feeds[k]):
                outputs[r].append(int(t))
            out = runner.sample_rows(cache, rows, feeds[k], _batch(rows, prompts, outputs))
            got[k].append(out)
            feeds[k] = out.ids
    for k, rows in enumerate(subsets):
        want = _alone(runner, prompts, rows, first)
        for step, (g, w) in enumerate(zip(got[k], want)):
            np.testing.assert_array_equal(g.ids, w.ids, err_msg=f"rows {rows} step {step}")
            np.testing.assert_allclose(g.logprobs, w.logprobs, rtol=0, atol=1e-6)
            np.testing.assert_array_equal(g.top_ids, w.top_ids)
    others = [r for r in range(POOL) if r not in stepped]
    np.testing.assert_array_equal(cache.pos[others], pos0[others])
    np.testing.assert_array_equal(cache.pos[stepped], pos0[stepped] + STEPS)
    kv = cp.asnumpy(cache.kv)
    np.testing.assert_array_equal(kv[others], kv0[others])  # every position of the other rows, untouched
    for r in stepped:  # the stepped rows: their prompt's keys kept, STEPS new ones written
        np.testing.assert_array_equal(kv[r][:, :, :pos0[r]], kv0[r][:, :, :pos0[r]])
        assert np.abs(kv[r][:, :, pos0[r]:pos0[r] + STEPS]).sum(axis=-1).min() > 0


def test_sample_rows_refuses_bad_rows_and_a_full_row(runner, prompts):
    from gpt2block.backends.base import ContextFull

    cache, first = _prefilled(runner, prompts[:3], range(3))
    b = _batch([0], prompts, {0: []})
    with pytest.raises(ValueError, match="outside the cache's batch"):
        runner.sample_rows(cache, [3], [1], b)
    with pytest.raises(ValueError, match="appears twice"):
        runner.sample_rows(cache, [1, 1], [1, 1], _batch([0, 1], prompts, {0: [], 1: []}))
    with pytest.raises(ValueError, match="2 sampling rows for 1 cache rows"):
        runner.sample_rows(cache, [0], [1], _batch([0, 1], prompts, {0: [], 1: []}))
    cache.pos[1] = cache.n_ctx
    with pytest.raises(ContextFull):
        runner.sample_rows(cache, [1], [1], b)
    pos = cache.pos.copy()
    out = runner.sample_rows(cache, [2], [4], _batch([2], prompts, {2: []}))  # another row full: no matter
    assert out.ids.shape == (1,) and cache.pos[2] == pos[2] + 1 and cache.pos[1] == cache.n_ctx


def test_sample_logits_draws_host_logits_on_the_device_as_the_numpy_sampler(runner):
    """The server's first token: host logits up to the device, drawn there; the NumPy sampler's ids (a draw on a
    boundary of the kept set may differ: at most one of 16) and log-probabilities."""
    rng = np.random.default_rng(11)
    B, V = 16, 50257
    logits = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    rows = list(range(B))
    prompts = [[1, 2, 3]] * B
    batch = _batch(rows, prompts, {r: [5, 6] for r in rows})
    positions = np.arange(B) + 40
    got = runner.sample_logits(logits, batch, positions)
    want = batch.draw(logits, positions)
    same = got.ids == want.ids
    assert same.sum() >= B - 1, (got.ids, want.ids)
    np.testing.assert_allclose(got.logprobs[same], want.logprobs[same], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got.top_ids, want.top_ids)
    with pytest.raises(ValueError, match="sample_logits needs logits"):
        runner.sample_logits(logits[:3], batch, positions)


@pytest.mark.parametrize("rows", [[7, 2, 10], list(range(POOL))], ids=["some", "all-in-order"])
def test_launch_rows_returns_before_the_step_and_a_prefill_queued_meanwhile_runs_after(runner, prompts, rows):
    """The server's engine: launch_rows queues the step (all the rows in order: the whole cache's step), the host
    queues a prefill of another row before it takes the result: the draws are sample_rows', the prefill's logits
    those of the row prefilled alone, and the stepped rows' positions moved by one."""
    free = [r for r in range(POOL) if r not in rows]
    cache, first = _prefilled(runner, prompts, range(POOL))
    twin, _ = _prefilled(runner, prompts, range(POOL))
    outputs = {r: [int(first[r])] for r in range(POOL)}
    want = runner.sample_rows(twin, rows, first[rows], _batch(rows, prompts, outputs))
    extra = [5, 9, 11]
    if free:
        target = free[0]
        cache.pos[target] = 0
        twin.pos[target] = 0
        alone = runner.prefill_batch(twin, [target], [prompts[target] + extra])
    pos = cache.pos.copy()
    draw = runner.launch_rows(cache, rows, first[rows], _batch(rows, prompts, outputs))
    if free:
        got_logits = runner.prefill_batch(cache, [target], [prompts[target] + extra])
        np.testing.assert_array_equal(got_logits, alone)
    got = draw.result()
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(cache.pos[rows], pos[rows] + 1)
    assert draw.result() is got  # once

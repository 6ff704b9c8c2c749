"""Runner.sample_rows: stepping some rows of a cache leaves the others as they were and draws what a cache of
those rows alone would draw (the NumPy backend's own pass, and the default every backend inherits)."""

import numpy as np
import pytest

from gpt2block.backends.base import ContextFull, Runner
from gpt2block.backends.numpy_ref import NumpyRunner
from gpt2block.sampler import SamplingBatch, SamplingParams

PROMPTS = [[5, 9, 13], [7, 7, 2, 40, 11], [100, 3], [8]]
PARAMS = [SamplingParams(0.9, 20, 0.95), SamplingParams(0.0), SamplingParams(1.0, 0, 1.0, 0.05, 1.3, 0.5, 0.2),
          SamplingParams(0.7)]


def _batch(rows, outputs, logprobs=3):
    return SamplingBatch([PARAMS[r] for r in rows], [11 + r for r in rows], [r % 2 for r in rows],
                         [PROMPTS[r] for r in rows], [outputs[r] for r in rows], True, logprobs)


def _alone(runner, r, steps):
    """Row r in a cache of its own: its first token, then ``steps`` sample_steps."""
    cache = runner.new_cache(1)
    outputs = {r: []}
    out = runner.sample_prefill(cache, [PROMPTS[r]], _batch([r], outputs))
    got = [out]
    for _ in range(steps):
        outputs[r].append(int(out.ids[0]))
        out = runner.sample_step(cache, out.ids, _batch([r], outputs))
        got.append(out)
    return got


@pytest.mark.parametrize("default", [False, True], ids=["numpy", "default"])
def test_sample_rows_steps_only_its_rows(tiny_weights, default):
    runner = NumpyRunner(tiny_weights)
    step = (lambda *a: Runner.sample_rows(runner, *a)) if default else runner.sample_rows
    cache = runner.new_cache(4)
    outputs = {r: [] for r in range(4)}
    first = runner.sample_prefill(cache, PROMPTS, _batch(range(4), outputs))
    kv_before = cache.kv[1].copy()
    rows, tokens = [3, 0, 2], first.ids[[3, 0, 2]]
    got = {r: [first] for r in rows}
    for _ in range(3):
        for r, t in zip(rows, tokens):
            outputs[r].append(int(t))
        out = step(cache, rows, tokens, _batch(rows, outputs))
        for i, r in enumerate(rows):
            got[r].append((out, i))
        tokens = out.ids
    assert cache.pos[1] == len(PROMPTS[1])  # row 1 untouched
    np.testing.assert_array_equal(cache.kv[1, :, :, :len(PROMPTS[1])], kv_before[:, :, :len(PROMPTS[1])])
    for r in rows:
        assert cache.pos[r] == len(PROMPTS[r]) + 3
        ref = _alone(runner, r, 3)
        assert int(got[r][0].ids[r]) == int(ref[0].ids[0])
        for (out, i), want in zip(got[r][1:], ref[1:]):
            assert int(out.ids[i]) == int(want.ids[0])
            np.testing.assert_allclose(out.logprobs[i], want.logprobs[0], rtol=1e-5, atol=1e-5)
            assert list(out.top_ids[i]) == list(want.top_ids[0])


def test_sample_rows_refuses_bad_rows(tiny_weights):
    runner = NumpyRunner(tiny_weights)
    cache = runner.new_cache(2)
    runner.prefill_batch(cache, [0, 1], [[1, 2], [3]])
    b = _batch([0], {0: []})
    for default in (False, True):
        step = (lambda *a: Runner.sample_rows(runner, *a)) if default else runner.sample_rows
        with pytest.raises(ValueError, match="outside the cache's batch"):
            step(cache, [2], [1], b)
        with pytest.raises(ValueError, match="appears twice"):
            step(cache, [0, 0], [1, 1], _batch([0, 1], {0: [], 1: []}))
        with pytest.raises(ValueError, match="2 tokens for 1 rows"):
            step(cache, [0], [1, 2], b)
        with pytest.raises(ValueError, match="2 sampling rows for 1 cache rows"):
            step(cache, [0], [1], _batch([0, 1], {0: [], 1: []}))
    cache.pos[0] = cache.n_ctx
    with pytest.raises(ContextFull):
        runner.sample_rows(cache, [0], [1], b)
    out = Runner.sample_rows(runner, cache, [1], [4], _batch([1], {1: []}))  # row 0 full: the prefill path
    assert out.ids.shape == (1,) and cache.pos[1] == 2 and cache.pos[0] == cache.n_ctx

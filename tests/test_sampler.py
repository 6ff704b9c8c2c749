"""The sampler: greedy, temperature, top-k, top-p, repetition penalty, exact repeatability."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpt2block.sampler import SamplingError, SamplingParams, apply_repetition_penalty, candidates, sample

finite = st.floats(-30, 30, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def logits_rows(draw, max_b=4, max_v=40):
    b = draw(st.integers(1, max_b))
    v = draw(st.integers(1, max_v))
    return draw(arrays(np.float32, (b, v), elements=finite))


def softmax64(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


@settings(max_examples=200, deadline=None)
@given(logits_rows(), st.lists(st.floats(0, 1, exclude_max=True), min_size=4, max_size=4))
def test_greedy_is_argmax(logits, us):
    ids = sample(logits, us[: len(logits)], SamplingParams(temperature=0))
    np.testing.assert_array_equal(ids, np.argmax(logits, axis=-1))
    assert ids.dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(logits_rows(max_b=1), st.integers(1, 60), st.floats(0.05, 5.0))
def test_top_k_keeps_exactly_the_k_largest(logits, k, temperature):
    row = logits[0]
    ids, probs = candidates(row, SamplingParams(temperature=temperature, top_k=k))
    assert len(ids) == min(k, len(row))
    assert len(set(ids.tolist())) == len(ids)
    dropped = np.setdiff1d(np.arange(len(row)), ids)
    if dropped.size:
        assert row[ids].min() >= row[dropped].max()
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(probs) <= 1e-15)  # descending
    # the kept probabilities are the tempered softmax restricted to the kept set
    np.testing.assert_allclose(probs, softmax64(row[ids].astype(np.float64) / temperature), rtol=1e-9, atol=1e-15)


@settings(max_examples=300, deadline=None)
@given(logits_rows(max_b=1), st.floats(0.01, 1.0), st.floats(0.1, 3.0))
def test_top_p_keeps_the_smallest_set_reaching_p(logits, p, temperature):
    row = logits[0]
    ids, probs = candidates(row, SamplingParams(temperature=temperature, top_p=p))
    full = softmax64(row.astype(np.float64) / temperature)  # [V]
    assert len(ids) >= 1
    mass = full[ids].sum()
    assert mass >= p - 1e-9 or len(ids) == len(row)
    assert full[ids[:-1]].sum() < p + 1e-9  # without its least likely member the set falls short: minimal
    # the kept tokens are the most likely ones
    dropped = np.setdiff1d(np.arange(len(row)), ids)
    if dropped.size:
        assert full[ids].min() >= full[dropped].max() - 1e-15
    np.testing.assert_allclose(probs, full[ids] / mass, rtol=1e-9, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(logits_rows(), st.integers(0, 10), st.floats(0.05, 1.0), st.floats(0.1, 3.0),
       st.lists(st.floats(0, 1, exclude_max=True), min_size=4, max_size=4))
def test_sample_draws_only_candidates(logits, k, p, temperature, us):
    params = SamplingParams(temperature=temperature, top_k=k, top_p=p)
    ids = sample(logits, us[: len(logits)], params)
    for b in range(len(logits)):
        allowed, _ = candidates(logits[b], params)
        assert ids[b] in allowed


def test_inverse_cdf_follows_the_distribution():
    rng = np.random.default_rng(0)
    row = rng.normal(0, 2, 30).astype(np.float32)
    params = SamplingParams(temperature=0.7, top_k=12, top_p=0.9)
    ids, probs = candidates(row, params)
    n = 20000
    u = (np.arange(n) + 0.5) / n  # evenly spaced: each token gets its share of u, to one step
    drawn = sample(np.repeat(row[None], n, 0), u, params)
    counts = np.array([(drawn == i).sum() for i in ids])
    assert counts.sum() == n
    np.testing.assert_allclose(counts / n, probs, atol=2.0 / n)


def test_same_seed_same_ids_and_another_seed_differs():
    logits = np.random.default_rng(1).normal(0, 1, (3, 200)).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_k=100, top_p=0.95)

    def run(seed):
        rng = np.random.default_rng(seed)
        return np.stack([sample(logits, rng.random(3), params) for _ in range(20)])

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


def test_repetition_penalty_ctrl_rule():
    logits = np.array([[2.0, -2.0, 3.0, -1.0, 0.5]], np.float32)
    out = apply_repetition_penalty(logits, [[0, 1, 1, 4]], 2.0)
    np.testing.assert_allclose(out, [[1.0, -4.0, 3.0, -1.0, 0.25]])
    np.testing.assert_array_equal(logits, [[2.0, -2.0, 3.0, -1.0, 0.5]])  # input untouched


def test_repetition_penalty_is_per_row_and_changes_greedy():
    logits = np.array([[3.0, 2.0], [3.0, 2.0]], np.float32)
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    ids = sample(logits, [0.0, 0.0], params, history=[[0], [1]])
    np.testing.assert_array_equal(ids, [1, 0])  # row 0: 3/2 < 2; row 1 keeps its argmax


@settings(max_examples=100, deadline=None)
@given(logits_rows(max_b=1), st.floats(1.01, 5.0), st.lists(st.integers(0, 39), max_size=10))
def test_repetition_penalty_never_favours_a_seen_token(logits, penalty, seen):
    seen = [s for s in seen if s < logits.shape[1]]
    out = apply_repetition_penalty(logits, [seen], penalty)
    for i in range(logits.shape[1]):
        if i in seen:
            assert out[0, i] <= logits[0, i]
        else:
            assert out[0, i] == logits[0, i]


@pytest.mark.parametrize("kwargs, word", [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": float("nan")}, "top_p"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"),
])
def test_bad_params_are_refused_by_name(kwargs, word):
    with pytest.raises(SamplingError, match=word):
        SamplingParams(**kwargs)


def test_bad_inputs_are_refused():
    p = SamplingParams()
    with pytest.raises(SamplingError, match="NaN"):
        sample(np.array([[0.0, np.nan]]), [0.5], p)
    with pytest.raises(SamplingError, match=r"\[0, 1\)"):
        sample(np.zeros((1, 3)), [1.0], p)
    with pytest.raises(SamplingError, match="2 random numbers for 1 rows"):
        sample(np.zeros((1, 3)), [0.1, 0.2], p)
    with pytest.raises(SamplingError, match=r"\[batch, vocab\]"):
        sample(np.zeros(3), [0.1], p)
    with pytest.raises(SamplingError, match="-inf"):
        sample(np.full((1, 3), -np.inf), [0.1], p)


def test_masked_tokens_are_never_drawn():
    logits = np.array([[-np.inf, 0.0, -np.inf, 1.0]], np.float32)
    for u in (0.0, 0.3, 0.999999):
        assert sample(logits, [u], SamplingParams(top_k=4)).item() in (1, 3)

"""gpt2block.screen: the LM head's int8 table and the float64 model of the screen's intervals (the
CUDA kernels' math, kernels/lm_screen.cu; tests/gpu/test_lm_screen.py checks the kernels against
this model and against the full head). Fresh random data each run; the seed is in the messages."""

import numpy as np
import pytest

from gpt2block import screen


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("bf16", [False, True])
def test_table_reconstructs_every_row_within_its_error(bf16):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((300, 96)) * rng.uniform(1e-3, 10, (300, 1))).astype(np.float32)
    w[5] = 0.0
    w[7, 3] = np.inf
    w[8, 0] = np.nan
    w[9] = 2.0**-130  # subnormal (in bf16 as well)
    src = _bf16_bits(w) if bf16 else w
    q, rowp = screen.table(src, rows_per_chunk=64)
    exact = (_from_bits(src) if bf16 else w).astype(np.float64)
    assert q.dtype == np.int8 and q.shape == w.shape and rowp.dtype == np.float32 and rowp.shape == (300, 4)
    assert np.abs(q.astype(int)).max() <= 127
    s, err, a, m = (rowp[:, i].astype(np.float64) for i in range(4))
    fin = np.isfinite(exact).all(axis=1)
    assert not fin[7] and not fin[8] and fin.sum() == 298
    assert np.isinf(err[~fin]).all() and (q[~fin] == 0).all()
    resid = np.abs(exact[fin] - s[fin, None] * q[fin]).max(axis=1)
    assert (resid <= err[fin]).all(), f"seed {seed}"
    assert (err[fin] <= np.maximum(s[fin] / 2 * (1 + 1e-6), screen.F32_MIN)).all(), f"seed {seed}"
    # s and d are normal floats (a kernel built with -ftz reads them whole); d is 0 only for an exact row
    assert (s >= screen.F32_MIN).all() and ((err == 0) | (err >= screen.F32_MIN)).all(), f"seed {seed}"
    assert s[9] == screen.F32_MIN and err[9] == screen.F32_MIN and (q[9] == 0).all() and s[5] == 1.0
    np.testing.assert_array_equal(a, np.abs(q.astype(np.int64)).sum(axis=1))
    np.testing.assert_array_equal(m[fin], np.abs(exact[fin]).max(axis=1))
    assert s[5] == 1.0 and err[5] == 0.0 and (q[5] == 0).all()


def test_table_rejects_what_it_cannot_read():
    with pytest.raises(ValueError, match="float32 or bf16 bits"):
        screen.table(np.zeros((3, 8), np.float64))
    with pytest.raises(ValueError, match="2-D"):
        screen.table(np.zeros(8, np.float32))


def test_h_steps_keep_the_integer_sums_in_an_int32():
    for k in (8, 64, 768, 1024, 1280, 1600, 2048):
        p = screen.h_steps(k)
        assert 127 * p * k < 2**31 and p <= 32767
        assert 127 * (p + 1) * k >= 2**31 or p == 32767


def _logits_f32_orders(h: np.ndarray, w: np.ndarray, rng) -> list:
    """float32 logits summed in three orders: numpy's dot, one row after another, a random tree."""
    out = [w.astype(np.float32) @ h.astype(np.float32)]
    acc = np.zeros(w.shape[0], np.float32)
    for k in range(w.shape[1]):
        acc = (acc + w[:, k] * h[k]).astype(np.float32)
    out.append(acc)
    perm = rng.permutation(w.shape[1])
    parts = (w[:, perm] * h[perm]).astype(np.float32)
    while parts.shape[1] > 1:
        if parts.shape[1] % 2:
            parts = np.concatenate([parts, np.zeros((parts.shape[0], 1), np.float32)], axis=1)
        parts = (parts[:, 0::2] + parts[:, 1::2]).astype(np.float32)
    out.append(parts[:, 0])
    return out


@pytest.mark.parametrize("k", [8, 104, 768, 1600])
@pytest.mark.parametrize("bf16", [False, True])
def test_intervals_hold_the_exact_and_the_float32_logits(k, bf16):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n = 2000
    w = (rng.standard_normal((n, k)) * 0.02).astype(np.float32)
    w[:10] *= 50  # rows of other scales
    w[10:20] = np.sign(rng.standard_normal((10, k))).astype(np.float32) * 0.3  # every weight at its row max
    src = _bf16_bits(w) if bf16 else w
    wx = _from_bits(src) if bf16 else w
    q, rowp = screen.table(src)
    for scale, shift in ((1.0, 0.0), (30.0, 0.0), (1e-3, 5.0), (1.0, 0.0)):
        h = (rng.standard_normal(k) * scale + shift).astype(np.float32)
        h[rng.integers(0, k)] *= 100  # an outlier, as trained models' final LayerNorm has
        ub, lb = screen.bounds(h, q, rowp)
        exact = wx.astype(np.float64) @ h.astype(np.float64)
        assert (lb <= exact).all() and (exact <= ub).all(), f"seed {seed}"
        for got in _logits_f32_orders(h, wx, rng):
            assert (lb <= got).all() and (got <= ub).all(), f"seed {seed}"
            assert got.argmax() in screen.candidates(ub, lb), f"seed {seed}"


def test_candidates_are_few_on_a_random_head_and_hold_every_tie():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    k, n = 768, 50257
    w = (rng.standard_normal((n, k)) * 0.02).astype(np.float32)
    h = rng.standard_normal(k).astype(np.float32)
    w[100] = w[40000] = h / np.linalg.norm(h)  # the largest logit, twice
    src = _bf16_bits(w)
    q, rowp = screen.table(src)
    ub, lb = screen.bounds(h, q, rowp)
    cand = screen.candidates(ub, lb)
    assert 100 in cand and 40000 in cand
    assert cand.size < 200, f"seed {seed}: {cand.size} candidates"


def test_a_non_finite_h_makes_every_row_a_candidate():
    rng = np.random.default_rng()
    w = (rng.standard_normal((50, 16)) * 0.02).astype(np.float32)
    q, rowp = screen.table(w)
    for bad in (np.inf, -np.inf, np.nan, 3.3e38):
        h = rng.standard_normal(16).astype(np.float32)
        h[3] = bad
        ub, lb = screen.bounds(h, q, rowp)
        assert np.isposinf(ub).all() and np.isneginf(lb).all()
        assert screen.candidates(ub, lb).size == 50


def test_a_tiny_or_zero_h_makes_every_row_a_candidate_and_an_infinite_row_always_is_one():
    rng = np.random.default_rng()
    w = (rng.standard_normal((20, 16)) * 0.02).astype(np.float32)
    w[4, 2] = -np.inf
    q, rowp = screen.table(w)
    for h in (np.zeros(16, np.float32), np.full(16, 1e-36, np.float32), np.full(16, 2.0**-101, np.float32)):
        ub, lb = screen.bounds(h, q, rowp)
        assert np.isposinf(ub).all() and np.isneginf(lb).all()
    ub, lb = screen.bounds(rng.standard_normal(16).astype(np.float32), q, rowp)
    assert np.isposinf(ub[4]) and np.isneginf(lb[4]) and np.isfinite(np.delete(ub, 4)).all()
    assert 4 in screen.candidates(ub, lb)


def test_intervals_hold_what_flushed_subnormals_leave_of_a_logit():
    """CuPy builds with -ftz: the full head's tiny products and sums may flush to 0. h = 2^-60 everywhere,
    row 0 = 0.9 2^-66 everywhere (each product subnormal: that logit comes out 0), row 1 = 1.5 2^-66 at one
    place (its logit 1.5 2^-126, normal): row 1 wins on the GPU and must stay a candidate."""
    k = 64
    h = np.full(k, 2.0**-60, np.float32)
    w = np.zeros((2, k), np.float32)
    w[0] = 0.9 * 2.0**-66
    w[1, 0] = 1.5 * 2.0**-66
    q, rowp = screen.table(w)
    ub, lb = screen.bounds(h, q, rowp)
    exact = w.astype(np.float64) @ h.astype(np.float64)
    assert lb[0] <= 0.0 <= ub[0] and lb[0] <= exact[0] <= ub[0]
    assert 1 in screen.candidates(ub, lb)

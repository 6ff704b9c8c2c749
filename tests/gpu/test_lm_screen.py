"""The greedy LM head through its int8 screen (kernels/lm_screen.cu via backends/cuda/lm_head.lm_head_screened)
against the full head (gemv_*_nt_ln_m1 with its argmax): the same winner on every width, with ties,
near-ties by the hundred, NaN and infinite logits; every row's interval holds the full head's logit;
the intervals match gpt2block.screen.bounds (the float64 model the CPU tests check)."""

import dataclasses

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from gpt2block import screen  # noqa: E402
from gpt2block.backends.cuda import lm_head as H  # noqa: E402
from gpt2block.backends.cuda import linear as L  # noqa: E402
from gpt2block.backends.cuda import ops as cuda_ops  # noqa: E402


def _case(rng, d, n, kind):
    x = (rng.standard_normal((1, d)) * rng.uniform(0.5, 4.0) + rng.uniform(-3, 3)).astype(np.float32)
    g = rng.uniform(0.8, 1.2, d).astype(np.float32)
    b = (rng.standard_normal(d) * 0.1).astype(np.float32)
    w = (rng.standard_normal((n, d)) * 0.02).astype(np.float32)
    xn = (x[0] - x[0].mean()) / x[0].std() * g + b  # LN(x), near enough to steer the winner
    if kind == "tie" and n > 2:  # the largest logit twice, rows 2 and N - 1: the first wins
        w[2] = w[n - 1] = xn / np.linalg.norm(xn)
    elif kind == "near":  # a few hundred rows (or all) within a hair of each other
        top = xn / np.linalg.norm(xn)
        rows = rng.choice(n, size=min(n, 300), replace=False)
        w[rows] = top + rng.standard_normal((rows.size, d)).astype(np.float32) * 1e-7
    elif kind == "nan_logit" and n > 3:
        w[n // 2, 0] = np.nan  # a NaN logit never wins
        w[1, 3] = np.inf  # an infinite weight: +-inf or NaN, always a candidate
    elif kind == "nan_x":
        x[0, 0] = np.nan  # every logit NaN: index 0
    elif kind == "zero_row":
        w[: n // 2] = 0.0
    return x, w, g, b


def _full_head(x, w, ln):
    """The full head's logits [1, N] (NaN-poisoned first) and its own argmax (gemv_nt's, one token)."""
    logits = cp.full((1, w.shape[0]), cp.nan, cp.float32)
    want = cp.full(1, -1, cp.int32)
    L.gemv_nt(x, w, logits, ln=ln, argmax=(want, None, None))
    return logits, want


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("d,n", [(768, 50257), (1600, 50257), (1024, 1000), (1280, 37), (104, 7), (8, 3),
                                 (2048, 300), (512, 999), (1536, 500)])  # every J = ceil(d / 256), 1 .. 8
@pytest.mark.parametrize("kind", ["random", "tie", "near", "nan_logit", "nan_x", "zero_row"])
def test_screened_head_equals_full_head(wdtype, d, n, kind):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    x, w, g, b = (cp.asarray(a) for a in _case(rng, d, n, kind))
    if wdtype == "bf16":
        w = L.to_bf16_bits(w)
    ln = (g, b, 1e-5)
    logits, want = _full_head(x, w, ln)
    table = H.screen_table(w)
    step_host = np.array([[-1], [3], [7], [8]], np.int32)
    for rep in range(2):  # twice: the ticket went back to 0, the workspace is reused
        ids = cp.full(1, -1, cp.int32)
        step = cp.asarray(step_host)
        mapped = cuda_ops.MappedInts(1)
        mapped.array[:] = -1
        ub_ws = H._screen_workspace(n, d, H._screen_grids(n, d)[0], None)[0]
        ub_ws.fill(cp.nan)  # poisoned: pass 1 writes every row
        H.lm_head_screened(x, table, w, ln, (ids, step, mapped))
        cp.cuda.get_current_stream().synchronize()
        assert int(ids[0]) == int(want[0]), f"seed {seed}: screened {int(ids[0])}, full head {int(want[0])}"
        assert mapped.array[0] == int(want[0])
        np.testing.assert_array_equal(cp.asnumpy(step)[:, 0], [int(want[0]), 3, 8, 9])
    if kind == "tie":
        assert int(want[0]) == 2
    if kind == "nan_x":
        assert int(want[0]) == 0
    # every finite logit of the full head lies in its row's interval; lb_part holds the largest lb
    ub, lb_part, h = H._screen_workspace(n, d, H._screen_grids(n, d)[0], None)
    lg = cp.asnumpy(logits[0])
    u = cp.asnumpy(ub)
    assert not np.isnan(u).any()
    fin = np.isfinite(lg)
    assert (u[fin] >= lg[fin]).all(), f"seed {seed}: a logit above its ub"
    ref_ub, ref_lb = screen.bounds(cp.asnumpy(h), cp.asnumpy(table.q), cp.asnumpy(table.rowp))
    assert (ref_lb[fin] <= lg[fin]).all(), f"seed {seed}: a logit below its lb (model)"
    # the kernel's sums of |h| go in another order: the same intervals to a few ulps
    finite = np.isfinite(ref_ub)
    np.testing.assert_array_equal(np.isfinite(u), finite)
    scale = np.abs(ref_ub[finite]).max() if finite.any() else 1.0
    np.testing.assert_allclose(u[finite], ref_ub[finite], rtol=1e-6, atol=1e-6 * scale)
    L_kernel = float(cp.asnumpy(lb_part).max())
    np.testing.assert_allclose(L_kernel, float(ref_lb.max()), rtol=1e-6, atol=1e-6 * scale)
    cand = screen.candidates(u, np.full(1, L_kernel, np.float32))
    assert int(want[0]) in cand or not np.isfinite(lg).any()
    print(f"{wdtype} d={d} n={n} {kind}: {cand.size} candidates")


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", ["tiny_h", "flushed_products"])
def test_screened_head_at_the_edge_of_underflow(wdtype, case):
    """Values where CuPy's -ftz builds flush: h near 1e-36 (every row a candidate: max|h| < 2^-100), and
    h = 2^-60 with products of 0.9 2^-126 that the full head flushes to 0 while row 1's logit,
    1.5 2^-126, stays (row 1 wins). The screened winner is the full head's."""
    k, n = 64, 50
    rng = np.random.default_rng()
    x = cp.asarray(rng.standard_normal((1, k)).astype(np.float32))
    g = cp.zeros(k, cp.float32)  # h = LN(x) g + b = b
    w = np.zeros((n, k), np.float32)
    if case == "tiny_h":
        bh = np.full(k, 1e-37, np.float32)
        bh[0] = 1e-36
        w[0, :2] = [1.0, -0.5]
        w[1, 0] = 0.9
    else:
        bh = np.full(k, 2.0**-60, np.float32)
        w[0] = 0.9 * 2.0**-66
        w[1, 0] = 1.5 * 2.0**-66
    b = cp.asarray(bh)
    w = cp.asarray(w)
    if wdtype == "bf16":
        w = L.to_bf16_bits(w)
    ln = (g, b, 1e-5)
    _, want = _full_head(x, w, ln)
    ids = cp.full(1, -1, cp.int32)
    H.lm_head_screened(x, H.screen_table(w), w, ln, (ids, None, None))
    assert int(ids[0]) == int(want[0]), f"{case}: screened {int(ids[0])}, full head {int(want[0])}"


def test_screened_head_h_out_is_the_full_heads_layernorm():
    """h (block 0's LN(x)) has the bits of LN(x) as the full head forms it: the logit of a row e_k is h_k."""
    rng = np.random.default_rng()
    d, n = 768, 768
    x = cp.asarray(rng.standard_normal((1, d)).astype(np.float32) + 2)
    g = cp.asarray(rng.uniform(0.8, 1.2, d).astype(np.float32))
    b = cp.asarray((rng.standard_normal(d) * 0.1).astype(np.float32))
    w = cp.eye(d, dtype=cp.float32)
    logits = cp.empty((1, n), cp.float32)
    L.gemv_nt(x, w, logits, ln=(g, b, 1e-5))
    H.lm_head_screened(x, H.screen_table(w), w, (g, b, 1e-5), (cp.zeros(1, cp.int32), None, None))
    h = H._screen_workspace(n, d, H._screen_grids(n, d)[0], None)[2]
    assert cp.array_equal(h.view(cp.uint32), logits[0].view(cp.uint32))


def _special_rows(rng, n, k):
    """float32 rows [n, k] with, besides random rows of every scale: zeros, inf, NaN, subnormals only
    (s clamped to 2^-126), subnormals with normals, rows at, just below and just above 127 2^-126 (where
    s starts to be clamped), exact rows (d = 0), values near the float32 top, and a row of one value."""
    w = (rng.standard_normal((n, k)) * np.exp(rng.uniform(-30, 10, (n, 1)))).astype(np.float32)
    sub = (rng.integers(-(2**23) + 1, 2**23, k) * 2.0**-149).astype(np.float32)
    specials = {
        0: np.zeros(k), 1: np.full(k, np.inf), 2: np.where(np.arange(k) == 3, np.nan, 1.0),
        3: sub, 4: np.where(np.arange(k) % 2 == 0, sub, 1e-30), 5: np.full(k, 127 * 2.0**-126),
        6: sub * 100, 7: rng.integers(-127, 128, k) * 0.5, 8: np.full(k, 3.3e38) * np.sign(rng.standard_normal(k)),
        9: np.full(k, -0.7), 10: np.where(np.arange(k) == k - 1, -np.inf, 0.1),
        11: np.full(k, 126.9 * 2.0**-126), 12: np.full(k, 127.1 * 2.0**-126) * np.sign(rng.standard_normal(k)),
    }
    for r, v in specials.items():
        if r < n:
            w[r] = np.asarray(v, np.float32)
    return w


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("k,n", [(768, 50257), (1600, 3001), (8, 13), (2048, 257), (104, 1)])
def test_screen_table_is_numpys_bit_for_bit(wdtype, k, n):
    """lm_screen_table_* against gpt2block.screen.table on the host (NumPy, float64, no flushing): q and
    every bit of rowp, on random rows of every scale and the edge rows of _special_rows; poisoned outputs."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    w = _special_rows(np.random.default_rng(seed), n, k)
    wd = cp.asarray(w)
    if wdtype == "bf16":
        wd = L.to_bf16_bits(wd)
    host = cp.asnumpy(wd)
    want_q, want_rowp = screen.table(host)
    for shape, dt in (((n, k), cp.int8), ((n, 4), cp.float32)):  # poison: the pool hands these blocks back
        p = cp.empty(shape, dt)
        p.view(cp.uint8).fill(0xFF)  # q = -1, rowp NaN
        del p
    t = H.screen_table(wd)
    got_q, got_rowp = cp.asnumpy(t.q), cp.asnumpy(t.rowp)
    differ = (got_q != want_q).any(axis=1) | (got_rowp.view(np.uint32) != want_rowp.view(np.uint32)).any(axis=1)
    bad = np.nonzero(differ)[0]
    assert bad.size == 0, (f"seed {seed}: {bad.size} rows differ, first {bad[:5]}: kernel {got_rowp[bad[:3]]}"
                           f" numpy {want_rowp[bad[:3]]}")


def test_screened_head_with_a_wider_build():
    """A table built with a larger LM_SCREEN_J than the width needs (screen_table's j) gives the same
    winner; a narrower one is refused."""
    rng = np.random.default_rng()
    x, w, g, b = (cp.asarray(a) for a in _case(rng, 768, 5000, "random"))
    ln = (g, b, 1e-5)
    _, want = _full_head(x, w, ln)
    ids = cp.full(1, -1, cp.int32)
    table = H.screen_table(w, j=8)
    H.lm_head_screened(x, table, w, ln, (ids, None, None))
    assert int(ids[0]) == int(want[0])
    with pytest.raises(ValueError, match="LM_SCREEN_J = 2 takes K up to 512"):
        H.lm_head_screened(x, dataclasses.replace(table, j=2), w, ln, (ids, None, None))
    with pytest.raises(ValueError, match="LM_SCREEN_J = 2 takes K up to 512"):
        H.screen_table(w, j=2)


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("h_scale", [2.0**60, 1.0])
def test_screened_head_on_tiny_and_subnormal_rows(wdtype, h_scale):
    """Heads whose rows the table's clamps touch: subnormal weights only (s clamped to 2^-126; m flushed
    where the screen reads it), rows at, just below and just above 127 2^-126, the rest just above the
    float32 minimum; h = b (g = 0) of about h_scale: at 2^60 the logits are normal floats (the subnormal
    weights flushed by the full head), at 1 the products are near or below 2^-126 and the full head flushes
    many of them. The screened winner is the full head's, and every logit of the full head lies in its row's
    interval (the kernel's ub, and the float64 model's both ends)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    k, n = 64, 300
    w = (rng.standard_normal((n, k)) * 2.0**-124).astype(np.float32)  # just above the minimum
    w[:40] = (rng.integers(-(2**23) + 1, 2**23, (40, k)) * 2.0**-149).astype(np.float32)  # subnormal
    w[40] = np.float32(0.75 * 2.0**-126)
    w[41] = np.float32(127 * 2.0**-126)
    w[42] = np.float32(126.9 * 2.0**-126)
    w[43] = np.float32(127.1 * 2.0**-126)
    x = cp.asarray(rng.standard_normal((1, k)).astype(np.float32))
    g = cp.zeros(k, cp.float32)
    b = cp.asarray((rng.uniform(0.5, 1.0, k) * np.sign(rng.standard_normal(k)) * h_scale).astype(np.float32))
    wd = cp.asarray(w)
    if wdtype == "bf16":
        wd = L.to_bf16_bits(wd)
    ln = (g, b, 1e-5)
    logits, want = _full_head(x, wd, ln)
    table = H.screen_table(wd)
    ids = cp.full(1, -1, cp.int32)
    H.lm_head_screened(x, table, wd, ln, (ids, None, None))
    assert int(ids[0]) == int(want[0]), f"seed {seed}: screened {int(ids[0])}, full head {int(want[0])}"
    ub, lb_part, h = H._screen_workspace(n, k, H._screen_grids(n, k)[0], None)
    lg = cp.asnumpy(logits[0])
    assert (cp.asnumpy(ub) >= lg).all(), f"seed {seed}: a logit above its ub"
    ref_ub, ref_lb = screen.bounds(cp.asnumpy(h), cp.asnumpy(table.q), cp.asnumpy(table.rowp))
    assert (ref_lb <= lg).all() and (ref_ub >= lg).all(), f"seed {seed}: a logit outside the model's interval"


def test_screened_head_bad_arguments():
    x = cp.zeros((1, 64), cp.float32)
    w = cp.zeros((100, 64), cp.float32)
    ln = (cp.ones(64, cp.float32), cp.zeros(64, cp.float32), 1e-5)
    ids = cp.zeros(1, cp.int32)
    t = H.screen_table(w)
    with pytest.raises(ValueError, match="one token"):
        H.lm_head_screened(cp.zeros((2, 64), cp.float32), t, w, ln, (ids, None, None))
    with pytest.raises(ValueError, match="table must be screen_table"):
        H.lm_head_screened(x, H.screen_table(cp.zeros((100, 64), cp.float32)), w, ln, (ids, None, None))
    with pytest.raises(ValueError, match="argmax = "):
        H.lm_head_screened(x, t, w, ln, None)
    with pytest.raises(ValueError, match="K a multiple of 8"):
        H.screen_table(cp.zeros((10, 12), cp.float32))
    with pytest.raises(ValueError, match="K a multiple of 8"):
        H.screen_table(cp.zeros((10, 4096), cp.float32))
    with pytest.raises(ValueError, match="argmax ids must be"):
        H.lm_head_screened(x, t, w, ln, (cp.zeros(3, cp.int32), None, None))
    with pytest.raises(ValueError, match="w must have 32 columns"):
        H.lm_head_screened(cp.zeros((1, 32), cp.float32), t, w, ln, (ids, None, None))

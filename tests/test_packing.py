"""The host tables of a packed prefill pass (backends/cuda/packing.py, plain NumPy), and the chunking of a
batch into passes (base.token_chunks): the attention over a packed pass, run from the tile table the way
attention_prefill_varlen_* reads it, equals each row's attention alone."""

import numpy as np
import pytest

from gpt2block.backends.base import token_chunks
from gpt2block.backends.cuda.build import ATTN_VARLEN_FIELDS
from gpt2block.backends.cuda.packing import packed_ints, varlen_tiles, window_picks

TILE = 64  # the prefill kernels' query tile (attention.TILE)


def test_packed_ints_give_ids_rows_and_positions_from_each_rows_past():
    ids = [[5, 6, 7], [8], [9, 10]]
    got = packed_ints(ids, [4, 0, 2], [0, 17, 3])
    np.testing.assert_array_equal(got, [[5, 6, 7, 8, 9, 10], [4, 4, 4, 0, 2, 2], [0, 1, 2, 17, 3, 4]])
    assert got.dtype == np.int32


@pytest.mark.parametrize("bad", [dict(lengths=[], pasts=[], rows=[]), dict(lengths=[0], pasts=[0], rows=[0]),
                                 dict(lengths=[3], pasts=[-1], rows=[0]), dict(lengths=[3, 4], pasts=[0], rows=[0, 1]),
                                 dict(lengths=[2**31], pasts=[0], rows=[0])])
def test_varlen_tiles_refuses_bad_segments(bad):
    with pytest.raises(ValueError):
        varlen_tiles(bad["lengths"], bad["pasts"], bad["rows"], TILE)


def _attend(q, k, v):  # [s, 64], [n, 64], [n, 64] -> [s, 64], query i sees keys 0 .. n - s + i
    s, n = len(q), len(k)
    z = q @ k.T / 8.0
    z = np.where(np.arange(n)[None, :] <= (n - s + np.arange(s))[:, None], z, -np.inf)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def _kernel_model(table, q, kcache, vcache):
    """What attention_prefill_varlen_* computes from the table (one head): every entry's query tile
    over its row's keys 0 .. past + last query, each packed output row written once."""
    out = np.full_like(q, np.nan)
    written = np.zeros(len(q), int)
    for q_row0, length, past, row, qt in table:
        lo, hi = qt * TILE, min((qt + 1) * TILE, length)
        for i in range(lo, hi):
            keys = past + i + 1
            out[q_row0 + i] = _attend(q[q_row0 + i:q_row0 + i + 1], kcache[row, :keys], vcache[row, :keys])[0]
            written[q_row0 + i] += 1
    assert (written == 1).all(), "every packed query row is written exactly once"
    return out


@pytest.mark.parametrize("lengths, pasts", [([1, 2, 127, 128, 129, 1000], [0] * 6),
                                            ([5, 64, 65], [3, 0, 200]), ([300], [7])])
def test_the_tile_table_computes_each_rows_attention(lengths, pasts):
    rng = np.random.default_rng(len(lengths))
    n_rows, n_ctx = len(lengths) + 2, 1100
    rows = rng.permutation(n_rows)[:len(lengths)]  # rows of the cache in any order
    kcache, vcache = rng.normal(size=(2, n_rows, n_ctx, 64))
    q = rng.normal(size=(sum(lengths), 64))
    table = varlen_tiles(lengths, pasts, rows, TILE)
    assert table.dtype == np.int32 and table.shape == (sum(-(-n // TILE) for n in lengths), ATTN_VARLEN_FIELDS)
    keys = table[:, 2] + np.minimum((table[:, 4] + 1) * TILE, table[:, 1])
    assert (np.diff(keys) <= 0).all(), "heaviest entries first"
    got = _kernel_model(table, q, kcache, vcache)
    start = 0
    for n, past, row in zip(lengths, pasts, rows):  # each row alone: its past keys and its own
        want = _attend(q[start:start + n], kcache[row, :past + n], vcache[row, :past + n])
        np.testing.assert_allclose(got[start:start + n], want, rtol=1e-12, atol=1e-12)
        start += n


def test_window_picks_are_the_rows_before_each_scored_label():
    picks, owner = window_picks([5, 3, 4], [1, 2, 3])
    # window 0 rows 0..4 scores labels 1..4 from rows 0..3; window 1 rows 5..7 label 2 from row 6;
    # window 2 rows 8..11 label 3 from row 10
    np.testing.assert_array_equal(picks, [0, 1, 2, 3, 6, 10])
    np.testing.assert_array_equal(owner, [0, 0, 0, 0, 1, 2])
    with pytest.raises(ValueError, match="at least one label"):
        window_picks([4], [4])
    with pytest.raises(ValueError, match="at least one label"):
        window_picks([4], [0])


@pytest.mark.parametrize("lengths, cap", [([128] * 64, 8192), ([128] * 128, 8192), ([1000, 1, 2, 127, 128, 129], 1024),
                                          ([1024] * 9, 8192), ([3000, 5, 5], 1024), ([1] * 10, 3)])
def test_token_chunks_bound_each_pass(lengths, cap):
    groups = token_chunks(lengths, cap)
    assert [i for g in groups for i in g] == list(range(len(lengths)))  # consecutive, every row once
    for g in groups:
        total = sum(lengths[i] for i in g)
        assert total <= cap or len(g) == 1  # only a row longer than the cap goes alone past it
    for a, b in zip(groups, groups[1:]):  # a group ends only where the next row would not fit
        assert sum(lengths[i] for i in a) + lengths[b[0]] > cap
    assert len(token_chunks([128] * 64, 8192)) == 1 and len(token_chunks([128] * 128, 8192)) == 2

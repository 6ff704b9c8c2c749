"""The host side of a packed prefill pass (plain NumPy: CPU-tested without CuPy).

Several cache rows' new tokens go through the blocks as one activation [T, D], segment after segment.
These build the small int tables that pass uploads:

    packed_ints(id_lists, rows, pasts)          -> int32 [3, T]: each token's id, cache row and position
    varlen_tiles(lengths, pasts, rows, tile)    -> int32 [entries, ATTN_VARLEN_FIELDS]: the attention
                                                   kernel's (segment, query tile) entries, heaviest first
    window_picks(lengths, firsts)               -> the packed rows whose logits a perplexity pass scores,
                                                   and the window each belongs to
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .build import ATTN_VARLEN_FIELDS

INT32_MAX = 2**31 - 1


def _segments(lengths, pasts, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    pasts = np.asarray(pasts, np.int64).reshape(-1)
    rows = np.asarray(rows, np.int64).reshape(-1)
    if not lengths.size or lengths.shape != pasts.shape or lengths.shape != rows.shape:
        raise ValueError(f"lengths, pasts and rows must be non-empty and of one length; got "
                         f"{lengths.size}, {pasts.size}, {rows.size}")
    if lengths.min() < 1 or pasts.min() < 0 or rows.min() < 0:
        raise ValueError("every segment needs at least one token, a past >= 0 and a row >= 0")
    if int((pasts + lengths).max()) > INT32_MAX or int(lengths.sum()) > INT32_MAX or int(rows.max()) > INT32_MAX:
        raise ValueError("a packed pass's positions, rows and tokens must fit 32-bit ints")
    return lengths, pasts, rows


def packed_ints(id_lists: Sequence[Sequence[int]], rows, pasts) -> np.ndarray:
    """int32 [3, T] (T = the lists' tokens together): [0] the ids one list after the other, [1] the cache
    row of each token (rows[i] for list i), [2] its position (pasts[i], pasts[i] + 1, ... for list i)."""
    lengths, pasts, rows = _segments([len(ids) for ids in id_lists], pasts, rows)
    t = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    out = np.empty((3, t), np.int32)
    out[0] = np.concatenate([np.asarray(ids).reshape(-1) for ids in id_lists])
    out[1] = np.repeat(rows, lengths)
    out[2] = np.arange(t) - np.repeat(starts - pasts, lengths)
    return out


def varlen_tiles(lengths, pasts, rows, tile: int) -> np.ndarray:
    """The tile table of attention_prefill_varlen_* (kernels/attention.cu): segment i has lengths[i] new
    tokens (packed one after the other), the first at position pasts[i] of cache row rows[i] ->
    int32 [entries, ATTN_VARLEN_FIELDS], one entry {q_row0, len, past, row, qt} per (segment, query
    tile of ``tile`` queries), those with the most keys to visit first (long ones start first, short
    ones fill in behind them; ties in segment order)."""
    lengths, pasts, rows = _segments(lengths, pasts, rows)
    n_tiles = -(-lengths // tile)  # query tiles per segment
    seg = np.repeat(np.arange(lengths.size), n_tiles)
    qt = np.arange(seg.size) - np.repeat(np.cumsum(n_tiles) - n_tiles, n_tiles)
    q_row0 = np.cumsum(lengths) - lengths
    keys = pasts[seg] + np.minimum((qt + 1) * tile, lengths[seg])  # keys the tile's last query sees
    order = np.argsort(-keys, kind="stable")
    table = np.stack([q_row0[seg], lengths[seg], pasts[seg], rows[seg], qt], axis=1)[order]
    assert table.shape[1] == ATTN_VARLEN_FIELDS
    return np.ascontiguousarray(table, np.int32)


def window_picks(lengths, firsts) -> tuple[np.ndarray, np.ndarray]:
    """Windows packed one after the other, window j of lengths[j] tokens scoring labels firsts[j] ..
    lengths[j] - 1 -> (picks, owner), int64 [sum of lengths[j] - firsts[j]]: the packed rows whose logits
    predict those labels (row first - 1 .. length - 2 of each window) and the window of each."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    firsts = np.asarray(firsts, np.int64).reshape(-1)
    if lengths.shape != firsts.shape or not lengths.size:
        raise ValueError(f"lengths and firsts must be non-empty and of one length; got {lengths.size}, {firsts.size}")
    if (firsts < 1).any() or (firsts >= lengths).any():
        raise ValueError("every window must score at least one label: 1 <= first < length")
    counts = lengths - firsts
    starts = np.cumsum(lengths) - lengths
    owner = np.repeat(np.arange(lengths.size), counts)
    first_pick = np.cumsum(counts) - counts
    picks = np.arange(int(counts.sum())) - np.repeat(first_pick, counts) + np.repeat(starts + firsts - 1, counts)
    return picks, owner

"""The host side of kernels/sampler.cu that needs no GPU: its parameter words and its history rows.

params [SW_WORDS, B] uint32 (row b's word w at [w, b]) carries each row's sampling parameters, seed,
Philox counter and the id to add to its history; history [B, V] int32 holds, per id, how often it was
generated (bits 0-29) and whether it is in the prompt (HISTORY_PROMPT). The word indices mirror the
kernel's enums (tests/test_sampler_params.py reads them from the source). Plain NumPy: the CPU tests
import it.
"""

from __future__ import annotations

import numpy as np

from ...sampler import SamplingBatch

# kernels/sampler.cu's enum SamplerWord
SW_TEMPERATURE, SW_TOP_P, SW_MIN_P = 0, 2, 4  # float64, two words each (low word first)
SW_REPETITION, SW_PRESENCE, SW_FREQUENCY = 6, 7, 8  # float32
SW_TOP_K = 9  # int32
SW_SEED = 10  # uint64, two words
SW_POSITION, SW_SAMPLE = 12, 13  # uint32: the Philox counter's first two words
SW_APPEND = 14  # int32: the id to add to the row's history before its penalties (-1: none)
SW_WORDS = 15
# kernels/sampler.cu's enum SamplerHistory
HISTORY_COUNT_MASK = 0x3FFFFFFF
HISTORY_PROMPT = 0x40000000
NO_APPEND = -1


def _check_out(batch: SamplingBatch, out: np.ndarray) -> int:
    B = batch.batch
    if out.shape != (SW_WORDS, B) or out.dtype != np.uint32:
        raise ValueError(f"params must be uint32 [{SW_WORDS}, {B}]; got {out.dtype} {out.shape}")
    return B


def pack_static(batch: SamplingBatch, out: np.ndarray) -> np.ndarray:
    """The words that change only with the batch into ``out`` [SW_WORDS, B] uint32: each row's parameters
    (temperature 0 for a greedy row) and sample index."""
    B = _check_out(batch, out)
    ps = batch.params
    f64 = np.empty((3, B), np.float64)
    f64[0] = [0.0 if p.greedy else p.temperature for p in ps]
    f64[1] = [p.top_p for p in ps]
    f64[2] = [p.min_p for p in ps]
    words = f64.view(np.uint32).reshape(3, B, 2)  # little-endian: (low, high) per value
    for i, w in enumerate((SW_TEMPERATURE, SW_TOP_P, SW_MIN_P)):
        out[w], out[w + 1] = words[i, :, 0], words[i, :, 1]
    f32 = np.array([[p.repetition_penalty for p in ps], [p.presence_penalty for p in ps],
                    [p.frequency_penalty for p in ps]], np.float32)
    out[SW_REPETITION:SW_FREQUENCY + 1] = f32.view(np.uint32)
    out[SW_TOP_K] = np.array([p.top_k for p in ps], np.int64).clip(0, 2**31 - 1).astype(np.uint32)
    out[SW_SAMPLE] = batch.sample_indices.astype(np.uint32)
    return out


def pack_step(batch: SamplingBatch, positions, out: np.ndarray, append=None) -> np.ndarray:
    """The words of one launch into ``out``: the seeds, positions [B] (each row's Philox position) and
    append [B] (ids for the history, -1 none; default none)."""
    B = _check_out(batch, out)
    positions = np.asarray(positions)
    if positions.shape != (B,):
        raise ValueError(f"positions must hold one value per row ({B}); got shape {positions.shape}")
    if not np.issubdtype(positions.dtype, np.integer):
        raise TypeError(f"positions must be integers; got {positions.dtype}")
    if positions.min() < 0 or positions.max() > 2**32 - 1:
        raise ValueError(f"positions must lie in [0, 2**32 - 1]; got {positions.min()} to {positions.max()}")
    seeds = batch.seeds.astype(np.uint64)
    out[SW_SEED] = (seeds & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[SW_SEED + 1] = (seeds >> np.uint64(32)).astype(np.uint32)
    out[SW_POSITION] = positions.astype(np.uint32)
    add = np.full(B, NO_APPEND, np.int64) if append is None else np.asarray(append, np.int64)
    if add.shape != (B,):
        raise ValueError(f"append must hold one value per row ({B}); got shape {add.shape}")
    out[SW_APPEND] = add.astype(np.int32).view(np.uint32)
    return out


def pack_params(batch: SamplingBatch, positions, out: np.ndarray, append=None) -> np.ndarray:
    """Every word of every row into ``out`` [SW_WORDS, B] uint32 (pack_static, then pack_step)."""
    return pack_step(batch, positions, pack_static(batch, out), append)


def history_row(prompt_ids, output_ids, vocab: int, out: np.ndarray | None = None) -> np.ndarray:
    """One row's history words [vocab] int32: HISTORY_PROMPT on the prompt's ids, plus how often each id
    was generated."""
    row = np.zeros(vocab, np.int32) if out is None else out
    row[:] = 0
    prompt = np.asarray(list(prompt_ids), np.int64)
    output = np.asarray(list(output_ids), np.int64)
    for name, a in (("prompt_ids", prompt), ("output_ids", output)):
        if a.size and (a.min() < 0 or a.max() >= vocab):
            raise ValueError(f"{name} holds an id outside the vocabulary [0, {vocab})")
    if output.size > HISTORY_COUNT_MASK:
        raise ValueError(f"a history of {output.size} generated ids exceeds the {HISTORY_COUNT_MASK} the words count")
    row[prompt] = HISTORY_PROMPT
    if output.size:
        ids, counts = np.unique(output, return_counts=True)
        row[ids] += counts.astype(np.int32)
    return row


class HistoryTracker:
    """What the device history of each row holds, so that each launch adds exactly the id the generation
    loop appended to the batch's output_ids since the last one (SW_APPEND), and a row whose list changed
    in any other way (more than one id, fewer, a different last id) is written afresh (``stale`` rows).
    Only lengths and last ids are compared: the loop appends, it never edits earlier ids."""

    def __init__(self, batch: SamplingBatch):
        self.batch = batch
        self.lengths = [len(o) for o in batch.output_ids]
        self.last = [o[-1] if o else None for o in batch.output_ids]

    def step(self, batch: SamplingBatch) -> tuple[np.ndarray, list[int]]:
        """-> (append [B] int64: each row's one new id, -1 none; the rows to write afresh)."""
        if batch is not self.batch:
            raise ValueError("HistoryTracker.step: a different batch (its histories must be written afresh)")
        B = batch.batch
        append = np.full(B, NO_APPEND, np.int64)
        stale = []
        for b, out in enumerate(batch.output_ids):
            n, n0 = len(out), self.lengths[b]
            prev_last = out[n0 - 1] if 0 < n0 <= n else None
            if n == n0 and (n == 0 or out[-1] == self.last[b]):
                pass
            elif n == n0 + 1 and (n0 == 0 or prev_last == self.last[b]):
                append[b] = int(out[-1])
            else:
                stale.append(b)
            self.lengths[b] = n
            self.last[b] = out[-1] if out else None
        return append, stale

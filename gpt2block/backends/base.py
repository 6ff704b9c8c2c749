"""The interface every backend implements: a Runner over packed weights and its KV cache.

The generation loop, validate, perplexity and solve speak only to this interface.
A Runner is built once per model (weights uploaded once); a Cache is the run
state of a batch of sequences: the KV cache of every layer, allocated once to
n_ctx, and how many tokens each row already holds (its next position).

What a backend must implement: new_cache, prefill, decode. What the generation
loop calls, with default implementations here in terms of those three and the
NumPy sampler (a device backend overrides them to keep the work on the device):

  check_batch(batch)                         refuse a batch whose run state cannot fit,
                                             before anything is allocated (BatchTooLarge)
  prefill_batch(cache, rows, id_lists)       -> last-position logits [len(rows), V]:
                                             variable-length prompts in one pass, each
                                             row's attention causal within itself, its
                                             positions continuing from cache.pos[row]
                                             (0 in a fresh cache); chunked so that memory
                                             stays bounded
  sample_prefill(cache, id_lists, batch)     prefill rows 0..B-1 and draw each row's first
                                             token -> SampleOutput (ids [B]; logprobs [B] and
                                             the top-n when batch asks for them)
  sample_step(cache, tokens, batch)          append tokens [B] and draw each row's next
                                             token -> SampleOutput; only ids (and
                                             log-probabilities) come back, never logits
  sample_rows(cache, rows, tokens, batch)    sample_step on some rows of the cache only (the
                                             server's continuous batching): the other rows
                                             keep their state
  launch_rows(cache, rows, tokens, batch)    sample_rows started: -> RowsDraw, whose result()
                                             is sample_rows' output (a device backend returns
                                             while the device steps)
  sample_logits(logits, batch, positions)    draw each row of host logits [B, V] (a prefill's last logits)
                                             by ``batch`` at ``positions`` -> SampleOutput
  greedy_steps(cache, tokens, max_steps)     greedy decode as a stream of argmax ids

Optional (perplexity.perplexity asks for it, else computes on the host from forward()):

  window_nll_sums(windows)                   for each (ids [L], first): the nll summed over labels
                                             first .. L - 1, every window from position 0 ->
                                             float64 [n] (NaN where the logits hold NaN or +inf)

``batch`` is a sampler.SamplingBatch: per-row SamplingParams, seeds, sample indices
and penalty histories. The token drawn after a row's cache reaches cache.pos[row]
tokens has position cache.pos[row] (the Philox counter's first word), so a device
sampler reads every position from the cache. A device sampler draws from exactly
sampler.distribution() (the contract in sampler.py's docstring).

Lowering cache.pos[row] forgets that row's last tokens: what lies past pos is never read
and is overwritten by the next tokens appended (sample_rows' default relies on this).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from ..config import GPT2Config
from ..sampler import SampleOutput, SamplingBatch, SamplingParams, check_logits

PRECISIONS = ("fp32", "tf32", "bf16")
MAX_ROWS = 1 << 20  # rows of one batch, whatever the memory (the loop keeps a few objects per row)


class ContextFull(RuntimeError):
    """A row would grow past n_ctx positions."""


class BatchTooLarge(ValueError):
    """A batch whose run state cannot fit; the message gives the rows and the memory they need."""


class Cache:
    """Run state of ``batch`` sequences. ``pos[b]``: tokens row b holds (its next position)."""

    def __init__(self, batch: int, n_ctx: int):
        if batch <= 0:
            raise ValueError(f"batch must be positive; got {batch}")
        self.batch = batch
        self.n_ctx = n_ctx
        self.pos = np.zeros(batch, np.int64)

    def check_room(self, row: int, n_new: int) -> None:
        if self.pos[row] + n_new > self.n_ctx:
            raise ContextFull(
                f"row {row} holds {int(self.pos[row])} tokens; {n_new} more would pass the context of {self.n_ctx}"
            )

    def reset(self) -> None:
        self.pos[:] = 0


class Runner(ABC):
    """A model on one backend. All logits come back as float32 NumPy arrays on the host."""

    backend: str  # "numpy" or "cuda"
    precision: str  # one of PRECISIONS
    config: GPT2Config

    @abstractmethod
    def new_cache(self, batch: int) -> Cache:
        """A fresh run state for ``batch`` sequences (KV cache n_layer x 2 x n_ctx x D per row)."""

    @abstractmethod
    def prefill(self, cache: Cache, row: int, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Append ``ids`` to row ``row`` of the cache (its positions continue from cache.pos[row]).

        Returns the logits of the last new position, [vocab], or of every new position,
        [len(ids), vocab], when ``all_logits``.
        """

    @abstractmethod
    def decode(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        """Append one token to every row: tokens [batch] -> logits [batch, vocab]."""

    # ---- what the generation loop calls (defaults: the methods above and the NumPy sampler)

    def state_bytes(self, batch: int) -> int:
        """Bytes of a Cache of ``batch`` rows: the KV cache, n_layer x 2 x n_ctx x n_embd per row."""
        c = self.config
        itemsize = np.dtype(getattr(self, "dtype", np.float32)).itemsize
        return batch * c.n_layer * 2 * c.n_ctx * c.n_embd * itemsize

    def memory_limit(self) -> Optional[int]:
        """Bytes a run state may take (default: this machine's physical memory; None where unknown)."""
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None

    def check_batch(self, batch: int) -> None:
        """Refuse ``batch`` rows before anything is allocated when their run state cannot fit."""
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be a positive int; got {batch!r}")
        need, limit = self.state_bytes(int(batch)), self.memory_limit()
        if batch > MAX_ROWS or (limit is not None and need > limit):
            have = f"{limit / 2**30:.1f} GiB" if limit is not None else "unknown"
            raise BatchTooLarge(f"{batch} rows need {need / 2**30:.3g} GiB of KV cache "
                                f"({self.state_bytes(1) / 2**20:.3g} MiB per row); this {self.backend} "
                                f"backend has {have} (at most {MAX_ROWS} rows)")

    def prefill_batch(self, cache: Cache, rows: Sequence[int], id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """Append id_lists[i] to row rows[i] of the cache, the rows independent of one another (each row's
        attention causal within itself, its positions continuing from cache.pos[row]).

        Returns the logits of each row's last new position, [len(rows), vocab] float32. A backend packs the
        rows into one pass, chunked so that memory stays bounded; the default prefills them one by one.
        """
        rows, id_lists = check_batch_args(cache, rows, id_lists, self.config.vocab_size)
        return np.stack([self.prefill(cache, r, ids) for r, ids in zip(rows, id_lists)])

    def sample_prefill(self, cache: Cache, id_lists: Sequence[Sequence[int]], batch: SamplingBatch) -> SampleOutput:
        """Prefill rows 0 .. B-1 with id_lists and draw each row's first token by ``batch`` (B rows).

        The token drawn has position cache.pos[row] after the prefill. Default: prefill_batch, then the
        NumPy sampler on the host.
        """
        if len(id_lists) != cache.batch or batch.batch != cache.batch:
            raise ValueError(f"sample_prefill needs one prompt and one sampling row per cache row ({cache.batch}); "
                             f"got {len(id_lists)} prompts and {batch.batch} sampling rows")
        logits = self.prefill_batch(cache, range(cache.batch), id_lists)  # [B, V]
        return batch.draw(logits, cache.pos.copy())

    def sample_step(self, cache: Cache, tokens: np.ndarray, batch: SamplingBatch) -> SampleOutput:
        """Append one token to every row (tokens [B]) and draw each row's next token by ``batch``.

        The token drawn for row b has position cache.pos[b] after the step. Only ids and log-probabilities
        come back; a device backend keeps the logits on the device. Default: decode, then the NumPy
        sampler on the host.
        """
        if batch.batch != cache.batch:
            raise ValueError(f"sample_step got {batch.batch} sampling rows for a batch of {cache.batch}")
        return batch.draw(self.decode(cache, tokens), cache.pos.copy())

    def sample_rows(self, cache: Cache, rows: Sequence[int], tokens: np.ndarray, batch: SamplingBatch) -> SampleOutput:
        """sample_step on rows ``rows`` of the cache only: append tokens[i] to row rows[i] and draw its next
        token by row i of ``batch`` (len(rows) rows) -> SampleOutput of len(rows) rows. The other rows
        keep their tokens and positions.

        Default: sample_step itself when ``rows`` are all the rows in order; else sample_step on the whole
        cache, the other rows fed token 0 and drawn greedily, then their positions set back by one (so a
        device sampler's sample_step serves this too). Where another row's context is full, the rows
        are stepped through prefill_batch and the NumPy sampler instead.
        """
        rows, tokens = check_step_rows(cache, rows, tokens, self.config.vocab_size)
        if batch.batch != len(rows):
            raise ValueError(f"sample_rows got {batch.batch} sampling rows for {len(rows)} cache rows")
        if rows == list(range(cache.batch)):
            return self.sample_step(cache, tokens, batch)
        others = np.setdiff1d(np.arange(cache.batch), rows)
        if (cache.pos[others] >= cache.n_ctx).any():
            logits = self.prefill_batch(cache, rows, [[int(t)] for t in tokens])  # [len(rows), V]
            return batch.draw(logits, cache.pos[rows])
        for r in rows:
            cache.check_room(r, 1)
        feed = np.zeros(cache.batch, np.int64)
        feed[rows] = tokens
        out = self.sample_step(cache, feed, _spread(batch, rows, cache.batch))
        cache.pos[others] -= 1
        return _pick(out, rows)

    def launch_rows(self, cache: Cache, rows: Sequence[int], tokens: np.ndarray, batch: SamplingBatch) -> "RowsDraw":
        """sample_rows, started: -> a RowsDraw whose result() is sample_rows' SampleOutput. A device backend queues
        the step and its draw and returns before they are done, so that the host works while the device steps (the
        server's engine waits for step n's ids, launches step n + 1, then does step n's text work). Until result()
        has been called the caller launches no other step on the cache; a prefill may be queued meanwhile (it runs
        after the step). Default: sample_rows, done before it returns."""
        return RowsDraw(self.sample_rows(cache, rows, tokens, batch))

    def sample_logits(self, logits: np.ndarray, batch: SamplingBatch, positions) -> SampleOutput:
        """Draw row b of host logits [B, V] by row b of ``batch`` at position positions[b] (the server's first
        token of a prompt prefilled in chunks). Default: the NumPy sampler; a device backend draws on the device."""
        return batch.draw(logits, positions)

    def generation_cache(self, batch: int) -> Cache:
        """A cache of ``batch`` rows for one generation, emptied (every row at position 0). Default: a new
        one. A backend may hand out the cache of its last generation of the same size again (the CUDA
        backend does: its captured step graphs are kept with it), so a caller uses it until its next call
        of generation_cache and never holds two."""
        return self.new_cache(batch)

    def sample_steps(self, cache: Cache, tokens: np.ndarray, batch: SamplingBatch,
                     max_steps: Optional[int] = None) -> Iterator[np.ndarray]:
        """Sampled decode as a stream: feed ``tokens`` [batch], then each step's drawn ids back in.

        Yields each step's ids [batch] (int64), drawn by ``batch`` as sample_step draws them, at most
        ``max_steps`` steps (None: no limit); it ends after the step that fills some row's context. The
        consumer appends the ids it takes to batch.output_ids before it asks for the next step (the
        penalties' history); every row is fed its own draw, a row the consumer no longer takes included
        (its draws then no longer matter). A backend may run one step ahead of the consumer, its draws fed
        forward on the device (the CUDA backend does, when ``batch`` wants no log-probabilities); closing
        the iterator takes back such a step, as greedy_steps does. Default: sample_step, step by step.
        """
        check_steps(max_steps)
        if batch.batch != cache.batch:
            raise ValueError(f"sample_steps got {batch.batch} sampling rows for a batch of {cache.batch}")
        return self._sample_steps(cache, tokens, batch, max_steps)

    def _sample_steps(self, cache, tokens, batch, max_steps):
        n = 0
        while max_steps is None or n < max_steps:
            tokens = self.sample_step(cache, tokens, batch).ids
            n += 1
            yield tokens
            if (cache.pos >= cache.n_ctx).any():
                return

    def decode_greedy(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        """Append one token to every row and return each row's argmax [batch] (int64)."""
        return np.argmax(check_logits(self.decode(cache, tokens)), axis=-1)

    def greedy_steps(self, cache: Cache, tokens: np.ndarray, max_steps: Optional[int] = None) -> Iterator[np.ndarray]:
        """Greedy decode as a stream: feed ``tokens`` [batch], then each step's argmax back in.

        Yields each step's argmax [batch] (int64), at most ``max_steps`` steps (None: no limit);
        it ends after the step that fills some row's context (so it never raises ContextFull
        past its first step). A backend may run one step ahead of the consumer (the CUDA
        backend does); closing the iterator early, or leaving a ``for`` loop, takes back such a
        step, so the cache then holds exactly the tokens fed for the steps that were yielded.
        """
        check_steps(max_steps)
        return self._greedy_steps(cache, tokens, max_steps)

    def _greedy_steps(self, cache, tokens, max_steps):
        n = 0
        while max_steps is None or n < max_steps:
            tokens = self.decode_greedy(cache, tokens)
            n += 1
            yield tokens
            if (cache.pos >= cache.n_ctx).any():
                return

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """Logits of every position of one sequence from position 0: [len(ids), vocab]."""
        cache = self.new_cache(1)
        return self.prefill(cache, 0, ids, all_logits=True)

    def describe(self) -> str:
        return f"{self.backend} ({self.precision})"


class RowsDraw:
    """launch_rows' answer: result() -> the step's SampleOutput (waiting for it where it is still running); once."""

    __slots__ = ("_out", "_wait")

    def __init__(self, out: Optional[SampleOutput] = None, wait: Optional[Callable[[], SampleOutput]] = None):
        if (out is None) == (wait is None):
            raise ValueError("RowsDraw takes a SampleOutput or a function that waits for one")
        self._out, self._wait = out, wait

    def result(self) -> SampleOutput:
        if self._wait is not None:
            self._out, self._wait = self._wait(), None
        return self._out


def check_steps(max_steps: Optional[int]) -> None:
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise ValueError(f"max_steps must be a positive int or None; got {max_steps!r}")


def check_batch_args(cache: Cache, rows, id_lists, vocab_size: int) -> tuple[list[int], list[np.ndarray]]:
    """prefill_batch's arguments: distinct rows of the cache, one non-empty id list each."""
    rows = [int(r) for r in rows]
    if len(rows) != len(id_lists):
        raise ValueError(f"got {len(rows)} rows and {len(id_lists)} id lists")
    if len(set(rows)) != len(rows):
        raise ValueError("a row appears twice in one prefill_batch")
    for r in rows:
        if not 0 <= r < cache.batch:
            raise ValueError(f"row {r} is outside the cache's batch [0, {cache.batch})")
    return rows, [check_ids(ids, vocab_size) for ids in id_lists]


def check_step_rows(cache: Cache, rows, tokens, vocab_size: int) -> tuple[list[int], np.ndarray]:
    """sample_rows' arguments: distinct rows of the cache, in any order, and one token id each."""
    rows = [int(r) for r in rows]
    if not rows:
        raise ValueError("sample_rows needs at least one row")
    if len(set(rows)) != len(rows):
        raise ValueError("a row appears twice in one sample_rows")
    for r in rows:
        if not 0 <= r < cache.batch:
            raise ValueError(f"row {r} is outside the cache's batch [0, {cache.batch})")
    tokens = check_ids(tokens, vocab_size)
    if tokens.shape[0] != len(rows):
        raise ValueError(f"sample_rows got {tokens.shape[0]} tokens for {len(rows)} rows")
    return rows, tokens


def _spread(batch: SamplingBatch, rows: list[int], B: int) -> SamplingBatch:
    """``batch`` (one sampling row per entry of rows) as a batch of all B cache rows; the others greedy."""
    idle = SamplingParams(temperature=0.0)
    where = {r: i for i, r in enumerate(rows)}
    pick = lambda seq, fill: [seq[where[r]] if r in where else fill for r in range(B)]  # noqa: E731
    seeds = np.zeros(B, np.uint64)
    seeds[rows] = batch.seeds
    indices = np.zeros(B, np.int64)
    indices[rows] = batch.sample_indices
    return SamplingBatch(pick(batch.params, idle), seeds, indices, pick(batch.prompt_ids, [0]),
                         pick(batch.output_ids, []), batch.logprobs, batch.top_logprobs)


def _pick(out: SampleOutput, rows: list[int]) -> SampleOutput:
    """The rows ``rows`` of a whole batch's SampleOutput, in that order."""
    take = lambda a: None if a is None else a[rows]  # noqa: E731
    return SampleOutput(out.ids[rows], take(out.logprobs), take(out.top_ids), take(out.top_logprobs))


def token_chunks(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of consecutive rows grouped so that each group holds at most max_tokens tokens (a longer
    row is a group of its own)."""
    groups, cur, n = [], [], 0
    for i, t in enumerate(lengths):
        if cur and n + t > max_tokens:
            groups.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += t
    if cur:
        groups.append(cur)
    return groups


def check_ids(ids: Sequence[int], vocab_size: int) -> np.ndarray:
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size == 0:
        raise ValueError("no token ids given (an empty prompt starts from <|endoftext|>)")
    if arr.min() < 0 or arr.max() >= vocab_size:
        bad = int(arr[(arr < 0) | (arr >= vocab_size)][0])
        raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    return arr

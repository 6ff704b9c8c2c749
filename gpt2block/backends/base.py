"""The interface every backend implements: a Runner over packed weights and its KV cache.

The generation loop, validate, perplexity and solve speak only to this interface.
A Runner is built once per model (weights uploaded once); a Cache is the run
state of a batch of sequences: the KV cache of every layer, allocated once to
n_ctx, and how many tokens each row already holds (its next position).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterator, Optional, Sequence

import numpy as np

from ..config import GPT2Config

PRECISIONS = ("fp32", "tf32", "bf16")


class ContextFull(RuntimeError):
    """A row would grow past n_ctx positions."""


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

    def decode_greedy(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        """Append one token to every row and return each row's argmax [batch] (int64)."""
        return np.argmax(self.decode(cache, tokens), axis=-1)

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


def check_steps(max_steps: Optional[int]) -> None:
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise ValueError(f"max_steps must be a positive int or None; got {max_steps!r}")


def check_ids(ids: Sequence[int], vocab_size: int) -> np.ndarray:
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if arr.size == 0:
        raise ValueError("no token ids given (an empty prompt starts from <|endoftext|>)")
    if arr.min() < 0 or arr.max() >= vocab_size:
        bad = int(arr[(arr < 0) | (arr >= vocab_size)][0])
        raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    return arr

"""The sampler: next-token ids from logits, given the random numbers to use.

Pure functions. The caller draws one uniform number in [0, 1) per row (from a
numpy Generator seeded by --seed) and passes it in, so a run repeats exactly.

Per row, in the order Hugging Face applies them:
  repetition penalty (CTRL): over the tokens already in the row, logit > 0 is
      divided by the penalty and logit < 0 multiplied by it;
  temperature 0 -> argmax (greedy); otherwise logits / temperature;
  top-k (0 = off): keep the k largest;
  top-p (1 = off): keep the smallest set of the most likely tokens whose mass >= p
      (always at least one token);
  then draw by inverting the cumulative distribution of the kept tokens at u.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


class SamplingError(ValueError):
    """A sampling parameter out of range, or logits the sampler cannot use."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    repetition_penalty: float = 1.0  # 1 = off

    def __post_init__(self):
        t, k, p, r = self.temperature, self.top_k, self.top_p, self.repetition_penalty
        if not _is_number(t) or not np.isfinite(t) or t < 0:
            raise SamplingError(f"temperature must be a finite number >= 0 (0 = greedy); got {t!r}")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
            raise SamplingError(f"top_k must be an integer >= 0 (0 = off); got {k!r}")
        if not _is_number(p) or not (0 < p <= 1):
            raise SamplingError(f"top_p must be in (0, 1] (1 = off); got {p!r}")
        if not _is_number(r) or not np.isfinite(r) or r <= 0:
            raise SamplingError(f"repetition_penalty must be a finite number > 0 (1 = off); got {r!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def apply_repetition_penalty(logits, history, penalty):
    """logits [B, V] -> a penalised copy [B, V]; history[b]: the ids already in row b."""
    if penalty == 1.0 or history is None:
        return logits
    out = np.array(logits, copy=True)
    for b, seen in enumerate(history):
        ids = np.unique(np.asarray(seen, dtype=np.int64))
        if ids.size == 0:
            continue
        z = out[b, ids]
        out[b, ids] = np.where(z > 0, z / penalty, z * penalty)
    return out


def candidates(row_logits, params: SamplingParams):
    """The distribution one row is drawn from: (ids [n], probs [n]) in descending
    probability order, probs summing to 1. row_logits [V], already penalised."""
    V = row_logits.shape[0]
    z = row_logits.astype(np.float64) / params.temperature  # [V]
    k = params.top_k if 0 < params.top_k < V else V
    if k < V:
        ids = np.argpartition(-z, k - 1)[:k]  # the k largest, unordered
    else:
        ids = np.arange(V)
    ids = ids[np.lexsort((ids, -z[ids]))]  # descending logit; ties by id, so runs repeat
    zk = z[ids]
    probs = np.exp(zk - zk[0])
    probs /= probs.sum()  # softmax over the top-k set [n]
    if params.top_p < 1.0:
        cum = np.cumsum(probs)
        n = min(int(np.searchsorted(cum, params.top_p, side="left")) + 1, len(ids))
        ids, probs = ids[:n], probs[:n] / probs[:n].sum()
    return ids, probs


def _draw(probs, u):  # probs [n] summing to 1, u in [0, 1) -> index into probs
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]  # the last entry is exactly 1.0, so u < 1 never runs past the support
    return min(int(np.searchsorted(cdf, u, side="right")), len(probs) - 1)


def check_logits(logits) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 2:
        raise SamplingError(f"logits must be [batch, vocab]; got shape {logits.shape}")
    if np.isnan(logits).any():
        row = int(np.argwhere(np.isnan(logits))[0][0])
        raise SamplingError(f"logits of row {row} contain NaN")
    if np.isposinf(logits).any():
        row = int(np.argwhere(np.isposinf(logits))[0][0])
        raise SamplingError(f"logits of row {row} contain +inf")
    dead = np.isneginf(logits).all(axis=-1)
    if dead.any():
        raise SamplingError(f"every logit of row {int(np.argmax(dead))} is -inf; nothing can be sampled")
    return logits


def sample(logits, u, params: SamplingParams, history: Optional[Sequence[Sequence[int]]] = None) -> np.ndarray:
    """logits [B, V], u [B] uniforms in [0, 1) -> ids [B] (int64).

    history[b]: the ids already in row b (prompt + generated), for the repetition penalty.
    """
    logits = check_logits(logits)
    B = logits.shape[0]
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    if u.shape[0] != B:
        raise SamplingError(f"got {u.shape[0]} random numbers for {B} rows")
    if ((u < 0) | (u >= 1)).any():
        raise SamplingError("random numbers must lie in [0, 1)")
    if history is not None and len(history) != B:
        raise SamplingError(f"got a history of {len(history)} rows for {B} rows of logits")
    logits = apply_repetition_penalty(logits, history, params.repetition_penalty)  # [B, V]
    if params.greedy:
        return np.argmax(logits, axis=-1).astype(np.int64)
    out = np.empty(B, np.int64)
    for b in range(B):
        ids, probs = candidates(logits[b], params)
        out[b] = ids[_draw(probs, u[b])]
    return out

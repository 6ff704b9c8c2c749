"""Sliding-window perplexity, computed the way transformers' perplexity guide does it.

Windows of max_length tokens (n_ctx by default) start every ``stride`` tokens.
In each window the labels of the prefix already scored by the previous window
are masked (-100 in the guide); the window's loss is the mean negative
log-likelihood over its remaining labels after the one-token shift; the guide
weights that mean by (unmasked labels - 1) and divides the weighted sum by the
sum of the weights:

    nll_sum += loss * (valid - 1);  n_tokens += valid - 1;  ppl = exp(nll_sum / n_tokens)

(For windows after the first, the mean is over ``valid`` labels but weighted by
valid - 1: that is the guide's formula, reproduced as it is so the figures agree.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .backends.base import Runner


class PerplexityError(ValueError):
    """A window length, stride or text that perplexity cannot use."""


@dataclass
class Perplexity:
    ppl: float
    avg_nll: float  # nats per scored token (the guide's weighting)
    n_tokens: int  # tokens in the text
    n_windows: int
    max_length: int
    stride: int


def log_softmax(z):  # [T, V] -> [T, V], float64
    z = np.asarray(z, np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def window_loss(logits, ids, trg_len):
    """Mean nll of one window: logits [L, V] of ids [L]; labels before the last trg_len masked.

    After the shift, position i predicts ids[i + 1]; label i + 1 counts when i + 1 >= L - trg_len.
    Returns (mean nll, number of unmasked labels before the shift).
    """
    L = len(ids)
    first = max(L - trg_len, 1)  # label 0 has nothing predicting it
    lp = log_softmax(logits[first - 1:L - 1])  # [L - first, V]
    nll = -lp[np.arange(L - first), np.asarray(ids[first:L])]  # [L - first]
    return float(nll.mean()), min(trg_len, L)


def host_window_nll_sums(runner, wins) -> np.ndarray:
    """For each window (ids [L], first): the sum of the nll of labels first .. L - 1 from runner.forward's logits
    [L, V] on the host, a float64 log-softmax (the reference); NaN where the window's logits hold NaN or +inf."""
    out = np.empty(len(wins), np.float64)
    for i, (chunk, first) in enumerate(wins):
        logits = runner.forward(chunk)  # [L, V]
        if np.isnan(logits).any() or np.isposinf(logits).any():
            out[i] = np.nan
            continue
        loss, _ = window_loss(logits, chunk, len(chunk) - first)
        out[i] = loss * (len(chunk) - first)
    return out


def windows(seq_len: int, max_length: int, stride: int):
    """(begin, end, trg_len) of every window, the guide's loop."""
    prev_end = 0
    for begin in range(0, seq_len, stride):
        end = min(begin + max_length, seq_len)
        yield begin, end, end - prev_end
        prev_end = end
        if end == seq_len:
            break


def perplexity(
    runner: Runner,
    ids: Sequence[int],
    max_length: Optional[int] = None,
    stride: Optional[int] = None,
    on_window: Optional[Callable[[int, int], None]] = None,
) -> Perplexity:
    """Perplexity of the token ids. stride defaults to max_length // 2. The windows' nll sums come from
    runner.window_nll_sums (all windows in one call: a device backend's, logits never leaving the device) where
    the runner has one, else from runner.forward's logits on the host (host_window_nll_sums). ``on_window(n,
    total)`` is called for every window once the sums are in."""
    n_ctx = runner.config.n_ctx
    max_length = n_ctx if max_length is None else max_length
    if not 2 <= max_length <= n_ctx:
        raise PerplexityError(f"max_length must be between 2 and the context ({n_ctx}); got {max_length}")
    stride = max(1, max_length // 2) if stride is None else stride
    if not 1 <= stride <= max_length:
        raise PerplexityError(f"stride must be between 1 and max_length ({max_length}); got {stride}")
    ids = list(ids)
    if len(ids) < 2:
        raise PerplexityError(f"perplexity needs a text of at least 2 tokens; got {len(ids)}")
    spans = list(windows(len(ids), max_length, stride))
    # a window with trg_len < 2 has weight valid - 1 = 0: a one-token tail window scores nothing
    scored = [(n, ids[begin:end], max(end - begin - trg_len, 1)) for n, (begin, end, trg_len) in enumerate(spans)
              if trg_len >= 2]
    on_device = getattr(runner, "window_nll_sums", None)  # the backend's own (cuda), else forward on the host
    sums = (on_device if on_device is not None else lambda w: host_window_nll_sums(runner, w))(
        [(chunk, first) for _, chunk, first in scored])
    nll_sum, n_scored = 0.0, 0
    for (n, chunk, first), total in zip(scored, sums):
        begin, end, trg_len = spans[n]
        if np.isnan(total):
            raise PerplexityError(f"the model's logits in window {n + 1} (tokens {begin} to {end}) are NaN or "
                                  "+inf: its activations overflow (weights that are not usable)")
        if not np.isfinite(total):
            raise PerplexityError(f"window {n + 1} (tokens {begin} to {end}) scores a token the model gives "
                                  "probability 0 (a -inf logit): the perplexity is infinite")
        loss, valid = float(total) / (len(chunk) - first), min(trg_len, len(chunk))  # window_loss's pair
        nll_sum += loss * (valid - 1)
        n_scored += valid - 1
    if on_window is not None:
        for n in range(len(spans)):
            on_window(n + 1, len(spans))
    avg = nll_sum / n_scored
    return Perplexity(float(np.exp(avg)), avg, len(ids), len(spans), max_length, stride)

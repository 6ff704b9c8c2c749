"""The generation loop: prompts -> a batch of rows -> prefill -> batched decode steps.

Rows are prompts x num_samples (row r is prompt r // num_samples, sample
r % num_samples), all in one Cache. Each row is prefilled on its own (its
positions start at 0), then every step decodes one token for every row.

A row stops at <|endoftext|> (reason "eot"), at a user stop string ("stop": the
text is cut before it), after max_new_tokens ("length"), or when its sequence
(prompt + generated) fills the n_ctx positions ("context": no sliding window).
A finished row keeps no more output; it is fed <|endoftext|> to keep the batch
shape until every row is done (its cache is rewound to position 0 when it fills).

Streaming: ``on_token(row, text)`` gets each row's new text as soon as it is
safe: whole UTF-8 characters only, and text that could be the start of a stop
string is held back until it is known not to be one.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from .backends.base import Runner
from .sampler import SamplingParams, sample
from .tokenizer import Tokenizer


class GenerationWarning(UserWarning):
    """A prompt cut to fit the context, or a row stopped by the context."""


@dataclass
class Timing:
    prefill_s: float = 0.0  # every row's prefill
    decode_s: float = 0.0  # the batched decode steps
    prompt_tokens: int = 0  # over all rows
    new_tokens: int = 0  # over all rows, the <|endoftext|> that stopped a row not counted
    first_token_at: float | None = None  # time.perf_counter() when the rows' first tokens were known

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of the whole run (prefill included)."""
        return self.new_tokens / self.total_s if self.total_s > 0 else 0.0


@dataclass
class GenerationResult:
    prompt: str
    sample: int  # index among this prompt's num_samples
    text: str  # the generated text (the prompt not included), cut before a stop string
    token_ids: list[int]  # every generated id, the stopping <|endoftext|> excluded
    prompt_ids: list[int]  # the ids the model saw (after an empty prompt -> [eot] or a cut)
    stop_reason: str  # "eot" | "stop" | "length" | "context"
    stop_string: Optional[str] = None  # which stop string, for stop_reason "stop"
    timing: Timing = field(default_factory=Timing)  # of the whole batch, shared by its rows

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)


def _warn(message: str) -> None:
    warnings.warn(message, GenerationWarning, stacklevel=3)


def check_generation_args(prompts, max_new_tokens, num_samples, stop) -> None:
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a list of str")
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens!r}")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1; got {num_samples!r}")
    for s in stop:
        if not isinstance(s, str) or s == "":
            raise ValueError(f"a stop string must be a non-empty str; got {s!r}")


def prompt_ids(tokenizer: Tokenizer, prompt: str, n_ctx: int, log: Callable[[str], None]) -> list[int]:
    """Encode a prompt: empty -> [eot]; longer than n_ctx - 1 -> its last n_ctx - 1 ids, with a warning."""
    ids = tokenizer.encode(prompt) or [tokenizer.eot_id]
    if len(ids) > n_ctx - 1:
        log(f"the prompt has {len(ids)} tokens; the context holds {n_ctx}: keeping its last {n_ctx - 1} tokens")
        ids = ids[-(n_ctx - 1):]
    return ids


class RowText:
    """One row's streamed text: the decoder, the stop-string search, what is held back."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str]):
        self.decoder = tokenizer.stream_decoder()
        self.stop = tuple(stop)
        self.text = ""  # everything decoded so far
        self.emitted = 0  # characters of self.text already given out
        self.stop_string: Optional[str] = None

    def push(self, token_id: int) -> str:
        """Add one token; return the text now safe to emit. Sets stop_string when one appears."""
        self.text += self.decoder.push(token_id)
        return self._release(final=False)

    def finish(self) -> str:
        """The row ends: decode what is left, release everything not cut by a stop string."""
        self.text += self.decoder.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        # An occurrence never starts inside emitted text: the longest suffix that could
        # begin a stop string is always held back, so search from self.emitted.
        hit = min(((i, s) for s in self.stop if (i := self.text.find(s, self.emitted)) >= 0), default=None)
        if hit is not None:
            i, self.stop_string = hit
            self.text = self.text[:i]
            end = i
        elif final:
            end = len(self.text)
        else:
            end = len(self.text) - self._held_back()
        out = self.text[self.emitted:end]
        self.emitted = max(self.emitted, end)
        return out

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), best, -1):
                if self.text.endswith(s[:n]):
                    best = n
                    break
        return best


@dataclass
class _Row:
    prompt: str
    sample: int
    prompt_ids: list[int]
    text: RowText
    token_ids: list[int] = field(default_factory=list)
    stop_reason: Optional[str] = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None


def generate(
    runner: Runner,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 64,
    params: SamplingParams = SamplingParams(),
    seed: Optional[int] = None,
    stop: Sequence[str] = (),
    num_samples: int = 1,
    on_token: Optional[Callable[[int, str], None]] = None,
    log: Callable[[str], None] = _warn,
) -> list[GenerationResult]:
    """Generate for every prompt x num_samples; results in row order (prompt-major).

    seed: seeds the numpy Generator that draws each step's uniforms (one per row);
    the same seed, prompts and options give the same ids. Greedy (temperature 0)
    draws nothing. ``log`` receives the warnings (default: warnings.warn).
    """
    if isinstance(prompts, str) or isinstance(stop, str):
        raise ValueError("prompts and stop must be lists of str, not a single str")
    prompts, stop = list(prompts), list(stop)
    check_generation_args(prompts, max_new_tokens, num_samples, stop)
    n_ctx, eot = runner.config.n_ctx, tokenizer.eot_id
    rows = []
    for p in prompts:
        ids = prompt_ids(tokenizer, p, n_ctx, log)
        rows += [_Row(p, s, ids, RowText(tokenizer, stop)) for s in range(num_samples)]
    B = len(rows)
    rng = np.random.default_rng(seed)
    timing = Timing(prompt_tokens=sum(len(r.prompt_ids) for r in rows))
    # the repetition penalty's history: prompt + generated, per row
    history = [list(r.prompt_ids) for r in rows] if params.repetition_penalty != 1.0 else None
    use_greedy_kernel = params.greedy and history is None

    t0 = time.perf_counter()
    cache = runner.new_cache(B)
    logits = np.stack([runner.prefill(cache, b, r.prompt_ids) for b, r in enumerate(rows)])  # [B, V]
    timing.prefill_s = time.perf_counter() - t0
    next_ids = sample(logits, rng.random(B) if not params.greedy else np.zeros(B), params, history)  # [B]
    timing.first_token_at = time.perf_counter()

    t0 = time.perf_counter()
    # greedy: the runner's step stream, fed on the device by its own argmax (the CUDA backend
    # queues the next step before this loop takes the current one); started again from the
    # host when it ends (its step budget, or a finished row at the end of its context)
    steps = None
    try:
        while True:
            for b, r in enumerate(rows):
                if not r.done:
                    _take(r, b, int(next_ids[b]), eot, max_new_tokens, n_ctx, history, on_token, log)
            if all(r.done for r in rows):
                break
            if steps is not None:
                ahead = next(steps, None)
                if ahead is not None:
                    next_ids = ahead  # [B]; finished rows' ids are not taken
                    continue
                steps = None
            feed = np.array([eot if r.done else int(next_ids[b]) for b, r in enumerate(rows)], np.int64)  # [B]
            for b, r in enumerate(rows):
                if r.done and cache.pos[b] >= n_ctx:
                    cache.pos[b] = 0  # a finished row's cache is free: rewind it so feeding it never overflows
            if use_greedy_kernel:
                budget = max(max_new_tokens - len(r.token_ids) for r in rows if not r.done)
                steps = runner.greedy_steps(cache, feed, max_steps=budget)
                next_ids = next(steps)  # [B]
            else:
                logits = runner.decode(cache, feed)  # [B, V]
                next_ids = sample(logits, rng.random(B) if not params.greedy else np.zeros(B), params, history)
    finally:
        if steps is not None:
            steps.close()  # a step queued ahead is waited for and taken back
    timing.decode_s = time.perf_counter() - t0
    timing.new_tokens = sum(len(r.token_ids) for r in rows)
    return [
        GenerationResult(r.prompt, r.sample, r.text.text, r.token_ids, r.prompt_ids, r.stop_reason,
                         r.text.stop_string, timing)
        for r in rows
    ]


def _take(r: _Row, b, tok, eot, max_new_tokens, n_ctx, history, on_token, log) -> None:
    """Row b receives its next token: record it, stream its text, decide whether the row stops."""
    if tok == eot:
        r.stop_reason = "eot"
    else:
        r.token_ids.append(tok)
        if history is not None:
            history[b].append(tok)
        piece = r.text.push(tok)
        if piece and on_token is not None:
            on_token(b, piece)
        if r.text.stop_string is not None:
            r.stop_reason = "stop"
            return
        if len(r.token_ids) >= max_new_tokens:
            r.stop_reason = "length"
        elif len(r.prompt_ids) + len(r.token_ids) >= n_ctx:
            r.stop_reason = "context"
            log(f"row {b} filled the context of {n_ctx} tokens ({len(r.prompt_ids)} prompt + "
                f"{len(r.token_ids)} generated); it stops there (no sliding window)")
    if r.done:
        piece = r.text.finish()
        if piece and on_token is not None:
            on_token(b, piece)
        if r.text.stop_string is not None:
            r.stop_reason = "stop"

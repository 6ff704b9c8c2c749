"""The generation loop: prompts -> a batch of rows -> batched prefill -> batched decode steps.

Rows are prompts x num_samples (row r is prompt r // num_samples, sample
r % num_samples), all in one Cache. The rows are prefilled together (each from
position 0) and their first tokens drawn; then every step appends one token to
every row and draws the next (Runner.sample_step), or, for greedy rows without
penalties or log-probabilities, runs the runner's greedy step stream, and for other rows without
log-probabilities its sampled step stream (Runner.sample_steps: each row fed its own draw). Per step
the loop handles ids only: logits stay with the runner.

A row stops at <|endoftext|> (reason "eot"), at a user stop string ("stop": the
text is cut before it) or after max_new_tokens ("length"). A prompt longer than
n_ctx - max_new_tokens keeps its last n_ctx - max_new_tokens tokens (with a
warning), so max_new_tokens is always honoured. A finished row keeps no more
output; it keeps its place in the batch until every row is done (fed <|endoftext|> by the loop, or its
own argmax or draw inside a runner's step stream), its later tokens not taken.

Randomness: row r draws with the seed of its call and sample index r %
num_samples, at the position of the token drawn (sampler.py's Philox contract),
so a row draws the same random numbers whatever the batch around it (and the same tokens, unless
a draw falls within the logits' rounding of a boundary: a batch's kernels may sum in another order).

Streaming: ``generate_iter`` yields (row, text) pieces as soon as they are safe:
whole UTF-8 characters only, and text that could be the start of a stop string is
held back until it is known not to be one.
"""

from __future__ import annotations

import secrets
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from .backends.base import Runner
from .sampler import SamplingBatch, SamplingParams, check_seed, check_top_logprobs
from .tokenizer import Tokenizer

DEFAULT_MAX_NEW_TOKENS = 64  # the CLI's and the API's default


class GenerationWarning(UserWarning):
    """A prompt cut to fit the context."""


@dataclass
class Timing:
    """The figures of one generate call, shared by its rows."""

    prefill_s: float = 0.0  # every row's prefill and first token
    decode_s: float = 0.0  # the batched decode steps
    wall_s: float = 0.0  # the whole call: encoding, prefill, decode, the streamed text
    prompt_tokens: int = 0  # over all rows
    new_tokens: int = 0  # over all rows, the <|endoftext|> that stopped a row not counted
    decode_tokens: int = 0  # new tokens that came from decode steps (the first token of each row did not)
    first_token_at: float | None = None  # time.perf_counter() when the rows' first tokens were known

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def prefill_ms(self) -> float:
        return 1e3 * self.prefill_s

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of prefill and decode."""
        return self.new_tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second of the decode steps alone."""
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


@dataclass
class GenerationResult:
    prompt: str
    sample: int  # index among this prompt's num_samples
    text: str  # the generated text (the prompt not included), cut before a stop string
    token_ids: list[int]  # every generated id, the stopping <|endoftext|> excluded
    prompt_ids: list[int]  # the ids the model saw (after an empty prompt -> [eot] or a cut)
    stop_reason: str  # "eot" | "stop" | "length"
    stop_string: Optional[str] = None  # which stop string, for stop_reason "stop"
    timing: Timing = field(default_factory=Timing)  # of the whole batch, shared by its rows
    seed: Optional[int] = None
    logprobs: Optional[list[float]] = None  # per generated id, its raw log-probability (when asked for)
    top_logprobs: Optional[list[list[tuple[int, float]]]] = None  # per generated id, the top-n (id, logprob)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)


def _warn(message: str) -> None:
    warnings.warn(message, GenerationWarning, stacklevel=4)


def _count(name: str, v, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {type(v).__name__} {v!r}")
    if v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}; got {v!r}")
    return int(v)


def check_max_new_tokens(max_new_tokens, n_ctx: int) -> int:
    """max_new_tokens in [1, n_ctx - 1] (a prompt holds at least one token)."""
    n = _count("max_new_tokens", max_new_tokens)
    if n > n_ctx - 1:
        raise ValueError(f"max_new_tokens must be at most {n_ctx - 1}: the context holds {n_ctx} tokens, the "
                         f"prompt at least one; got {max_new_tokens}")
    return n


def check_text(text, what: str) -> str:
    """A str that encodes to UTF-8 (no lone surrogates); the message gives the character offset."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str; got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid Unicode text: {e.reason} at character {e.start}") from None
    return text


def check_generation_args(prompts, max_new_tokens, num_samples, stop, n_ctx: int) -> tuple[int, int]:
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    for i, p in enumerate(prompts):
        check_text(p, f"prompt {i}")
    for s in stop:
        if not isinstance(s, str) or s == "":
            raise ValueError(f"a stop string must be a non-empty str; got {s!r}")
        check_text(s, "a stop string")
    return check_max_new_tokens(max_new_tokens, n_ctx), _count("num_samples", num_samples)


def prompt_ids(tokenizer: Tokenizer, prompt: str, n_ctx: int, max_new_tokens: int,
               log: Callable[[str], None]) -> list[int]:
    """Encode a prompt: empty -> [eot]; longer than n_ctx - max_new_tokens -> its last n_ctx - max_new_tokens
    ids, with a warning."""
    ids = tokenizer.encode(prompt) or [tokenizer.eot_id]
    room = n_ctx - max_new_tokens
    if len(ids) > room:
        log(f"the prompt has {len(ids)} tokens; the context holds {n_ctx}, {max_new_tokens} of them for new "
            f"tokens: keeping its last {room} tokens")
        ids = ids[-room:]
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
        piece = self.decoder.push(token_id)
        self.text += piece
        if not self.stop:  # nothing to search for or hold back: all of it goes out
            self.emitted = len(self.text)
            return piece
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
    output_ids: list[int]  # the SamplingBatch's history of this row: the loop's token_ids
    logprobs: Optional[list[float]] = None
    top_logprobs: Optional[list] = None
    stop_reason: Optional[str] = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None


ParamsArg = Union[SamplingParams, Sequence[SamplingParams]]


def generate_iter(
    runner: Runner,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    params: ParamsArg = SamplingParams(),
    seed: Optional[int] = None,
    stop: Sequence[str] = (),
    num_samples: int = 1,
    logprobs: Optional[int] = None,
    log: Callable[[str], None] = _warn,
) -> Iterator[tuple[int, str]]:
    """Generate for every prompt x num_samples: an iterator of (row, text) pieces whose return value
    (StopIteration.value; see ``generate``) is the results in row order (prompt-major).

    The arguments are checked, the prompts encoded and the batch checked against the runner's memory
    now; the work runs as the iterator is consumed. params: one SamplingParams, or one per prompt.
    seed: the Philox key of every row (None: a fresh one, given in each result's ``seed``).
    logprobs: None, or n in [0, 20]: each generated id's raw log-probability and the top-n (id, logprob).
    ``log`` receives the warnings (default: warnings.warn).
    """
    if isinstance(prompts, str) or isinstance(stop, str):
        raise TypeError("prompts and stop must be lists of str, not a single str")
    prompts, stop = list(prompts), list(stop)
    n_ctx, eot = runner.config.n_ctx, tokenizer.eot_id
    max_new_tokens, num_samples = check_generation_args(prompts, max_new_tokens, num_samples, stop, n_ctx)
    per_prompt = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    if len(per_prompt) != len(prompts) or not all(isinstance(p, SamplingParams) for p in per_prompt):
        raise TypeError("params must be a SamplingParams or one SamplingParams per prompt")
    seed = secrets.randbits(64) if seed is None else check_seed(seed)
    top_n = None if logprobs is None else check_top_logprobs(logprobs)
    runner.check_batch(len(prompts) * num_samples)

    t_start = time.perf_counter()
    rows, row_params = [], []
    for p, sp in zip(prompts, per_prompt):
        ids = prompt_ids(tokenizer, p, n_ctx, max_new_tokens, log)
        for s in range(num_samples):
            rows.append(_Row(p, s, ids, RowText(tokenizer, stop), [], [] if top_n is not None else None,
                             [] if top_n else None))
            row_params.append(sp)
    batch = SamplingBatch(row_params, [seed] * len(rows), [r.sample for r in rows], [r.prompt_ids for r in rows],
                          [r.output_ids for r in rows], top_n is not None, top_n or 0)
    return _loop(runner, rows, batch, max_new_tokens, eot, seed, top_n is not None, t_start)


def _loop(runner: Runner, rows: list[_Row], batch: SamplingBatch, max_new_tokens: int, eot: int, seed: int,
          want_logprobs: bool, t_start: float):
    B = len(rows)
    timing = Timing(prompt_tokens=sum(len(r.prompt_ids) for r in rows))
    greedy_stream = batch.all_greedy and not batch.penalised and not want_logprobs

    t0 = time.perf_counter()
    cache = runner.generation_cache(B)
    out = runner.sample_prefill(cache, [r.prompt_ids for r in rows], batch)
    timing.prefill_s = time.perf_counter() - t0
    timing.first_token_at = time.perf_counter()
    ids = out.ids  # [B]

    t0 = time.perf_counter()
    # the runner's step stream (greedy: fed by its own argmax; sampled without log-probabilities: by its own
    # draws; the CUDA backend feeds them on the device and queues the next step before this loop takes the
    # current one), started again from the host when it ends; with log-probabilities, step by step
    steps = None
    try:
        while True:
            for b, r in enumerate(rows):
                if not r.done:
                    for piece in _take(r, int(ids[b]), out, b, eot, max_new_tokens):
                        yield b, piece
            if all(r.done for r in rows):
                break
            if steps is not None:
                ahead = next(steps, None)
                if ahead is not None:
                    ids = ahead  # [B]; finished rows' ids are not taken
                    continue
                steps = None
            feed = np.array([eot if r.done else int(ids[b]) for b, r in enumerate(rows)], np.int64)  # [B]
            if greedy_stream or not want_logprobs:
                budget = max(max_new_tokens - len(r.output_ids) for r in rows if not r.done)
                steps = (runner.greedy_steps(cache, feed, max_steps=budget) if greedy_stream
                         else runner.sample_steps(cache, feed, batch, max_steps=budget))
                ids, out = next(steps), None  # [B]
            else:
                out = runner.sample_step(cache, feed, batch)
                ids = out.ids
    finally:
        if steps is not None:
            steps.close()  # a step queued ahead is waited for and taken back
    timing.decode_s = time.perf_counter() - t0
    timing.new_tokens = sum(len(r.output_ids) for r in rows)
    timing.decode_tokens = timing.new_tokens - sum(1 for r in rows if r.output_ids)
    timing.wall_s = time.perf_counter() - t_start
    return [
        GenerationResult(r.prompt, r.sample, r.text.text, r.output_ids, r.prompt_ids, r.stop_reason,
                         r.text.stop_string, timing, seed, r.logprobs, r.top_logprobs)
        for r in rows
    ]


def _take(r: _Row, tok: int, out, b: int, eot: int, max_new_tokens: int) -> list[str]:
    """Row b receives its next token: record it, decide whether the row stops; -> the text to stream."""
    pieces = []
    if tok == eot:
        r.stop_reason = "eot"
    else:
        r.output_ids.append(tok)
        if r.logprobs is not None:
            r.logprobs.append(float(out.logprobs[b]))
        if r.top_logprobs is not None:
            r.top_logprobs.append([(int(i), float(v)) for i, v in zip(out.top_ids[b], out.top_logprobs[b])])
        pieces.append(r.text.push(tok))
        if r.text.stop_string is not None:
            r.stop_reason = "stop"
        elif len(r.output_ids) >= max_new_tokens:
            r.stop_reason = "length"
    if r.done:
        pieces.append(r.text.finish())
        if r.text.stop_string is not None:
            r.stop_reason = "stop"
    return [p for p in pieces if p]


def generate(
    runner: Runner,
    tokenizer: Tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    params: ParamsArg = SamplingParams(),
    seed: Optional[int] = None,
    stop: Sequence[str] = (),
    num_samples: int = 1,
    on_token: Optional[Callable[[int, str], None]] = None,
    log: Callable[[str], None] = _warn,
    logprobs: Optional[int] = None,
) -> list[GenerationResult]:
    """Generate for every prompt x num_samples; results in row order (prompt-major).

    ``on_token(row, text)`` receives the streamed pieces. The rest as in ``generate_iter``.
    """
    pieces = generate_iter(runner, tokenizer, prompts, max_new_tokens, params, seed, stop, num_samples,
                           logprobs, log)
    while True:
        try:
            row, text = next(pieces)
        except StopIteration as done:
            return done.value
        if on_token is not None:
            on_token(row, text)

"""Continuous batching: one thread owns the model and a fixed pool of KV slots; requests join and leave the
running batch at step boundaries.

A Job is one request: its rows (prompts x n samples, row index = prompt * n + sample, as OpenAI numbers
its choices) wait in a bounded FIFO queue until a slot is free. Every step of the engine thread

1. ends the rows of cancelled requests (the client went away) and of requests past their deadline, and
   frees their slots;
2. gives free slots to waiting rows, in arrival order;
3. waits for the decode step launched by the step before, if any, and puts each drawn token into its row's
   output_ids (the penalties' history) and next feed, unless it ends the row (<|endoftext|>, max_tokens);
4. launches the next decode step of every row that has a token to feed (Runner.launch_rows: only those rows
   run, on the CUDA backend as one decode step of those rows with a graph per number of rows, drawn on the
   device, queued and not waited for), each row with its own SamplingParams, seed and stop strings;
5. meanwhile does the text work of the tokens of 3 (detokenization, stop strings: a row stopped by one has
   had its next step launched, whose token is thrown away) and hands them over;
6. prefills at most ``prefill_chunk`` prompt tokens of the admitted rows (a long prompt takes several
   steps, so that the running rows keep receiving tokens between its chunks), and draws each prompt's
   first token when its last chunk is in (Runner.sample_logits: on the device on CUDA), handed over too;
   that token is fed at the next step's launch.

So the host's work of a step overlaps the device's decode of the next one. Each Job gets its pieces through
its callback. A slot is one row of a single Cache of
``max_batch`` rows, made once at start-up; a freed slot's position goes back to 0.

Randomness is sampler.py's contract: row r of a request draws with the request's seed, sample index
r % n and the position of the token drawn, so it draws the same numbers as generate() for the same prompt,
parameters and seed, whatever else runs beside it (and the same tokens unless the logits' last bits,
which the batch's summation order may change, decide a draw). Stop strings and the text held back for them are
generate.RowText's; a row stops at <|endoftext|>, at a stop string (both "stop") or after max_tokens
("length").
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .backends.base import RowsDraw
from .generate import RowText
from .sampler import SamplingBatch, SamplingParams


@dataclass(frozen=True)
class Limits:
    """The server's limits; each is a `gpt2block serve` option of the same name (these defaults are its)."""

    max_batch: int = 64  # KV slots: rows decoded together; also the most rows (prompts x n) of one request
    max_queue: int = 256  # requests waiting for a slot; past it, 429
    request_timeout: float = 600.0  # seconds from arrival to the last token
    max_body_bytes: int = 1 << 20  # request body
    drain_timeout: float = 30.0  # seconds running requests get after SIGTERM
    prefill_chunk: int = 512  # prompt tokens prefilled per engine step


class EngineFull(RuntimeError):
    """The queue holds max_queue requests already."""


class EngineClosed(RuntimeError):
    """The engine drains (or has stopped): it takes no new request."""


class RequestTimeout(RuntimeError):
    """A request ran past the server's request timeout."""


class ShuttingDown(RuntimeError):
    """The server ended the request at the end of its drain deadline."""


@dataclass(slots=True)
class Piece:
    """What one row produced in one step: a token (and the text now safe to stream), or its end."""

    index: int  # the row (choice) index
    text: str
    token: Optional[int] = None  # None: no new token (the row ended at <|endoftext|> or was ended)
    logprob: Optional[float] = None
    top: Optional[list[tuple[int, float]]] = None  # the top-n (id, logprob), most likely first
    finish: Optional[str] = None  # "stop" | "length" when the row ended with this piece


@dataclass
class PromptLogprobs:
    """The prompt's own log-probabilities (echo with logprobs): position 0 has none."""

    index: int
    logprobs: list  # [len(prompt)] float or None
    top: list  # [len(prompt)] list of (id, logprob), or None


@dataclass
class Row:
    job: "Job"
    index: int
    sample: int
    prompt_ids: list[int]
    text: RowText
    output_ids: list[int] = field(default_factory=list)
    slot: int = -1
    prefilled: int = 0  # prompt tokens in the cache
    feed: Optional[int] = None  # the token drawn last, to be appended at the next step
    finish: Optional[str] = None
    last_token_at: float = 0.0
    prompt_lp: Optional[list] = None  # echo with logprobs: per prompt position
    prompt_top: Optional[list] = None
    prev_logits: Optional[np.ndarray] = None  # the logits before the next prompt chunk's first token

    @property
    def done(self) -> bool:
        return self.finish is not None


class Job:
    """One request: rows, their sampling, and where their pieces go (``deliver(list)`` from the engine thread;
    a list of Piece / PromptLogprobs, or an Exception that ends the request)."""

    def __init__(self, prompts: list[list[int]], n: int, params: SamplingParams, max_tokens: int, seed: int,
                 stop: list[str], top_logprobs: Optional[int], prompt_logprobs: bool, tokenizer,
                 deliver: Callable[[object], None], timeout: float):
        self.prompts, self.n, self.stop = prompts, n, stop
        self.params, self.max_tokens, self.seed = params, max_tokens, seed
        self.top_logprobs = top_logprobs  # None: no log-probabilities
        self.prompt_logprobs = prompt_logprobs
        self.deliver = deliver
        self.arrived = time.monotonic()
        self.deadline = self.arrived + timeout
        self.timeout = timeout
        self.cancelled = False  # set from the HTTP side when the client goes away
        self.on_cancel: Optional[Callable[[], None]] = None  # called by cancel() (an engine in another process)
        self.first_token_seen = False
        self.admitted = 0  # rows given a slot so far
        self.tokenizer = tokenizer

    @functools.cached_property
    def rows(self) -> list[Row]:
        """The request's rows, built at their first use, by the engine (their text decoders read the tokenizer's
        tables, which the engine builds at start-up; an HTTP process whose engine runs elsewhere never needs
        them)."""
        return [Row(self, p * self.n + s, s, ids, RowText(self.tokenizer, self.stop))
                for p, ids in enumerate(self.prompts) for s in range(self.n)]

    def cancel(self) -> None:
        self.cancelled = True
        hook, self.on_cancel = self.on_cancel, None
        if hook is not None:
            hook()


class Engine:
    """The batching loop on its own thread. ``load()`` runs on that thread (a GPU backend's state is made
    where it is used) and returns a gpt2block Model; ``metrics`` receives the events it counts."""

    def __init__(self, load: Callable[[], object], max_batch: int, max_queue: int, prefill_chunk: int,
                 metrics=None, log: Callable[[str], None] = lambda m: None,
                 deliver_step: Optional[Callable[[list], None]] = None):
        self._load = load
        # a step's deliveries, [(job, pieces)], handed over in one call (the server wakes its event loop once
        # per step, not once per request); None: each job's deliver(pieces)
        self.deliver_step = deliver_step
        self.max_batch, self.max_queue, self.prefill_chunk = max_batch, max_queue, prefill_chunk
        self.metrics = metrics
        self.log = log
        self.model = None
        self.error: Optional[BaseException] = None  # why loading failed
        self.ready = threading.Event()  # the model is loaded and warm
        self.finished = threading.Event()  # the loop has ended
        self._cv = threading.Condition()
        self._queue: deque[Job] = deque()  # jobs with rows waiting for a slot
        self._slots: list[Optional[Row]] = [None] * max_batch
        self._prefilling: list[Row] = []  # admitted rows whose prompt is not all in, in admission order
        self._last_step: Optional[tuple[list[Row], SamplingBatch]] = None  # the last decode step's rows and batch
        self._flight: Optional[tuple[list[Row], RowsDraw]] = None  # the decode step launched and not yet collected
        self._draining = False
        self._end_at: Optional[float] = None  # drain deadline (time.monotonic)
        self._thread = threading.Thread(target=self._main, name="gpt2block-engine", daemon=True)

    # ---- the HTTP side's calls (any thread)

    def start(self) -> None:
        self._thread.start()

    @property
    def draining(self) -> bool:
        return self._draining

    def queue_depth(self) -> int:
        return len(self._queue)

    def running(self) -> int:
        return sum(s is not None for s in self._slots)

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._draining or self.finished.is_set():
                raise EngineClosed("the server is shutting down")
            waiting = sum(len(j.rows) - j.admitted for j in self._queue)
            free = self._slots.count(None) - waiting
            if len(self._queue) >= self.max_queue and free < len(job.rows):
                raise EngineFull(f"the queue holds {self.max_queue} requests (--max-queue); retry later")
            self._queue.append(job)
            self._gauges()
            self._cv.notify()

    async def asubmit(self, job: Job) -> None:
        """submit, awaited as the server awaits engine_process.RemoteEngine's."""
        self.submit(job)

    async def agauges(self) -> tuple[int, int]:
        """(queue_depth(), running()), awaited as the server awaits engine_process.RemoteEngine's."""
        return self.queue_depth(), self.running()

    def drain(self, deadline_s: float) -> None:
        """Take no new request; queued requests that have no row running yet are refused; the others finish,
        or are ended after ``deadline_s`` seconds; then the loop ends (``finished``)."""
        with self._cv:
            if self._draining:
                return
            self._draining = True
            self._end_at = time.monotonic() + deadline_s
            for job in [j for j in self._queue if j.admitted == 0]:
                self._queue.remove(job)
                job.deliver(EngineClosed("the server is shutting down"))
            self._gauges()
            self._cv.notify()

    def end_now(self) -> None:
        """Drain with no time left: the running requests are ended at the next step (ShuttingDown), then the
        loop ends."""
        self.drain(0.0)
        with self._cv:
            self._end_at = time.monotonic()
            self._cv.notify()

    # ---- the engine thread

    def _main(self) -> None:
        try:
            self.model = self._load()
            runner = self.model.runner
            runner.check_batch(self.max_batch)
            self.cache = runner.new_cache(self.max_batch)
            self._warm()
            self.model.tokenizer.token_texts()  # the detokenizer's tables: built here, not at the first request
        except BaseException as e:  # reported by the server, which exits with it
            self.error = e
            self.finished.set()
            return
        self.eot = self.model.tokenizer.eot_id
        self.ready.set()
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._busy() and not self._draining:
                        self._cv.wait()
                    if self._draining and not self._busy() and not self._queue:
                        return
                try:
                    self._step()
                except Exception as e:  # a fault in one step ends the requests it ran, not the server
                    self.log(f"engine step failed: {type(e).__name__}: {e}")
                    self._fail_running(e)
        finally:
            self.finished.set()

    def _fail_running(self, err: Exception) -> None:
        """End the requests a failed step ran: those holding slots, and those it had finished (their slots
        already free, their last pieces held back in the step's output)."""
        jobs = dict.fromkeys([r.job for r in self._slots if r is not None] + list(getattr(self, "_out", {})))
        self._out = {}
        self._flight = None  # a step in flight is given up (its rows are ended; the device finishes it alone)
        for job in jobs:
            self._end_job(job, err, {})

    def _busy(self) -> bool:
        return any(s is not None for s in self._slots)

    def _warm(self) -> None:
        """A prefill, then two steps of every number of rows the running batch can have (a GPU backend compiles
        its kernels, a long prompt's too, and captures a decode graph per number of rows here, not while
        requests wait; the NumPy backend: one row), then reset."""
        runner = self.model.runner
        numpy = runner.backend == "numpy"
        sizes = (1,) if numpy else range(1, self.max_batch + 1)
        rows = list(range(max(sizes)))
        if not numpy:  # a long prompt's kernels (the GEMMs, tensor-core attention) built and loaded too
            runner.prefill_batch(self.cache, [0], [[0] * min(self.prefill_chunk, self.cache.n_ctx - 2)])
            self.cache.pos[0] = 0
        runner.prefill_batch(self.cache, rows, [[0, 0]] * len(rows))
        for n in sizes:
            b = SamplingBatch([SamplingParams(temperature=0.0)] * n, [0] * n, [0] * n, [[0]] * n)
            self.cache.pos[:n] = 2
            for _ in range(2):
                runner.sample_rows(self.cache, rows[:n], np.zeros(n, np.int64), b)
        runner.sample_logits(np.zeros((1, self.model.config.vocab_size), np.float32),
                             SamplingBatch([SamplingParams(temperature=0.0)], [0], [0], [[0]]), [2])
        self.cache.reset()

    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queue(len(self._queue), self.running())

    def _step(self) -> None:
        now = time.monotonic()
        self._out = out = {}  # Job -> its pieces, delivered after the decode's text work and after the prefill
        self._end_rows(now, out)
        self._admit()
        taken = self._collect()  # the decode step in flight: its ids (waiting for the device)
        self._launch()  # the next decode step, queued before the last one's text work
        if taken is not None:
            self._take(*taken, out)
            self._deliver(out)
            self._out = out = {}
        self._prefill(out)
        self._out = {}
        self._deliver(out)
        with self._cv:
            self._gauges()

    def _deliver(self, out: dict) -> None:
        if not out:
            return
        if self.deliver_step is not None:
            self.deliver_step(list(out.items()))
        else:
            for job, items in out.items():
                job.deliver(items)

    def _end_rows(self, now: float, out: dict) -> None:
        """Free the slots of cancelled requests; end the requests past their deadline or the drain's."""
        with self._cv:
            jobs = list(self._queue) + [r.job for r in self._slots if r is not None]
        for job in dict.fromkeys(jobs):  # each once, in order
            if job.cancelled:
                self._end_job(job, None, out)
            elif self._end_at is not None and now > self._end_at:
                self._end_job(job, ShuttingDown("the server shut down before the request finished"), out)
            elif now > job.deadline:
                self._end_job(job, RequestTimeout(f"the request ran past the server's timeout of {job.timeout:g} s"),
                              out)

    def _end_job(self, job: Job, err: Optional[Exception], out: dict) -> None:
        with self._cv:
            if job in self._queue:
                self._queue.remove(job)
        for row in job.rows:
            self._free(row, "cancelled")
        job.cancelled = True
        out.pop(job, None)
        if err is not None:
            job.deliver(err)

    def _admit(self) -> None:
        with self._cv:
            for slot in range(self.max_batch):
                if not self._queue:
                    break
                if self._slots[slot] is not None:
                    continue
                job = self._queue[0]
                row = job.rows[job.admitted]
                job.admitted += 1
                if job.admitted == len(job.rows):
                    self._queue.popleft()
                row.slot = slot
                self._slots[slot] = row
                self.cache.pos[slot] = 0
                if job.prompt_logprobs:
                    row.prompt_lp, row.prompt_top = [None], [None]
                self._prefilling.append(row)

    def _free(self, row: Row, reason: str) -> None:
        if row.finish is None:
            row.finish = reason
        if row.slot >= 0:
            self._slots[row.slot] = None
            self.cache.pos[row.slot] = 0
            row.slot = -1
        if row in self._prefilling:
            self._prefilling.remove(row)

    def _prefill(self, out: dict) -> None:
        runner = self.model.runner
        budget = self.prefill_chunk
        plain, complete = [], []  # (row, chunk) for prefill_batch; rows whose prompt is now all in, with logits
        for row in list(self._prefilling):
            if budget <= 0:
                break
            chunk = row.prompt_ids[row.prefilled:row.prefilled + budget]
            budget -= len(chunk)
            if row.prompt_lp is not None:  # echo with logprobs: every position's logits
                logits = runner.prefill(self.cache, row.slot, chunk, all_logits=True)  # [len(chunk), V]
                self._prompt_logprobs(row, chunk, logits)
                row.prefilled += len(chunk)
                if row.prefilled == len(row.prompt_ids):
                    complete.append((row, logits[-1]))
            else:
                plain.append((row, chunk))
        if plain:
            logits = runner.prefill_batch(self.cache, [r.slot for r, _ in plain], [c for _, c in plain])  # [k, V]
            for (row, chunk), lg in zip(plain, logits):
                row.prefilled += len(chunk)
                if row.prefilled == len(row.prompt_ids):
                    complete.append((row, lg))
        if not complete:
            return
        rows = [r for r, _ in complete]
        for row in rows:
            self._prefilling.remove(row)
            if row.prompt_lp is not None:
                out.setdefault(row.job, []).append(PromptLogprobs(row.index, row.prompt_lp, row.prompt_top))
        drawn = runner.sample_logits(np.stack([lg for _, lg in complete]), self._batch(rows),
                                     self.cache.pos[[r.slot for r in rows]])
        self._take(self._advance(rows, drawn), drawn, out)

    def _prompt_logprobs(self, row: Row, chunk: list[int], logits: np.ndarray) -> None:
        """Log-probabilities of the chunk's prompt tokens: logits [len(chunk), V] of its positions; the token at
        the chunk's first position is predicted by the previous chunk's last logits."""
        n = row.job.top_logprobs or 0
        if row.prev_logits is None:  # the prompt's first chunk: position 0 has no log-probability
            pairs = zip(logits[:-1], chunk[1:])
        else:
            pairs = zip([row.prev_logits] + list(logits[:-1]), chunk)
        pairs = list(pairs)
        if pairs:
            z = np.stack([lg for lg, _ in pairs]).astype(np.float64)  # [P, V]: log_softmax of every position at once
            m = z.max(axis=1, keepdims=True)
            raw = z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
            toks = np.array([t for _, t in pairs])
            row.prompt_lp.extend(raw[np.arange(len(toks)), toks].tolist())
            for r in raw:
                row.prompt_top.append(_top(r, n))
        row.prev_logits = logits[-1]

    def _batch(self, rows: list[Row]) -> SamplingBatch:
        tops = [r.job.top_logprobs for r in rows if r.job.top_logprobs is not None]
        seeds = np.array([r.job.seed for r in rows], np.uint64)  # integer arrays: checked at once
        return SamplingBatch([r.job.params for r in rows], seeds, np.array([r.sample for r in rows], np.int64),
                             [r.prompt_ids for r in rows], [r.output_ids for r in rows], bool(tops),
                             max(tops, default=0))

    def _collect(self) -> Optional[tuple[list, object]]:
        """The decode step in flight, if any: wait for its ids and _advance its rows -> (taken, drawn) for _take."""
        flight, self._flight = self._flight, None
        if flight is None:
            return None
        rows, draw = flight
        drawn = draw.result()
        return self._advance(rows, drawn), drawn

    def _launch(self) -> None:
        """Queue a decode step of every row that has a token to feed (Runner.launch_rows: on a device backend it
        returns while the device steps; _collect waits for it at the next step)."""
        rows = [r for r in self._slots if r is not None and r.feed is not None and not r.done]
        if not rows:
            return
        feed = np.array([r.feed for r in rows], np.int64)
        for r in rows:
            r.feed = None
        self._flight = (rows, self.model.runner.launch_rows(self.cache, [r.slot for r in rows], feed,
                                                            self._step_batch(rows)))

    def _step_batch(self, rows: list[Row]) -> SamplingBatch:
        """The decode step's SamplingBatch: the last step's object while the same rows run in the same order (its
        output_ids are the rows' own lists, which _take appends to, as the generation loop does), so that a
        device sampler packs the rows' parameters once, not at every step."""
        last = self._last_step
        if last is not None and len(last[0]) == len(rows) and all(a is b for a, b in zip(last[0], rows)):
            return last[1]
        batch = self._batch(rows)
        self._last_step = (rows, batch)
        return batch

    def _advance(self, rows: list[Row], drawn) -> list[tuple[int, Row, int]]:
        """The least each drawn token needs before the next step can be launched: it joins its row's output_ids
        (the penalties' history) and becomes the row's next feed unless it ends the row (<|endoftext|>,
        max_tokens; a stop string is found by _take, after the launch: such a row's next step is thrown away).
        Rows that ended while their step ran (cancelled, timed out, stopped) are left out.
        -> [(index in drawn, row, token)] for _take."""
        eot = self.eot
        taken = []
        for i, (row, tok) in enumerate(zip(rows, np.asarray(drawn.ids).tolist())):
            if row.done:
                continue
            if tok != eot:
                ids = row.output_ids
                ids.append(tok)
                if len(ids) < row.job.max_tokens:
                    row.feed = tok
            taken.append((i, row, tok))
        return taken

    def _take(self, taken: list[tuple[int, Row, int]], drawn, out: dict) -> None:
        """Each row's drawn token (already _advance'd): its text, whether the row stops, its piece."""
        now = time.monotonic()
        m = self.metrics
        eot = self.eot
        made, ttfts, itls = 0, [], []
        for i, row, tok in taken:
            job = row.job
            if tok == eot:
                row.finish = "stop"
                piece = Piece(row.index, "")
            else:
                rt = row.text
                lp = top = None
                if job.top_logprobs is not None:
                    lp = float(drawn.logprobs[i])
                    top = [] if drawn.top_ids is None else [
                        (int(a), float(b)) for a, b in
                        zip(drawn.top_ids[i][:job.top_logprobs], drawn.top_logprobs[i][:job.top_logprobs])]
                piece = Piece(row.index, rt.push(tok), tok, lp, top)
                if rt.stop_string is not None:
                    row.finish = "stop"
                    row.feed = None
                elif len(row.output_ids) >= job.max_tokens:
                    row.finish = "length"
                made += 1
                if not job.first_token_seen:
                    ttfts.append(now - job.arrived)
                    job.first_token_seen = True
                if row.last_token_at:
                    itls.append(now - row.last_token_at)
                row.last_token_at = now
            if row.finish is not None:
                piece.text += row.text.finish()
                piece.finish = row.finish
                self._free(row, row.finish)
            out.setdefault(job, []).append(piece)
        if m is not None and made:
            m.tokens(made, ttfts, itls)


def _top(raw: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n most likely ids of a log-probability row [V], most likely first, ties by lower id (as a stable
    sort of -raw orders them), without sorting the whole row."""
    if n <= 0:
        return []
    t = np.partition(raw, raw.size - n)[raw.size - n]  # the n-th largest value
    ids = np.flatnonzero(raw >= t)
    ids = ids[np.lexsort((ids, -raw[ids]))][:n]
    return [(int(i), float(raw[i])) for i in ids]

"""The server's engine in a process of its own (`gpt2block serve`): the HTTP process's event loop and the engine's
host work (a step's bookkeeping, detokenization, stop strings) would otherwise share one GIL, each waiting for the
other at every switch.

RemoteEngine (in the HTTP process) has the surface of engine.Engine that the server uses: start, ready, finished,
error, draining, drain, end_now, model (the tokenizer and the config, sent by the engine process once loaded),
``await asubmit(job)`` (the engine's own submit answers: EngineFull / EngineClosed) and ``await agauges()`` (the
queue depth and the running rows).
The engine process (``spawn``: nothing inherited, a GPU backend initialised there) runs an engine.Engine over
``load()`` (a picklable callable) and talks through two one-way pipes (requests down a multiprocessing
Connection; the engine's messages up as length-prefixed pickles, which the event loop reads without blocking):

    HTTP -> engine   ("submit", id, request fields)  ("cancel", id)  ("gauges?", key)  ("drain", seconds)
                     ("end_now",)  ("exit",)
    engine -> HTTP   ("ready", tokenizer.json, config) | ("error", exception)   ("submitted", id, None | refusal)
                     ("step", [(id, pieces)], counts)   ("items", id, pieces | exception)
                     ("gauges", key, queue depth, running rows)   ("finished",)

The HTTP process's event loop reads the engine's messages (attach: a reader on the pipe) and hands a step's
deliveries to their responses (``deliver_step``), with no thread of its own in between. The engine process
ignores SIGINT and SIGTERM (the HTTP process drains it); it ends when told to, or when its request pipe closes
(the HTTP process went away). A script that calls server.serve() guards its top level with
``if __name__ == "__main__"`` (spawn imports it again in the engine process).
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import os
import pickle
import signal
import struct
import sys
import threading
from typing import Callable, Optional

from .engine import Engine, EngineClosed, Job, Piece

EXIT_WAIT_S = 10.0  # how long close() waits for the engine process to end before it kills it
READ_BYTES = 1 << 16  # one read of the engine's pipe (a pipe's buffer)
_LENGTH = struct.Struct("<Q")  # a message's length on the engine's pipe
GAUGES_WAIT_S = 2.0  # how long /metrics waits for the engine process's queue depth and running rows
SWITCH_INTERVAL_S = 2e-4  # the GIL switch interval of the server's two processes: each has threads that wait for
# one another (the event loop, the engine), and Python's default of 5 ms would hold a token back that long


class EngineProcessError(RuntimeError):
    """The engine process failed, or ended without being told to."""


class _Counts:
    """The engine's metrics in its process: what its steps counted since the last message, sent with the step (the
    queue depth and running rows are asked for when /metrics is read)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n, self.ttfts, self.itls = 0, [], []

    def tokens(self, n: int, ttfts: list, itls: list) -> None:
        with self.lock:
            self.n += n
            self.ttfts += ttfts
            self.itls += itls

    def queue(self, depth: int, running: int) -> None:
        pass

    def take(self) -> tuple:
        with self.lock:
            out = (self.n, self.ttfts, self.itls)
            self.n, self.ttfts, self.itls = 0, [], []
        return out


def _to_wire(items: list) -> list:
    """A step's pieces for the pipe: each Piece as the tuple of its fields (a tenth of a slotted dataclass's pickling
    time, on both sides); PromptLogprobs as they are."""
    return [(p.index, p.text, p.token, p.logprob, p.top, p.finish) if type(p) is Piece else p for p in items]


def _from_wire(items: list) -> list:
    return [Piece(*p) if type(p) is tuple else p for p in items]


def _sendable(e: BaseException) -> BaseException:
    """e, or a RuntimeError saying what it was when it does not pickle."""
    try:
        pickle.dumps(e)
        return e
    except Exception:
        return EngineProcessError(f"{type(e).__name__}: {e}")


def _frame(msg) -> bytes:
    """A message for the engine's pipe to the HTTP process: its pickle's length (8 bytes), then the pickle."""
    data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def _child(load: Callable[[], object], max_batch: int, max_queue: int, prefill_chunk: int, conn, up_conn) -> None:
    """The engine process's main: an Engine over load(), driven by the HTTP process's messages (``conn``); its own
    messages go out as _frame's on ``up_conn``'s descriptor."""
    up = up_conn.fileno()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    lock = threading.Lock()

    def send(msg) -> None:
        data = memoryview(_frame(msg))
        with lock:
            try:
                while data:
                    data = data[os.write(up, data):]
            except OSError:  # the HTTP process has gone: the main loop sees the pipe closed and ends
                pass

    counts = _Counts()

    def deliver_step(pairs: list) -> None:
        send(("step", [(job.remote_id, _to_wire(items)) for job, items in pairs], counts.take()))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    engine = Engine(load, max_batch, max_queue, prefill_chunk, counts, log, deliver_step)
    engine.start()
    while not engine.ready.wait(0.05):
        if engine.error is not None:
            send(("error", _sendable(engine.error)))
            return
    model = engine.model
    send(("ready", model.tokenizer.to_json_str(), model.config))

    def when_finished():
        engine.finished.wait()
        send(("finished",))

    threading.Thread(target=when_finished, daemon=True).start()
    jobs: dict = {}
    tokenizer = model.tokenizer
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the HTTP process is gone
            engine.end_now()
            break
        kind = msg[0]
        if kind == "submit":
            _, jid, (prompts, n, params, max_tokens, seed, stop, top_logprobs, prompt_logprobs, timeout) = msg

            def deliver(items, jid=jid):
                send(("items", jid, _sendable(items) if isinstance(items, BaseException) else _to_wire(items)))

            job = Job(prompts, n, params, max_tokens, seed, stop, top_logprobs, prompt_logprobs, tokenizer, deliver,
                      timeout)
            job.remote_id = jid
            try:
                engine.submit(job)
            except Exception as e:  # EngineFull, EngineClosed: the HTTP process raises them
                send(("submitted", jid, _sendable(e)))
                continue
            jobs[jid] = job
            send(("submitted", jid, None))
        elif kind == "cancel":
            job = jobs.pop(msg[1], None)
            if job is not None:
                job.cancel()
        elif kind == "gauges?":
            send(("gauges", msg[1], engine.queue_depth(), engine.running()))
        elif kind == "drain":
            engine.drain(msg[1])
        elif kind == "end_now":
            engine.end_now()
        elif kind == "exit":
            engine.end_now()
            break
    engine.finished.wait(EXIT_WAIT_S / 2)


class _ModelInfo:
    """What the HTTP side reads of the model: its tokenizer and config."""

    def __init__(self, tokenizer, config):
        self.tokenizer, self.config = tokenizer, config


class RemoteEngine:
    """engine.Engine's surface, the engine running in a process of its own (the module's docstring)."""

    def __init__(self, load: Callable[[], object], max_batch: int, max_queue: int, prefill_chunk: int,
                 metrics=None, log: Callable[[str], None] = lambda m: None,
                 deliver_step: Optional[Callable[[list], None]] = None):
        self.metrics, self.log, self.deliver_step = metrics, log, deliver_step
        self.model: Optional[_ModelInfo] = None
        self.error: Optional[BaseException] = None
        self.ready = threading.Event()
        self.finished = threading.Event()
        self._draining = False
        self._gauges = (0, 0)
        self._jobs: dict = {}  # id -> Job of the HTTP side, until its request ends
        self._waiting: dict = {}  # id -> (loop, future) of asubmit
        self._ids = itertools.count()
        self._lock = threading.Lock()
        ctx = mp.get_context("spawn")
        # two one-way pipes: requests down through a multiprocessing Connection (blocking writes); the engine's
        # messages up as _frame's, read by the event loop without blocking (an event loop may make a descriptor it
        # watches non-blocking, as uvloop does, under which a Connection cannot read a message in parts)
        child_conn, self._conn = ctx.Pipe(duplex=False)
        self._up_conn, up_w = ctx.Pipe(duplex=False)  # the Connections only carry the descriptors over
        self._up = self._up_conn.fileno()
        self._child_conns = (child_conn, up_w)
        self._proc = ctx.Process(target=_child, args=(load, max_batch, max_queue, prefill_chunk, child_conn, up_w),
                                 name="gpt2block-engine")
        self._loop = None
        self._buf = bytearray()

    # ---- the server's calls

    def start(self) -> None:
        """Start the engine process (its messages wait in the pipe until attach)."""
        self._proc.start()
        for c in self._child_conns:
            c.close()

    def attach(self, loop) -> None:
        """Read the engine's messages on ``loop``, the server's event loop (from its start): a step's deliveries
        reach their responses with no thread in between to share the GIL with (every thread that takes it makes
        the event loop wait for it back after each of its system calls)."""
        self._loop = loop
        os.set_blocking(self._up, False)
        loop.add_reader(self._up, self._readable)

    @property
    def draining(self) -> bool:
        return self._draining

    async def agauges(self) -> tuple[int, int]:
        """(requests waiting for a slot, rows running), asked of the engine process (the last answer when it has
        ended)."""
        if not self.finished.is_set():
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            key = ("gauges", next(self._ids))
            self._waiting[key] = (loop, fut)
            self._send(("gauges?", key))
            try:
                self._gauges = await asyncio.wait_for(fut, GAUGES_WAIT_S)
            except asyncio.TimeoutError:
                self._waiting.pop(key, None)
        return self._gauges

    async def asubmit(self, job: Job) -> None:
        """Hand the job to the engine; raises what the engine's submit raised (EngineFull, EngineClosed)."""
        if self._draining or self.finished.is_set():
            raise EngineClosed("the server is shutting down")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        jid = next(self._ids)
        self._jobs[jid] = job
        self._waiting[jid] = (loop, fut)
        job.on_cancel = lambda: self._cancel(jid)
        self._send(("submit", jid, (job.prompts, job.n, job.params, job.max_tokens, job.seed, job.stop,
                                    job.top_logprobs, job.prompt_logprobs, job.timeout)))
        err = await fut
        if err is not None:
            self._jobs.pop(jid, None)
            raise err

    def drain(self, deadline_s: float) -> None:
        self._draining = True
        self._send(("drain", deadline_s))

    def end_now(self) -> None:
        self._draining = True
        self._send(("end_now",))

    def close(self) -> None:
        """End the engine process (it ends the requests it still runs) and wait for it, EXIT_WAIT_S at most."""
        if not self.ready.is_set():  # still loading (it reads no message until it is ready) or failed
            self._proc.kill()
        self._up_conn.close()  # nobody reads the engine's messages any more: its writes fail rather than wait
        self._send(("exit",))
        self._proc.join(EXIT_WAIT_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(EXIT_WAIT_S)

    # ---- inside

    def _send(self, msg) -> None:
        with self._lock:
            try:
                self._conn.send(msg)
            except (OSError, ValueError):  # the engine process has ended: the reader reports it
                pass

    def _cancel(self, jid: int) -> None:
        if self._jobs.pop(jid, None) is not None:
            self._send(("cancel", jid))

    def _readable(self) -> None:
        """The engine's pipe has data: read what is there, take every whole message (a long one, the tokenizer
        that comes with "ready", arrives over several reads)."""
        buf = self._buf
        try:
            while True:
                data = os.read(self._up, READ_BYTES)
                if not data:
                    self._loop.remove_reader(self._up)
                    self._lost()
                    return
                buf += data
                if len(data) < READ_BYTES:
                    break
        except BlockingIOError:
            pass
        except OSError:
            self._loop.remove_reader(self._up)
            self._lost()
            return
        head = _LENGTH.size
        at = 0
        while len(buf) - at >= head:
            (n,) = _LENGTH.unpack_from(buf, at)
            if len(buf) - at - head < n:
                break
            msg = pickle.loads(memoryview(buf)[at + head:at + head + n])
            at += head + n
            try:
                self._take(msg)
            except Exception as e:  # a bug here must not stop the deliveries of every other request
                self.log(f"engine message {msg[0]!r} failed: {type(e).__name__}: {e}")
        del buf[:at]

    def _take(self, msg) -> None:
        kind = msg[0]
        if kind == "step":
            get = self._jobs.get  # a request that ended meanwhile (the event loop pops it) is left out
            pairs = [(job, _from_wire(items)) for job, items in ((get(jid), items) for jid, items in msg[1])
                     if job is not None]
            if pairs:
                if self.deliver_step is not None:
                    self.deliver_step(pairs)
                else:
                    for job, items in pairs:
                        job.deliver(items)
            n, ttfts, itls = msg[2]
            if n and self.metrics is not None:
                self.metrics.tokens(n, ttfts, itls)
        elif kind == "gauges":
            _resolve(self._waiting.pop(msg[1])[1], msg[2:])
        elif kind == "items":
            job = self._jobs.get(msg[1])
            if job is not None:
                job.deliver(msg[2] if isinstance(msg[2], BaseException) else _from_wire(msg[2]))
        elif kind == "submitted":
            _resolve(self._waiting.pop(msg[1])[1], msg[2])
        elif kind == "ready":
            from .tokenizer import Tokenizer

            self.model = _ModelInfo(Tokenizer.from_json_str(msg[1], "the engine's tokenizer"), msg[2])
            self.ready.set()
        elif kind == "error":
            self.error = msg[1]
            self.finished.set()
        elif kind == "finished":
            self.finished.set()

    def _lost(self) -> None:
        """The pipe closed: the engine process has ended. Requests still waiting get an error."""
        self._proc.join(1.0)  # its exit status
        if not self.finished.is_set() and self.error is None and self.ready.is_set():
            err = EngineProcessError(f"the engine process ended (exit status {self._proc.exitcode})")
            if not self._draining:
                self.error = err
            for job in list(self._jobs.values()):
                job.deliver(err)
            for key, (_, fut) in list(self._waiting.items()):  # submits get a refusal, gauges the last ones
                _resolve(fut, self._gauges if isinstance(key, tuple) else EngineClosed(str(err)))
        elif self.error is None and not self.ready.is_set():
            self.error = EngineProcessError(f"the engine process ended while loading (exit status "
                                            f"{self._proc.exitcode})")
        self.finished.set()


def _resolve(fut, err) -> None:
    if not fut.done():
        fut.set_result(err)


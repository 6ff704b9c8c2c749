"""The continuous-batching engine in-process (NumPy backend, a tiny checkpoint): chunked prefill keeps the running
rows stepping, the request timeout, a fault in a step, the bounded queue."""

import threading
import time

import pytest

import gpt2block
from gpt2block.engine import Engine, EngineClosed, EngineFull, Job, Piece, RequestTimeout
from gpt2block.sampler import SamplingParams

from hf_checkpoints import make_hf_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_hf_checkpoint(tmp_path_factory.mktemp("engine") / "ckpt", 2, 64, 1, vocab_size=512,
                              n_positions=1024, seed=5).path
    return gpt2block.load(str(path), backend="numpy")


class Inbox:
    """A job's deliveries, in order, with the time each came."""

    def __init__(self):
        self.items, self.done = [], threading.Event()

    def __call__(self, items):
        self.items.append(items)
        if isinstance(items, BaseException) or any(isinstance(p, Piece) and p.finish for p in items):
            self.done.set()

    def text(self) -> str:
        return "".join(p.text for batch in self.items if isinstance(batch, list) for p in batch)


def job(model, prompt_ids, inbox, max_tokens=20, seed=0, timeout=60.0, params=SamplingParams(0.9)):
    return Job([prompt_ids], 1, params, max_tokens, seed, [], None, False, model.tokenizer, inbox, timeout)


@pytest.fixture
def engine(model):
    e = Engine(lambda: model, 4, 2, 8)
    e.start()
    assert e.ready.wait(30)
    yield e
    e.drain(0)
    assert e.finished.wait(30)


def test_running_rows_step_between_the_chunks_of_a_long_prompt(engine, model):
    a, b = Inbox(), Inbox()
    engine.submit(job(model, model.encode("Short"), a, max_tokens=300))
    while not a.items:
        time.sleep(0.001)
    long_ids = model.encode("A long prompt goes on and on. " * 12)
    assert len(long_ids) > 10 * 8
    engine.submit(job(model, long_ids, b, max_tokens=4, seed=1))
    assert b.done.wait(30)
    steps_before_b = len(a.items)
    assert a.done.wait(30)
    # while b's prompt went in, 8 tokens a step, a received a token at every step
    assert steps_before_b >= len(long_ids) // 8
    assert a.text() == model.generate("Short", 300, temperature=0.9, seed=0).text
    assert b.text() == model.generate("A long prompt goes on and on. " * 12, 4, temperature=0.9, seed=1).text
    assert engine.running() == 0 and engine.queue_depth() == 0


def test_a_request_past_its_timeout_is_ended_and_frees_its_slot(engine, model):
    inbox = Inbox()
    engine.submit(job(model, model.encode("Slow"), inbox, max_tokens=1000, timeout=0.05))
    assert inbox.done.wait(30)
    assert isinstance(inbox.items[-1], RequestTimeout) and "timeout of 0.05 s" in str(inbox.items[-1])
    time.sleep(0.05)
    assert engine.running() == 0


def test_a_fault_in_a_step_ends_its_requests_and_the_engine_goes_on(engine, model, monkeypatch):
    inbox = Inbox()
    real = model.runner.launch_rows

    def broken(*a, **k):
        raise RuntimeError("device fault")

    monkeypatch.setattr(model.runner, "launch_rows", broken)
    engine.submit(job(model, model.encode("Hello"), inbox))
    assert inbox.done.wait(30) and isinstance(inbox.items[-1], RuntimeError)
    monkeypatch.setattr(model.runner, "launch_rows", real)
    again = Inbox()
    engine.submit(job(model, model.encode("Hello"), again, max_tokens=5))
    assert again.done.wait(30) and again.text() == model.generate("Hello", 5, temperature=0.9, seed=0).text


def test_a_fault_in_a_step_also_answers_the_requests_that_step_admitted(engine, model, monkeypatch):
    """B is admitted in the step whose launch of A's decode then fails: B hears back (the step's error) instead of
    waiting forever."""
    a, b = Inbox(), Inbox()
    engine.submit(job(model, model.encode("Running"), a, max_tokens=1000))
    while not a.items:
        time.sleep(0.001)

    def broken(*args, **kw):
        raise RuntimeError("device fault")

    with engine._cv:  # the engine waits at its next step's first lock: B is queued when the step starts
        monkeypatch.setattr(model.runner, "launch_rows", broken)
        engine.submit(job(model, model.encode("Done at once"), b, max_tokens=1))
    assert a.done.wait(30) and isinstance(a.items[-1], RuntimeError)
    assert b.done.wait(30)
    assert engine.running() == 0


def test_a_fault_when_a_step_is_collected_ends_its_requests_and_the_engine_goes_on(engine, model, monkeypatch):
    """The device fails while the step runs (RowsDraw.result raises, as a SamplingError from the device sampler
    would): its requests end with that error, the next request runs."""
    from gpt2block.backends.base import RowsDraw

    def failing(*a, **k):
        def wait():
            raise RuntimeError("the step failed on the device")
        return RowsDraw(wait=wait)

    inbox = Inbox()
    monkeypatch.setattr(model.runner, "launch_rows", failing)
    engine.submit(job(model, model.encode("Hello"), inbox))
    assert inbox.done.wait(30) and isinstance(inbox.items[-1], RuntimeError)
    assert "on the device" in str(inbox.items[-1])
    monkeypatch.undo()
    again = Inbox()
    engine.submit(job(model, model.encode("Hello"), again, max_tokens=5))
    assert again.done.wait(30) and again.text() == model.generate("Hello", 5, temperature=0.9, seed=0).text
    assert engine.running() == 0


def test_the_next_step_is_launched_before_the_last_ones_tokens_are_handed_over(model, monkeypatch):
    """Every decoded token reaches its request after the launch of the step that follows it (the host's text work
    overlaps the device's step), and the tokens are generate()'s, a stop string's included: the row that stopped
    had its next step launched, whose token is thrown away."""
    from gpt2block.backends.base import RowsDraw

    events = []
    real = model.runner.launch_rows

    def launch(*a, **k):
        events.append("launch")
        draw = real(*a, **k)
        return RowsDraw(wait=lambda: (events.append("result"), draw.result())[1])

    monkeypatch.setattr(model.runner, "launch_rows", launch)
    e = Engine(lambda: model, 2, 2, 64)
    e.start()
    assert e.ready.wait(30)
    whole = model.generate("Hello", 12, temperature=0.9, seed=3).text
    stop = whole[len(whole) // 2:len(whole) // 2 + 2]  # met mid-way: the row stops before its max_tokens
    want = model.generate("Hello", 12, temperature=0.9, seed=3, stop=[stop])
    assert want.stop_reason == "stop" and len(want.token_ids) < 12
    want_len = model.generate("Hi there", 7, temperature=0.9, seed=4)
    events.clear()  # the warm-up's steps
    a, b = Inbox(), Inbox()

    def tap(inbox):
        def deliver(items):
            events.append("deliver")
            inbox(items)
        return deliver

    ja = Job([model.encode("Hello")], 1, SamplingParams(0.9), 12, 3, [stop], None, False, model.tokenizer, tap(a),
             60.0)
    jb = Job([model.encode("Hi there")], 1, SamplingParams(0.9), 7, 4, [], None, False, model.tokenizer, tap(b),
             60.0)
    with e._cv:
        e.submit(ja)
        e.submit(jb)
    assert a.done.wait(30) and b.done.wait(30)
    e.drain(0)
    assert e.finished.wait(30)
    assert a.text() == want.text and a.items[-1][-1].finish == "stop"
    assert b.text() == want_len.text and b.items[-1][-1].finish == "length"
    # a decode step's tokens are handed over after the next step's launch, except at the last step (no row left)
    before_launch, after_launch = 0, 0
    last_result = None
    for k, ev in enumerate(events):
        if ev == "result":
            last_result = k
        elif ev == "deliver" and last_result is not None:
            if "launch" in events[last_result:k]:
                after_launch += 1
            else:
                before_launch += 1
            last_result = None
    assert after_launch >= 5 and before_launch <= 1, events
    # the stopped row's step after its stop was launched and is not waited for until the engine steps again
    assert events.count("launch") - events.count("result") in (0, 1)


def test_the_queue_is_bounded_and_a_drain_refuses_what_has_not_started(model):
    e = Engine(lambda: model, 1, 1, 64)
    e.start()
    assert e.ready.wait(30)
    first, second = Inbox(), Inbox()
    e.submit(job(model, model.encode("One"), first, max_tokens=1000))
    while e.running() == 0:
        time.sleep(0.001)
    e.submit(job(model, model.encode("Two"), second))
    with pytest.raises(EngineFull, match="--max-queue"):
        e.submit(job(model, model.encode("Three"), Inbox()))
    e.drain(0.2)
    assert second.done.wait(5) and isinstance(second.items[-1], EngineClosed)
    with pytest.raises(EngineClosed):
        e.submit(job(model, model.encode("Four"), Inbox()))
    assert e.finished.wait(30) and first.done.is_set()  # ended at the drain deadline


def test_top_n_equals_a_stable_sort_with_ties():
    import numpy as np

    from gpt2block.engine import _top

    rng = np.random.default_rng(0)
    for _ in range(200):
        v = int(rng.integers(5, 300))
        n = min(int(rng.integers(0, 21)), v)
        row = np.round(rng.normal(size=v), 1)  # many ties
        assert _top(row, n) == [(int(i), float(row[i])) for i in np.argsort(-row, kind="stable")[:n]]


def test_a_jobs_rows_are_built_where_the_engine_runs_it(model):
    """Job builds its rows (their text decoders read the tokenizer's tables) at their first use: the HTTP process,
    whose engine runs in another process, never builds the tables (half a second at its first request)."""

    class NoTables:
        eot_id = model.tokenizer.eot_id

        def stream_decoder(self):
            raise AssertionError("the rows were built")

    j = Job([[1, 2], [3]], 2, SamplingParams(0.9), 5, 0, [], None, False, NoTables(), Inbox(), 60.0)
    assert j.prompts == [[1, 2], [3]] and j.n == 2 and j.stop == []
    with pytest.raises(AssertionError, match="the rows were built"):
        j.rows
    real = Job([[1, 2], [3]], 2, SamplingParams(0.9), 5, 0, [], None, False, model.tokenizer, Inbox(), 60.0)
    assert [(r.index, r.sample, r.prompt_ids) for r in real.rows] == [(0, 0, [1, 2]), (1, 1, [1, 2]), (2, 0, [3]),
                                                                      (3, 1, [3])]


def _not_loaded():
    raise AssertionError("the engine process is not started in this test")


def test_the_engines_messages_are_read_whole_from_a_non_blocking_pipe():
    """The HTTP process reads the engine's pipe without blocking (uvloop makes a watched descriptor non-blocking):
    a message that arrives over several reads (the tokenizer with "ready" is megabytes) is taken once whole, in
    order with the next."""
    import os
    import types

    from gpt2block.engine_process import RemoteEngine, _frame

    e = RemoteEngine(_not_loaded, 1, 1, 8)
    r, w = os.pipe()
    os.set_blocking(r, False)
    e._up, e._loop = r, types.SimpleNamespace(remove_reader=lambda fd: None)
    got = []
    e._take = got.append
    big, small = ("ready", "x" * 300_000, None), ("step", [(3, [(0, "a", 5, None, None, None)])], (1, [], []))
    data = _frame(big) + _frame(small)
    parts = [data[i:i + 50_000] for i in range(0, len(data), 50_000)]
    try:
        for k, part in enumerate(parts):
            os.write(w, part)
            e._readable()
            if k < len(parts) - 1:
                assert got == []  # the long message is not all there yet
        assert got == [big, small] and not e._buf
        os.close(w)
        lost = []
        e._lost = lambda: lost.append(True)
        e._readable()  # the engine process has gone: the pipe's end
        assert lost == [True]
    finally:
        os.close(r)
        e._conn.close()
        e._up_conn.close()
        for c in e._child_conns:
            c.close()

"""The server's host ceiling: `gpt2block serve`'s engine and HTTP side over a stub runner whose decode step takes
--step-ms of sleep (no model, no GPU), so that what limits tokens/s and latency is Python: the engine loop's
per-row work, the sampler batch, detokenization, the event loop's SSE. Drive it with scripts/bench_serve.py --url.

    python dev/serve_host_profile.py --tokenizer T.json --port 8123 --step-ms 1.0 [--profile out.prof] &
    python scripts/bench_serve.py --url http://127.0.0.1:8123 --model M --no-offline --concurrency 64

M: any checkpoint with GPT-2's tokenizer (bench_serve reads the tokenizer from it). --profile: cProfile of the
engine thread, written when the server exits (SIGTERM).

--measure ROWS [ROWS ...]: no HTTP; for each ROWS, that many one-row streaming requests run together in this
process (engine thread over the stub runner with no sleep; the event loop on the main thread runs each request's
SSE generator, server._stream, as a response would, up to the bytes it yields); prints the engine thread's host
CPU time per decode step (the stub's own sample_rows time taken out) and the event loop's CPU time per streamed
token (mailbox, queue, pieces to SSE text; not the socket writes):

    python dev/serve_host_profile.py --tokenizer T.json --measure 64 256 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends.base import Cache, RowsDraw, Runner  # noqa: E402
from gpt2block.config import GPT2Config  # noqa: E402
from gpt2block.engine import Limits  # noqa: E402
from gpt2block.sampler import SampleOutput  # noqa: E402
from gpt2block.server import serve  # noqa: E402
from gpt2block.tokenizer import Tokenizer  # noqa: E402


class StubRunner(Runner):
    backend, precision = "stub", "fp32"

    def __init__(self, config, step_s, prefill_s_per_token=0.0):
        self.config, self.step_s, self.prefill_s = config, step_s, prefill_s_per_token
        self.rng = np.random.default_rng(0)

    def new_cache(self, batch):
        return Cache(batch, self.config.n_ctx)

    def prefill(self, cache, row, ids, all_logits=False):
        cache.pos[row] += len(ids)
        return np.zeros((len(ids), self.config.vocab_size), np.float32) if all_logits else \
            np.zeros(self.config.vocab_size, np.float32)

    def prefill_batch(self, cache, rows, id_lists):  # one packed pass: its tokens' time asleep (the GPU's)
        if self.prefill_s:
            time.sleep(self.prefill_s * sum(len(ids) for ids in id_lists))
        for r, ids in zip(rows, id_lists):
            cache.pos[r] += len(ids)
        return np.zeros((len(rows), self.config.vocab_size), np.float32)

    def decode(self, cache, tokens):
        raise NotImplementedError

    def sample_logits(self, logits, batch, positions):  # a device backend's first token: no host sampler
        return SampleOutput(self.rng.integers(0, 50000, batch.batch), None, None, None)

    def sample_rows(self, cache, rows, tokens, batch):
        return self.launch_rows(cache, rows, tokens, batch).result()

    def launch_rows(self, cache, rows, tokens, batch):  # the GPU step: result() sleeps (the GIL free) until its end
        out = self.draw(cache, rows, batch)
        end = time.perf_counter() + self.step_s
        return RowsDraw(wait=lambda: (time.sleep(max(0.0, end - time.perf_counter())), out)[1])

    def draw(self, cache, rows, batch):
        cache.pos[list(rows)] += 1
        ids = self.rng.integers(0, 50000, len(rows))  # never <|endoftext|>
        return SampleOutput(ids, np.zeros(len(rows), np.float32) if batch.logprobs else None, None, None)


class StubModel:
    def __init__(self, tokenizer, step_s, prefill_s_per_token=0.0):
        self.config = GPT2Config(n_layer=1, n_embd=64, n_head=1, vocab_size=tokenizer.vocab_size, n_positions=1024)
        self.tokenizer = tokenizer
        self.runner = StubRunner(self.config, step_s, prefill_s_per_token)


class TimedStubRunner(StubRunner):
    """The stub without sleep, counting the engine thread's CPU time inside sample_rows (the stub's, not the host
    work measured) and the decode steps of exactly ``full`` rows."""

    def __init__(self, config, full, step_s):
        super().__init__(config, step_s)
        self.full, self.steps, self.stub_s = full, 0, 0.0

    def draw(self, cache, rows, batch):
        t = time.thread_time()
        out = super().draw(cache, rows, batch)
        self.stub_s += time.thread_time() - t
        self.steps += len(rows) == self.full
        return out


def measure(tok, rows: int, max_tokens: int, step_s: float) -> dict:
    """``rows`` one-row streams of max_tokens tokens each (temperature 0.8, top-p 0.95), over a stub decode step
    of step_s seconds of sleep; -> host figures."""
    from gpt2block.engine import Engine
    from gpt2block import server
    from gpt2block.server import Checked, Metrics, _Answer, _Mailbox, _stream
    from gpt2block.engine import Job
    from gpt2block.sampler import SamplingParams

    model = StubModel(tok, 0.0)
    model.runner = TimedStubRunner(model.config, rows, step_s)
    engine = Engine(lambda: model, rows, 4 * rows, 512, Metrics(), **(
        {"deliver_step": server._deliver_step} if hasattr(server, "_deliver_step") else {}))  # as serve() makes it
    engine_cpu = {}
    step = engine._step

    def timed_step():
        t = time.thread_time()
        step()
        engine_cpu["s"] = engine_cpu.get("s", 0.0) + time.thread_time() - t
        engine_cpu["steps"] = engine_cpu.get("steps", 0) + 1

    engine._step = timed_step
    engine.start()
    engine.ready.wait()
    tok.token_bytes()  # the detokenizer's table, built once per process: not counted
    model.runner.steps, model.runner.stub_s = 0, 0.0
    params = SamplingParams(temperature=0.8, top_p=0.95)
    prompt = tok.encode("The quick brown fox jumps over the lazy dog")

    async def run() -> tuple[int, int, float]:
        loop = asyncio.get_running_loop()
        box = _Mailbox.of(loop)
        streams, nbytes, chunks = [], 0, 0
        never = loop.create_future()  # the disconnect watcher of a client that stays
        c = Checked([prompt], [""], 1, params, max_tokens, 1, [], None, False, True, False)
        for i in range(rows):
            events = server._Events() if hasattr(server, "_Events") else asyncio.Queue()  # as _run makes it
            job = Job([prompt], 1, params, max_tokens, i, [], None, False, tok,
                      server._Sink(box, events) if hasattr(server, "_Sink") else
                      (lambda items, q=events: box.post(q, items)), 600.0)
            engine.submit(job)
            streams.append(_stream(job, events, _Answer(c, tok, "bench"), never))

        async def drain(gen):
            nonlocal nbytes, chunks
            async for chunk in gen:
                nbytes += len(chunk)
                chunks += 1

        t_cpu, t_wall = time.thread_time(), time.perf_counter()
        await asyncio.gather(*(drain(g) for g in streams))
        return time.thread_time() - t_cpu, time.perf_counter() - t_wall, nbytes, chunks

    e0 = dict(engine_cpu)
    loop_cpu, wall, nbytes, chunks = asyncio.run(run())
    engine.end_now()
    engine.finished.wait()
    steps = engine_cpu["steps"] - e0.get("steps", 0)
    host = engine_cpu["s"] - e0.get("s", 0.0) - model.runner.stub_s
    tokens = rows * max_tokens
    return {"rows": rows, "steps": steps, "full_steps": model.runner.steps, "tokens": tokens,
            "engine_us_per_step": 1e6 * host / steps, "stub_us_per_step": 1e6 * model.runner.stub_s / steps,
            "loop_us_per_token": 1e6 * loop_cpu / tokens, "wall_us_per_step": 1e6 * wall / steps,
            "loop_us_per_event": 1e6 * loop_cpu / chunks, "events": chunks, "bytes": nbytes}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="a GPT-2 tokenizer.json")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--prefill-chunk", type=int, default=None, help="the server's --prefill-chunk [its default]")
    ap.add_argument("--prefill-us", type=float, default=0.0, help="the stub prefill's sleep per prompt token (us)")
    ap.add_argument("--tid-file", default=None, help="write the engine thread's native id there once loaded")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--profile-loop", default=None, help="a cProfile of the event loop's thread, written at exit")
    ap.add_argument("--switch-interval", type=float, default=None, help="the GIL switch interval (s) [the server's]")
    ap.add_argument("--measure", type=int, nargs="+", default=None, metavar="ROWS")
    ap.add_argument("--max-tokens", type=int, default=400, help="--measure: tokens per stream")
    ap.add_argument("--repeat", type=int, default=1, help="--measure: runs per ROWS; each figure's least is shown")
    ap.add_argument("--measure-step-ms", type=float, default=1.0, help="--measure: the stub decode step's sleep")
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    if args.measure:
        sys.setswitchinterval(2e-4)  # as serve() sets it
        for rows in args.measure:
            runs = [measure(tok, rows, args.max_tokens, args.measure_step_ms / 1e3) for _ in range(args.repeat)]
            r = {k: min(x[k] for x in runs) if k.endswith(("_step", "_token", "_event")) else runs[0][k]
                 for k in runs[0]}  # each figure: its least over the repeats (a shared machine's noise adds)
            print(f"rows {r['rows']:4d}: engine host {r['engine_us_per_step']:7.1f} us/step (stub "
                  f"{r['stub_us_per_step']:.1f} taken out; {r['steps']} steps, {r['full_steps']} of {rows} rows)  "
                  f"event loop {r['loop_us_per_token']:5.1f} us/token, {r['loop_us_per_event']:5.1f} us/event "
                  f"({r['events']} events for {r['tokens']} tokens)  wall {r['wall_us_per_step']:7.1f} us/step "
                  f"(sleep {args.measure_step_ms * 1e3:.0f})", flush=True)
        return 0
    load = functools.partial(stub_load, args.tokenizer, args.step_ms / 1e3, args.prefill_us / 1e6, args.tid_file,
                             args.profile)

    if args.switch_interval is not None:
        from gpt2block import server
        server.SWITCH_INTERVAL_S = args.switch_interval
    loop_prof = cProfile.Profile() if args.profile_loop else None
    if loop_prof is not None:
        loop_prof.enable()  # this thread: uvicorn's event loop runs on it
    status = serve(load, "bench", "127.0.0.1", args.port, Limits(max_batch=args.max_batch, **(
        {} if args.prefill_chunk is None else {"prefill_chunk": args.prefill_chunk})), log_level="warning")
    if loop_prof is not None:
        loop_prof.disable()
        loop_prof.dump_stats(args.profile_loop)
    return status


def stub_load(tokenizer: str, step_s: float, prefill_s: float, tid_file, profile):
    """serve()'s load in the engine's process (a module-level function: it pickles): the stub model; the engine
    process's id and its engine thread's into tid_file ("PID TID"); a cProfile of the engine thread, written when
    that process ends."""
    if profile:
        import multiprocessing.util

        prof = cProfile.Profile()
        prof.enable()  # the engine thread: load runs on it, and so does every step after
        multiprocessing.util.Finalize(None, lambda: (prof.disable(), prof.dump_stats(profile)), exitpriority=10)
    if tid_file:
        Path(tid_file).write_text(f"{os.getpid()} {threading.get_native_id()}")
    return StubModel(Tokenizer.from_file(tokenizer), step_s, prefill_s)


if __name__ == "__main__":
    sys.exit(main())

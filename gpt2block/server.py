"""`gpt2block serve`: an OpenAI-compatible HTTP server over one model (FastAPI on uvicorn; the `serve` extra).

    POST /v1/completions        OpenAI's completions: the request checked here, its rows run by engine.Engine
                                (continuous batching) in a process of its own (engine_process.RemoteEngine),
                                the answer as JSON or server-sent events
    GET  /v1/models             the served model
    POST /v1/chat/completions   an error: GPT-2 is a completion model without a chat template
    GET  /health                200 once the model is loaded and warm; 503 while loading or draining
    GET  /metrics               Prometheus text: requests by status, tokens in and out, queue depth,
                                running rows, time to first token and inter-token latency

Every error is OpenAI's error object {"error": {"message", "type", "param", "code"}}, ``param`` naming the
field: 400 for a bad body, 401 for a wrong API key, 404 for another model, 413 for a body over
max_body_bytes, 429 (with Retry-After) past the bounded queue, 503 while loading or draining.

Sampling defaults are gpt2block's (sampler.SamplingParams: temperature 1, top_k 50, top_p 1); max_tokens
defaults to OpenAI's 16. A request's tokens with a fixed seed equal gpt2block.Model.generate's for the same
prompt, parameters and seed. SIGTERM (or SIGINT) drains: new requests get 503, queued ones that have not
started are refused, running ones finish or are ended after drain_timeout seconds, then the process exits 0.
A second SIGTERM / SIGINT during the drain ends the running requests at once (each gets the shutting-down error)
and the process exits with status INTERRUPTED_STATUS (1) within about a second, without waiting for the
drain's deadline.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from .engine import Engine, EngineClosed, EngineFull, Job, Limits, PromptLogprobs, RequestTimeout, ShuttingDown
from .engine_process import SWITCH_INTERVAL_S, RemoteEngine
from .generate import check_text
from .sampler import MAX_TOP_LOGPROBS, SEED_MAX, SamplingError, SamplingParams

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_STOP = 4  # stop strings per request (OpenAI's limit)
MAX_STOP_CHARS = 256  # characters per stop string
INTERRUPTED_STATUS = 1  # the exit status after a second signal cut the drain short
ENDING_GRACE_S = 0.5  # after a second signal: how long the ended requests' last events get to leave


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, type: str = "invalid_request_error",
                 code: Optional[str] = None, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type, code
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers=self.headers)


def _from_engine(e: BaseException) -> ApiError:
    if isinstance(e, RequestTimeout):
        return ApiError(408, str(e), type="timeout_error", code="request_timeout")
    if isinstance(e, (EngineClosed, ShuttingDown)):
        return ApiError(503, str(e), type="server_error", code="shutting_down")
    return ApiError(500, f"{type(e).__name__}: {e}", type="server_error")


# ---------------------------------------------------------------- the request

Number = Union[StrictInt, StrictFloat]


class CompletionRequest(BaseModel):
    """POST /v1/completions, OpenAI's fields and vLLM's extra sampling fields (top_k, min_p,
    repetition_penalty). An unknown field is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr
    prompt: Union[StrictStr, list[StrictStr], list[StrictInt], list[list[StrictInt]]]
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    n: Optional[StrictInt] = None
    stop: Optional[Union[StrictStr, list[StrictStr]]] = None
    seed: Optional[StrictInt] = None
    stream: Optional[StrictBool] = None
    stream_options: Optional[dict] = None
    logprobs: Optional[StrictInt] = None
    echo: Optional[StrictBool] = None
    presence_penalty: Optional[Number] = None
    frequency_penalty: Optional[Number] = None
    user: Optional[StrictStr] = None
    best_of: Optional[StrictInt] = None
    suffix: Optional[StrictStr] = None
    logit_bias: Optional[dict] = None
    top_k: Optional[StrictInt] = None  # vLLM: -1 or 0 = off
    min_p: Optional[Number] = None
    repetition_penalty: Optional[Number] = None


@dataclass
class Checked:
    """A request past every check: what the engine runs and what the answer needs."""

    prompts: list[list[int]]
    prompt_texts: list[str]
    n: int
    params: SamplingParams
    max_tokens: int
    seed: int
    stop: list[str]
    logprobs: Optional[int]
    echo: bool
    stream: bool
    include_usage: bool


def parse_body(body: bytes) -> CompletionRequest:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object; got {type(data).__name__}")
    try:
        return CompletionRequest.model_validate(data, strict=True)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        field = loc[0] if loc else None
        if err["type"] == "extra_forbidden":
            raise ApiError(400, f"unknown field {field!r}", field) from None
        if err["type"] == "missing":
            raise ApiError(400, f"{field} is required", field) from None
        kind = FIELD_KINDS.get(field)
        if kind is None:
            raise ApiError(400, f"{'.'.join(loc)}: {err['msg']} (got {_short(err.get('input'))})", field) from None
        raise ApiError(400, f"{field} must be {kind}; got {_short(data.get(field))}", field) from None


FIELD_KINDS = {
    **dict.fromkeys(("model", "user", "suffix"), "a string"),
    "prompt": "a string, a list of strings, a list of token ids or a list of lists of token ids",
    "stop": "a string or a list of strings",
    **dict.fromkeys(("max_tokens", "n", "seed", "logprobs", "best_of", "top_k"), "an integer"),
    **dict.fromkeys(("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_p", "repetition_penalty"),
                    "a number"),
    **dict.fromkeys(("stream", "echo"), "true or false"),
    **dict.fromkeys(("stream_options", "logit_bias"), "an object"),
}


def _short(v) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def check_request(req: CompletionRequest, served: str, tokenizer, n_ctx: int, limits: Limits) -> Checked:
    """Every check before any work; an ApiError names the field."""
    if req.model != served:
        raise ApiError(404, f"The model `{req.model}` does not exist; this server serves `{served}`", "model",
                       code="model_not_found")
    for name in ("suffix",):
        if getattr(req, name) is not None:
            raise ApiError(400, f"{name} is not supported (GPT-2 has no insertion mode)", name)
    if req.logit_bias:
        raise ApiError(400, "logit_bias is not supported", "logit_bias")
    n = 1 if req.n is None else req.n
    if n < 1:
        raise ApiError(400, f"n must be at least 1; got {n}", "n")
    if req.best_of is not None and req.best_of != n:
        raise ApiError(400, f"best_of other than n is not supported; got best_of {req.best_of}, n {n}", "best_of")
    prompts, texts = _prompts(req.prompt, tokenizer)
    if len(prompts) * n > limits.max_batch:
        raise ApiError(400, f"{len(prompts)} prompt(s) x n {n} = {len(prompts) * n} rows; this server runs at most "
                       f"{limits.max_batch} rows per request (--max-batch)", "n")
    max_tokens = DEFAULT_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1; got {max_tokens}", "max_tokens")
    for i, ids in enumerate(prompts):
        if len(ids) + max_tokens > n_ctx:
            which = "the prompt" if len(prompts) == 1 else f"prompt {i}"
            raise ApiError(400, f"{which} has {len(ids)} tokens and max_tokens is {max_tokens}: "
                           f"{len(ids) + max_tokens} tokens do not fit the model's context of {n_ctx}", "max_tokens")
    stop = [] if req.stop is None else [req.stop] if isinstance(req.stop, str) else list(req.stop)
    if len(stop) > MAX_STOP:
        raise ApiError(400, f"at most {MAX_STOP} stop strings; got {len(stop)}", "stop")
    for s in stop:
        if not s or len(s) > MAX_STOP_CHARS:
            raise ApiError(400, f"a stop string must hold 1 to {MAX_STOP_CHARS} characters; got {_short(s)}", "stop")
        _text(s, "stop")
    if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP_LOGPROBS:
        raise ApiError(400, f"logprobs must be in [0, {MAX_TOP_LOGPROBS}]; got {req.logprobs}", "logprobs")
    if req.seed is not None and not 0 <= req.seed <= SEED_MAX:
        raise ApiError(400, f"seed must be in [0, 2**64 - 1]; got {req.seed}", "seed")
    top_k = req.top_k
    if top_k is not None and top_k < -1:
        raise ApiError(400, f"top_k must be -1 or 0 (off) or a positive count; got {top_k}", "top_k")
    d = SamplingParams()
    given = {k: getattr(req, k) for k in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                                          "frequency_penalty")}
    try:
        params = SamplingParams(**{k: (getattr(d, k) if v is None else v) for k, v in given.items()},
                                top_k=d.top_k if top_k is None else max(top_k, 0))
    except (SamplingError, TypeError) as e:
        raise ApiError(400, str(e), str(e).split()[0]) from None
    stream = bool(req.stream)
    if req.stream_options is not None:
        if not stream:
            raise ApiError(400, "stream_options needs stream: true", "stream_options")
        extra = set(req.stream_options) - {"include_usage"}
        if extra or not isinstance(req.stream_options.get("include_usage", False), bool):
            raise ApiError(400, "stream_options takes only include_usage (true or false)", "stream_options")
    return Checked(prompts, texts, n, params, max_tokens, secrets.randbits(64) if req.seed is None else req.seed,
                   stop, req.logprobs, bool(req.echo), stream, bool((req.stream_options or {}).get("include_usage")))


def _text(s: str, field: str) -> str:
    try:
        return check_text(s, field)
    except ValueError as e:
        raise ApiError(400, str(e), field) from None


def _prompts(prompt, tokenizer) -> tuple[list[list[int]], list[str]]:
    """The four forms of ``prompt`` -> (token ids per prompt, text per prompt). An empty string starts from
    <|endoftext|>, as generate() does."""
    if isinstance(prompt, str):
        items = [prompt]
    elif not prompt:
        raise ApiError(400, "prompt must not be an empty list", "prompt")
    elif isinstance(prompt[0], int):
        items = [prompt]
    else:
        items = list(prompt)
    ids_out, texts = [], []
    for i, p in enumerate(items):
        if isinstance(p, str):
            ids = tokenizer.encode(_text(p, "prompt")) or [tokenizer.eot_id]
            text = p
        else:
            if not p:
                raise ApiError(400, f"prompt {i} is an empty list of token ids", "prompt")
            bad = [t for t in p if not 0 <= t < tokenizer.vocab_size]
            if bad:
                raise ApiError(400, f"prompt token id {bad[0]} is outside the vocabulary [0, {tokenizer.vocab_size})",
                               "prompt")
            ids, text = list(p), tokenizer.decode(p)
        ids_out.append(ids)
        texts.append(text)
    return ids_out, texts


# ---------------------------------------------------------------- metrics


class Metrics:
    """Prometheus metrics in a registry of their own; the engine thread and the handlers update them. The
    engine's per-token figures (tokens generated, the two latency histograms) come a step at a time
    (``tokens``), counted with NumPy: one call per step, not three per token."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("gpt2block_requests", "HTTP requests to /v1 by status code", ["status"], registry=r)
        self.prompt_tokens = Counter("gpt2block_prompt_tokens", "prompt tokens of accepted requests", registry=r)
        self.queue_depth = Gauge("gpt2block_queue_depth", "requests waiting for a KV slot", registry=r)
        self.running = Gauge("gpt2block_running_rows", "rows in the running batch (KV slots in use)", registry=r)
        self.steps = _StepMetrics()
        r.register(self.steps)

    def queue(self, depth: int, running: int) -> None:
        self.queue_depth.set(depth)
        self.running.set(running)

    def tokens(self, n: int, ttfts: list, itls: list) -> None:
        """One engine step: n tokens generated, the first-token latencies and inter-token gaps it saw (seconds)."""
        self.steps.add(n, ttfts, itls)


class _StepMetrics:
    """A Prometheus collector: gpt2block_generation_tokens_total and the time-to-first-token and inter-token
    latency histograms, as bucket counts the engine thread adds to a step at a time."""

    TTFT_BUCKETS = (.005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5, 10, 30, 60)
    ITL_BUCKETS = (.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5)

    def __init__(self):
        self.lock = threading.Lock()
        self.generated = 0
        self.hists = {"gpt2block_time_to_first_token_seconds": ("request arrival to its first token",
                                                                 np.array(self.TTFT_BUCKETS)),
                      "gpt2block_inter_token_latency_seconds": ("time between a row's successive tokens",
                                                                np.array(self.ITL_BUCKETS))}
        self.counts = {k: np.zeros(len(b) + 1, np.int64) for k, (_, b) in self.hists.items()}  # last: past every bound
        self.sums = dict.fromkeys(self.hists, 0.0)

    def add(self, n: int, ttfts: list, itls: list) -> None:
        with self.lock:
            self.generated += n
            for name, values in zip(self.hists, (ttfts, itls)):
                if values:
                    v = np.asarray(values, np.float64)
                    bounds = self.hists[name][1]  # a value on a bound counts in that bucket (le)
                    self.counts[name] += np.bincount(np.searchsorted(bounds, v, side="left"),
                                                     minlength=len(bounds) + 1)
                    self.sums[name] += float(v.sum())

    def collect(self):
        with self.lock:
            generated = self.generated
            state = {k: (self.counts[k].cumsum(), self.sums[k]) for k in self.hists}
        yield CounterMetricFamily("gpt2block_generation_tokens", "tokens generated", value=generated)
        for name, (doc, bounds) in self.hists.items():
            cum, total = state[name]
            buckets = [(floatToGoString(b), int(c)) for b, c in zip(bounds, cum[:-1])] + [("+Inf", int(cum[-1]))]
            yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


class _CountStatus:
    """ASGI middleware: count the responses to /v1 paths by status code."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


# ---------------------------------------------------------------- the app


def create_app(engine: Engine, served_name: str, limits: Limits, api_key: Optional[str] = None,
               metrics: Optional[Metrics] = None) -> FastAPI:
    metrics = metrics or Metrics()
    app = FastAPI(title="gpt2block", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_CountStatus, metrics=metrics)
    key = None if api_key is None else api_key.encode()
    created = int(time.time())

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        what = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return ApiError(e.status_code, what.get(e.status_code, str(e.detail))).response()

    def authorize(request: Request) -> None:
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key):
            raise ApiError(401, "Incorrect API key provided (Authorization: Bearer KEY)", type="invalid_request_error",
                           code="invalid_api_key")

    def available() -> None:
        if engine.draining or engine.finished.is_set():
            raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")
        if not engine.ready.is_set():
            raise ApiError(503, "the model is loading", type="server_error", code="loading")

    @app.get("/health")
    async def health():
        if engine.ready.is_set() and not engine.draining and not engine.finished.is_set():
            return {"status": "ok"}
        status = "draining" if engine.draining or engine.finished.is_set() else "loading"
        return JSONResponse({"status": status}, 503)

    @app.get("/metrics")
    async def prometheus():
        metrics.queue(*await engine.agauges())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request):
        authorize(request)
        n_ctx = engine.model.config.n_ctx if engine.model is not None else None
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": created,
                                            "owned_by": "gpt2block", "max_model_len": n_ctx}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        authorize(request)
        raise ApiError(400, "GPT-2 is a completion model without a chat template: use POST /v1/completions "
                       "with a prompt", "messages", code="chat_not_supported")

    @app.post("/v1/completions")
    async def completions(request: Request):
        authorize(request)
        available()
        body = await _read_body(request, limits.max_body_bytes)
        req = parse_body(body)
        model = engine.model
        # off the event loop: encoding a long prompt takes milliseconds, which every stream would wait for
        checked = await asyncio.to_thread(check_request, req, served_name, model.tokenizer, model.config.n_ctx,
                                          limits)
        return await _run(request, engine, checked, model.tokenizer, served_name, limits, metrics)

    return app


async def _read_body(request: Request, cap: int) -> bytes:
    length = request.headers.get("content-length")
    too_big = ApiError(413, f"the request body is larger than {cap} bytes (--max-body-bytes)", code="body_too_large")
    if length is not None and length.isdigit() and int(length) > cap:
        raise too_big
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > cap:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def _watch(request: Request, job: Job) -> None:
    """Cancel the job when the client disconnects."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            return


async def _run(request: Request, engine: Engine, c: Checked, tokenizer, served_name: str, limits: Limits,
               metrics: Metrics):
    events = _Events()
    deliver = _Sink(_Mailbox.of(asyncio.get_running_loop()), events)
    job = Job(c.prompts, c.n, c.params, c.max_tokens, c.seed, c.stop, c.logprobs,
              c.echo and c.logprobs is not None, tokenizer, deliver, limits.request_timeout)
    try:
        await engine.asubmit(job)
    except EngineFull as e:
        raise ApiError(429, str(e), type="rate_limit_error", code="queue_full", headers={"Retry-After": "1"}) from None
    except EngineClosed as e:
        raise ApiError(503, str(e), type="server_error", code="shutting_down") from None
    metrics.prompt_tokens.inc(sum(len(p) for p in c.prompts))
    watcher = asyncio.create_task(_watch(request, job))
    answer = _Answer(c, tokenizer, served_name)
    if c.stream:
        return StreamingResponse(_stream(job, events, answer, watcher), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        while not answer.complete:
            getter = asyncio.ensure_future(events.get_all())
            await asyncio.wait((getter, watcher), return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():  # the client left: the job is cancelled, nobody reads an answer
                getter.cancel()
                return Response(status_code=499)
            items, err = _ready(getter.result())
            answer.add(items)
            if err is not None:
                raise _from_engine(err)
    finally:
        watcher.cancel()
        job.cancel()
    return answer.full()


async def _stream(job: Job, events: "_Events", answer: "_Answer", watcher):
    try:
        if answer.c.echo and not job.prompt_logprobs:
            yield _sse(answer.chunk([answer.echo_piece(i) for i in range(len(answer.choices))]))
        while not answer.complete:
            items, err = _ready(await events.get_all())
            if items:
                yield answer.sse(answer.add(items))
            if err is not None:
                yield _sse(_from_engine(err).body())
                break
        else:
            if answer.c.include_usage:
                yield _sse(answer.usage_chunk())
        yield "data: [DONE]\n\n"
    finally:
        watcher.cancel()
        job.cancel()


def _ready(deliveries: list) -> tuple[list, Optional[BaseException]]:
    """The deliveries waiting for a response (each a list of pieces, or the error that ended the request), as one
    list of pieces (a stream that fell behind the engine sends them as one chunk, a choice's pieces joined), and
    the error that ended the request (the pieces before it are kept, those after it dropped)."""
    if len(deliveries) == 1 and not isinstance(deliveries[0], BaseException):
        return deliveries[0], None
    items = []
    for d in deliveries:
        if isinstance(d, BaseException):
            return items, d
        items.extend(d)
    return items, None


class _Events:
    """One response's deliveries, put by its loop's mailbox; get_all() waits for some and takes all of them
    (lighter than an asyncio.Queue: one waiter, no maxsize)."""

    __slots__ = ("items", "waiter")

    def __init__(self):
        self.items: list = []
        self.waiter: Optional[asyncio.Future] = None

    def put_nowait(self, delivery) -> None:
        self.items.append(delivery)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get_all(self) -> list:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        items, self.items = self.items, []
        return items


class _Mailbox:
    """The engine thread's deliveries to one event loop: one wake-up of the loop per batch of deliveries,
    not one per request and step."""

    _by_loop: dict = {}

    @classmethod
    def of(cls, loop) -> "_Mailbox":
        box = cls._by_loop.get(loop)
        if box is None:
            box = cls._by_loop[loop] = cls(loop)
        return box

    def __init__(self, loop):
        self.loop, self.lock, self.pending, self.scheduled = loop, threading.Lock(), [], False

    def post(self, queue: asyncio.Queue, items) -> None:
        self.post_many([(queue, items)])

    def post_many(self, posts: list) -> None:
        """[(queue, items)]: one wake-up of the loop for all of them (none on the loop's own thread: put at once)."""
        if _running_loop() is self.loop:
            self._flush()  # what other threads posted before, first
            for queue, items in posts:
                queue.put_nowait(items)
            return
        with self.lock:
            self.pending.extend(posts)
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the event loop has closed
            pass

    def _flush(self) -> None:
        with self.lock:
            pending, self.pending, self.scheduled = self.pending, [], False
        for queue, items in pending:
            queue.put_nowait(items)


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Sink:
    """A job's deliver(items) from the engine thread: into its response's queue through its loop's mailbox."""

    __slots__ = ("mailbox", "queue")

    def __init__(self, mailbox: _Mailbox, queue: asyncio.Queue):
        self.mailbox, self.queue = mailbox, queue

    def __call__(self, items) -> None:
        self.mailbox.post(self.queue, items)


def _deliver_step(pairs: list) -> None:
    """The engine's deliveries of one step, [(job, items)]: one post (one wake-up) per event loop."""
    boxes: dict = {}
    for job, items in pairs:
        sink = job.deliver
        if type(sink) is _Sink:
            boxes.setdefault(sink.mailbox, []).append((sink.queue, items))
        else:
            sink(items)
    for box, posts in boxes.items():
        box.post_many(posts)


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_json_str = json.encoder.encode_basestring  # what _JSON.encode(a str) returns, without its checks


def _sse(obj) -> str:
    return f"data: {_JSON.encode(obj)}\n\n"


class _Choice:
    def __init__(self):
        self.text = ""
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        self.finish: Optional[str] = None
        self.generated = 0


class _Answer:
    """A request's choices as the engine's pieces arrive; the JSON of the whole answer or of stream chunks."""

    def __init__(self, c: Checked, tokenizer, served_name: str):
        self.c, self.tok, self.model = c, tokenizer, served_name
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.choices = [_Choice() for _ in range(len(c.prompts) * c.n)]
        self._sse_head = None  # sse()'s 'data: {"id":...,"choices":['
        self.unfinished = len(self.choices)
        if c.echo:
            for i, ch in enumerate(self.choices):
                ch.text = c.prompt_texts[i // c.n]

    @property
    def complete(self) -> bool:
        return self.unfinished == 0

    def _token(self, ch: _Choice, tok: int, lp, top) -> dict:
        s = self.tok.decode([tok])
        offset = ch.text_offset[-1] + len(ch.tokens[-1]) if ch.tokens else 0
        tops = None
        if top is not None:
            tops = {self.tok.decode([i]): v for i, v in top}
            if lp is not None:
                tops.setdefault(s, lp)
        ch.tokens.append(s)
        ch.token_logprobs.append(lp)
        ch.top_logprobs.append(tops)
        ch.text_offset.append(offset)
        return {"tokens": [s], "token_logprobs": [lp], "top_logprobs": [tops], "text_offset": [offset]}

    def echo_piece(self, i: int) -> tuple[int, str, Optional[dict], Optional[str]]:
        return i, self.c.prompt_texts[i // self.c.n], None, None

    def add(self, items: list) -> list[tuple[int, str, Optional[dict], Optional[str]]]:
        """Take one step's pieces; -> (choice, text, logprobs of this piece, finish) for stream chunks."""
        out = []
        choices, want_lp = self.choices, self.c.logprobs is not None
        for it in items:
            ch = choices[it.index]
            if type(it) is PromptLogprobs:
                ids = self.c.prompts[it.index // self.c.n]
                offset, lp = 0, {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
                for tok, v, top in zip(ids, it.logprobs, it.top):
                    s = self.tok.decode([tok])
                    tops = None if top is None else {**{self.tok.decode([i]): x for i, x in top}, s: v}
                    for k, x in (("tokens", s), ("token_logprobs", v), ("top_logprobs", tops), ("text_offset", offset)):
                        lp[k].append(x)
                        getattr(ch, k).append(x)
                    offset += len(s)
                out.append((it.index, self.c.prompt_texts[it.index // self.c.n], lp, None))
                continue
            lp, text, fin = None, it.text, it.finish
            if it.token is not None:
                ch.generated += 1
                if want_lp:
                    lp = self._token(ch, it.token, it.logprob, it.top)
            if text:
                ch.text += text
            if fin is not None:
                if ch.finish is None:
                    self.unfinished -= 1
                ch.finish = fin
            if text or lp is not None or fin is not None:
                out.append((it.index, text, lp, fin))
        if len(out) <= 1:
            return out
        merged: dict = {}  # one entry per choice (a row's first token and its next can come in one step)
        for i, text, lp, fin in out:
            if i in merged:
                _, t0, lp0, _ = merged[i]
                text = t0 + text
                lp = lp0 if lp is None else lp if lp0 is None else {k: lp0[k] + lp[k] for k in lp}
            merged[i] = (i, text, lp, fin)
        return list(merged.values())

    def usage(self) -> dict:
        p = sum(len(ids) for ids in self.c.prompts)
        g = sum(ch.generated for ch in self.choices)
        return {"prompt_tokens": p, "completion_tokens": g, "total_tokens": p + g}

    def _head(self) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}

    def chunk(self, pieces) -> dict:
        return {**self._head(), "choices": [{"index": i, "text": text, "logprobs": lp, "finish_reason": fin}
                                            for i, text, lp, fin in pieces]}

    def sse(self, pieces) -> str:
        """_sse(self.chunk(pieces)), the same characters, with the head's JSON rendered once per request rather
        than at every token (a stream's one event per token is most of the event loop's work)."""
        if self._sse_head is None:
            self._sse_head = _sse({**self._head(), "choices": []})[:-4]  # 'data: {..."choices":['
        if len(pieces) == 1:  # a stream's usual event: one choice's text
            i, text, lp, fin = pieces[0]
            if lp is None and fin is None:
                return f'{self._sse_head}{{"index":{i},"text":{_json_str(text)},"logprobs":null,' \
                       f'"finish_reason":null}}]}}\n\n'
        dumps = _JSON.encode
        parts = [f'{{"index":{i},"text":{dumps(text)},"logprobs":{"null" if lp is None else dumps(lp)},'
                 f'"finish_reason":{"null" if fin is None else dumps(fin)}}}' for i, text, lp, fin in pieces]
        return f"{self._sse_head}{','.join(parts)}]}}\n\n"

    def usage_chunk(self) -> dict:
        return {**self._head(), "choices": [], "usage": self.usage()}

    def full(self) -> dict:
        choices = []
        for i, ch in enumerate(self.choices):
            lp = None
            if self.c.logprobs is not None:
                lp = {"tokens": ch.tokens, "token_logprobs": ch.token_logprobs, "top_logprobs": ch.top_logprobs,
                      "text_offset": ch.text_offset}
            choices.append({"index": i, "text": ch.text, "logprobs": lp, "finish_reason": ch.finish})
        return {**self._head(), "choices": choices, "usage": self.usage()}


# ---------------------------------------------------------------- the process


def serve(load, served_name: str, host: str, port: int, limits: Limits, api_key: Optional[str] = None,
          log=print, log_level: str = "info") -> int:
    """Run the server until SIGTERM / SIGINT has drained it; ``load()`` -> a Model, run in the engine's process (a
    picklable callable: a module-level function, or functools.partial of one).
    Returns the exit status: 0 after a drain, 1 when the model could not be loaded, INTERRUPTED_STATUS when a
    second signal cut the drain short."""
    import sys

    import uvicorn

    # The event loop shares this process's GIL with the thread that reads the engine's steps and with the request
    # checks' threads: a short switch interval lets each take it soon (Python's default is 5 ms); the engine's
    # process sets the same for its threads.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    metrics = Metrics()
    engine = RemoteEngine(load, limits.max_batch, limits.max_queue, limits.prefill_chunk, metrics, log,
                          _deliver_step)
    app = create_app(engine, served_name, limits, api_key, metrics)

    interrupted = threading.Event()  # a second signal cut the drain short

    class Server(uvicorn.Server):
        async def serve(self, sockets=None):
            engine.attach(asyncio.get_running_loop())  # the engine's messages are read on this loop
            await super().serve(sockets)

        def handle_exit(self, sig, frame):
            if engine.draining:  # a second signal: end the running requests and stop now
                if not interrupted.is_set():
                    interrupted.set()
                    threading.Thread(target=self._exit_now, daemon=True).start()
                return
            if not engine.ready.is_set():
                self.should_exit = True  # still loading: nothing to drain
                return
            threading.Thread(target=self._exit_after_drain, daemon=True).start()

        def _exit_now(self):  # off the signal handler's thread, as _exit_after_drain
            engine.end_now()
            engine.finished.wait(ENDING_GRACE_S)  # the engine ends them at its next step
            time.sleep(0.1)  # their error events reach their responses
            self.should_exit = True
            self.force_exit = True  # uvicorn waits for no connection or task

        def _exit_after_drain(self):  # not in the signal handler: drain takes locks the loop's thread may hold
            engine.drain(limits.drain_timeout)
            engine.finished.wait()
            time.sleep(0.2)  # the last pieces reach their responses
            self.should_exit = True

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                            lifespan="off")
    server = Server(config)

    engine.start()
    threading.Thread(target=_when_failed, args=(engine, server), daemon=True).start()
    try:
        server.run()
    finally:
        engine.close()
    if engine.error is not None:
        log(f"Error: {engine.error}")
        return 1
    if interrupted.is_set():
        log("a second signal ended the drain early: the running requests were ended")
        return INTERRUPTED_STATUS
    return 0


def _when_failed(engine: Engine, server) -> None:
    """Stop the server when the engine fails to load the model, or ends without a drain (its process died: the
    requests it ran got an error; engine.error says why, and the exit status is 1)."""
    while not engine.ready.wait(0.2):
        if engine.error is not None:
            server.should_exit = True
            return
    engine.finished.wait()
    if not engine.draining:
        if engine.error is None:
            engine.error = RuntimeError("the engine ended without a drain")
        server.should_exit = True

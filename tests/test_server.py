"""`gpt2block serve` as a real process on 127.0.0.1 (NumPy backend, a tiny random checkpoint of 1024 positions),
driven by the official openai client and by raw HTTP: every answer equals the Python API's for the same prompt,
parameters and seed; concurrency, disconnects, the bounded queue, bad bodies, the API key and SIGTERM."""

import json
import os
import signal
import threading
import time

import httpx
import numpy as np
import openai
import pytest
from click.testing import CliRunner

import gpt2block
from gpt2block.cli import main
from gpt2block.sampler import raw_logprobs

from hf_checkpoints import make_hf_checkpoint
from serving import ServerProcess

KEY = "test-key-1234"
FINISH = {"eot": "stop", "stop": "stop", "length": "length"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """2 layers, n_embd 64, vocab 512, 1024 positions: long requests stay cheap."""
    return make_hf_checkpoint(tmp_path_factory.mktemp("serve") / "ckpt", 2, 64, 1, vocab_size=512, n_positions=1024,
                              seed=77).path


@pytest.fixture(scope="module")
def model(ckpt):
    return gpt2block.load(str(ckpt), backend="numpy")


@pytest.fixture(scope="module")
def server(ckpt, tmp_path_factory):
    s = ServerProcess(ckpt, tmp_path_factory.mktemp("log") / "server.log", "--max-batch", "6", "--max-queue", "32",
                      "--prefill-chunk", "40", "--api-key", KEY, "--served-model-name", "tiny")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def post(server, body, key=KEY, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(server.url + "/v1/completions", json=body, headers=headers, timeout=60, **kw)


def by_row(results, n_prompts, n):
    """generate()'s nested results -> a flat list in choice order."""
    if n_prompts == 1:
        return [results] if n == 1 else list(results)
    return [r for per in results for r in ([per] if n == 1 else per)]


def test_completions_equal_the_python_api(client, model):
    prompts = ["Hello world", "The cat sat"]
    kw = dict(temperature=0.8, top_p=0.95, presence_penalty=0.5, frequency_penalty=0.3, seed=7, n=2)
    extra = dict(top_k=20, min_p=0.02, repetition_penalty=1.2)
    got = client.completions.create(model="tiny", prompt=prompts, max_tokens=12, logprobs=3, stop=[" the"],
                                    extra_body=extra, **kw)
    want = by_row(model.generate(prompts, 12, logprobs=3, stop=[" the"], **kw, **extra), 2, 2)
    assert got.id.startswith("cmpl-") and got.object == "text_completion" and got.model == "tiny"
    assert len(got.choices) == 4
    for i, (c, r) in enumerate(zip(got.choices, want)):
        assert c.index == i and c.text == r.text and c.finish_reason == FINISH[r.stop_reason]
        assert len(c.logprobs.tokens) == len(r.token_ids)
        np.testing.assert_allclose(c.logprobs.token_logprobs, r.logprobs, rtol=1e-5, atol=1e-5)
        for top, want_top, tok in zip(c.logprobs.top_logprobs, r.top_logprobs, c.logprobs.tokens):
            assert set(top) == {model.tokenizer.decode([t]) for t, _ in want_top} | {tok}
    assert got.usage.prompt_tokens == sum(len(model.encode(p)) for p in prompts)
    assert got.usage.completion_tokens == sum(len(r.token_ids) for r in want)
    assert got.usage.total_tokens == got.usage.prompt_tokens + got.usage.completion_tokens


def test_streaming_equals_the_python_api(client, model):
    stream = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=20, temperature=1.0,
                                       seed=123, n=3, stream=True, stream_options={"include_usage": True})
    text, finish, usage, ids = {}, {}, None, set()
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    want = model.generate("Once upon a time", 20, temperature=1.0, seed=123, n=3)
    assert len(ids) == 1
    assert [text[i] for i in range(3)] == [r.text for r in want]
    assert [finish[i] for i in range(3)] == [FINISH[r.stop_reason] for r in want]
    assert usage.completion_tokens == sum(len(r.token_ids) for r in want)


def test_raw_stream_ends_with_done_and_token_prompts_work(server, model):
    ids = model.encode("A token prompt")
    with httpx.stream("POST", server.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "prompt": ids, "max_tokens": 6, "temperature": 0, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    text = "".join(c["text"] for ln in lines[:-1] for c in json.loads(ln[6:])["choices"])
    assert text == model.generate("A token prompt", 6, temperature=0).text
    greedy = post(server, {"model": "tiny", "prompt": [ids, ids[:2]], "max_tokens": 5, "temperature": 0}).json()
    assert greedy["choices"][0]["text"] == text[:len(greedy["choices"][0]["text"])]


def test_echo_with_prompt_logprobs_and_a_long_chunked_prompt(client, model):
    prompt = "Hello world, the cat sat on the mat. " * 8  # past --prefill-chunk 40: prefilled over several steps
    n_prompt = len(model.encode(prompt))
    assert n_prompt > 2 * 40
    got = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, echo=True, logprobs=2, seed=5,
                                    temperature=0.9)
    r = model.generate(prompt, 8, temperature=0.9, seed=5, logprobs=2)
    c = got.choices[0]
    assert c.text == prompt + r.text
    lp = c.logprobs
    assert len(lp.tokens) == n_prompt + len(r.token_ids) and lp.token_logprobs[0] is None
    ids = model.encode(prompt)
    ref = np.array([raw_logprobs(row)[t] for row, t in zip(model.logits(ids)[:-1], ids[1:])])
    np.testing.assert_allclose(lp.token_logprobs[1:n_prompt], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lp.token_logprobs[n_prompt:], r.logprobs, rtol=1e-4, atol=1e-4)
    assert lp.text_offset[:3] == [0, len(lp.tokens[0]), len(lp.tokens[0]) + len(lp.tokens[1])]


def test_eight_concurrent_streams_all_complete_and_correct(server, model):
    prompts = [f"Stream number {i} says" for i in range(8)]
    results, errors = {}, []

    def one(i):
        try:
            c = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
            text, finish = "", None
            for chunk in c.completions.create(model="tiny", prompt=prompts[i], max_tokens=24 + i, temperature=0.8,
                                              top_p=0.95, seed=100 + i, stream=True):
                for ch in chunk.choices:
                    text += ch.text
                    finish = ch.finish_reason or finish
            results[i] = (text, finish)
        except Exception as e:  # reported below
            errors.append(repr(e))

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and time.monotonic() - t0 < 60
    for i in range(8):
        r = model.generate(prompts[i], 24 + i, temperature=0.8, top_p=0.95, seed=100 + i)
        assert results[i] == (r.text, FINISH[r.stop_reason])


def test_a_client_that_disconnects_frees_its_slot(server):
    before = server.metric("gpt2block_generation_tokens_total")
    with httpx.stream("POST", server.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "prompt": "Long", "max_tokens": 1000, "stream": True,
                            "temperature": 0}, timeout=30) as r:  # greedy: runs to max_tokens unless ended
        lines = r.iter_lines()
        next(lines)
    deadline = time.monotonic() + 5
    while server.metric("gpt2block_running_rows") != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.metric("gpt2block_running_rows") == 0
    made = server.metric("gpt2block_generation_tokens_total") - before
    assert made < 900  # the row stopped long before its max_tokens


def test_a_non_streaming_client_that_disconnects_frees_its_slot(server):
    with pytest.raises(httpx.TimeoutException):  # the client gives up while its row runs
        httpx.post(server.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": "tiny", "prompt": "Long", "max_tokens": 1000, "temperature": 0}, timeout=0.3)
    deadline = time.monotonic() + 5
    while server.metric("gpt2block_running_rows") != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.metric("gpt2block_running_rows") == 0


def test_logprobs_0_gives_the_chosen_tokens_logprob_only(client, model):
    a = client.completions.create(model="tiny", prompt="Hello", max_tokens=6, logprobs=0, seed=3, temperature=0.9)
    lp = a.choices[0].logprobs
    want = model.generate("Hello", 6, seed=3, temperature=0.9, logprobs=0)
    assert lp.tokens == [model.tokenizer.decode([t]) for t in want.token_ids]
    np.testing.assert_allclose(lp.token_logprobs, want.logprobs, rtol=1e-5, atol=1e-5)


BAD = [
    ({"prompt": "x"}, 400, "model"),
    ({"model": "tiny"}, 400, "prompt"),
    ({"model": "tiny", "prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ({"model": "tiny", "prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"model": "tiny", "prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 1024}, 400, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "n": 7}, 400, "n"),
    ({"model": "tiny", "prompt": "x", "n": 0}, 400, "n"),
    ({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"model": "tiny", "prompt": "x", "stop": [""]}, 400, "stop"),
    ({"model": "tiny", "prompt": "x", "logprobs": 21}, 400, "logprobs"),
    ({"model": "tiny", "prompt": "x", "seed": -1}, 400, "seed"),
    ({"model": "tiny", "prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
    ({"model": "tiny", "prompt": "x", "top_k": -2}, 400, "top_k"),
    ({"model": "tiny", "prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"model": "tiny", "prompt": [1, 99999]}, 400, "prompt"),
    ({"model": "tiny", "prompt": []}, 400, "prompt"),
    ({"model": "tiny", "prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ({"model": "tiny", "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"model": "gpt-4", "prompt": "x"}, 404, "model"),
]


@pytest.mark.parametrize("body,status,param", BAD, ids=[f"{s}-{p}-{i}" for i, (_, s, p) in enumerate(BAD)])
def test_bad_bodies_get_an_openai_error_naming_the_field(server, body, status, param):
    r = post(server, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and param in err["message"] and err["type"] == "invalid_request_error"


def test_other_errors(server):
    h = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server.url + "/v1/completions", content=b"{not json", headers=h, timeout=10)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", content=b"[1]", headers=h, timeout=10)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    big = json.dumps({"model": "tiny", "prompt": "x" * (1 << 20)})
    r = httpx.post(server.url + "/v1/completions", content=big, headers=h, timeout=10)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny", "messages": []}, headers=h, timeout=10)
    assert r.status_code == 400 and "chat template" in r.json()["error"]["message"]
    for key in ("wrong", None):
        r = post(server, {"model": "tiny", "prompt": "x"}, key=key)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).completions.create(
            model="tiny", prompt="x")
    models = httpx.get(server.url + "/v1/models", headers=h, timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny"] and models["data"][0]["max_model_len"] == 1024
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for name in ("gpt2block_requests_total{status=\"400\"}", "gpt2block_prompt_tokens_total",
                 "gpt2block_generation_tokens_total", "gpt2block_queue_depth", "gpt2block_running_rows",
                 "gpt2block_time_to_first_token_seconds_bucket", "gpt2block_inter_token_latency_seconds_bucket"):
        assert name in text


@pytest.fixture
def small_server(ckpt, tmp_path):
    s = ServerProcess(ckpt, tmp_path / "small.log", "--max-batch", "1", "--max-queue", "1", "--drain-timeout", "20",
                      "--served-model-name", "tiny")
    yield s
    s.stop()


def _open_stream(server, max_tokens):
    """A greedy streaming request that runs to max_tokens (no <|endoftext|> on the way), its first chunk read;
    -> (response context, line iterator)."""
    ctx = httpx.stream("POST", server.url + "/v1/completions", timeout=60,
                       json={"model": "tiny", "prompt": "Long", "max_tokens": max_tokens, "stream": True,
                             "temperature": 0, "stream_options": {"include_usage": True}})
    r = ctx.__enter__()
    assert r.status_code == 200
    lines = r.iter_lines()
    next(lines)
    return ctx, lines


def test_queue_overflow_gives_429_then_sigterm_drains_and_exits_0(small_server, model):
    s = small_server
    running, lines = _open_stream(s, 1000)  # holds the only slot
    queued = {}
    t = threading.Thread(target=lambda: queued.update(r=httpx.post(
        s.url + "/v1/completions", json={"model": "tiny", "prompt": "Next", "max_tokens": 5, "seed": 3}, timeout=60)))
    t.start()
    deadline = time.monotonic() + 10
    while s.metric("gpt2block_queue_depth") < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.metric("gpt2block_running_rows") == 1
    r = httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}, timeout=10)
    assert r.status_code == 429 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "queue_full"
    running.__exit__(None, None, None)  # the long stream goes away; the queued request runs
    t.join(30)
    assert queued["r"].status_code == 200
    assert queued["r"].json()["choices"][0]["text"] == model.generate("Next", 5, seed=3).text

    # SIGTERM while a stream runs: it finishes, new requests get 503 (or find the port closed), exit 0
    ctx, lines = _open_stream(s, 300)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        r = httpx.post(s.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}, timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
        assert httpx.get(s.url + "/health", timeout=5).status_code == 503
    except httpx.ConnectError:
        pass
    rest = [ln for ln in lines if ln]
    ctx.__exit__(None, None, None)
    assert rest[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in rest[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 300  # it ran to its end
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert s.proc.wait(30) == 0, s.log()


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["term-term", "term-int"])
def test_a_second_signal_during_the_drain_ends_the_requests_and_exits_1(small_server, second):
    s = small_server
    ctx, lines = _open_stream(s, 1000)  # about 2 s on the NumPy backend, far past the checks below
    s.proc.send_signal(signal.SIGTERM)  # drains: the stream would run to its end (drain timeout 20 s)
    time.sleep(0.05)
    t0 = time.monotonic()
    s.proc.send_signal(second)
    status = s.proc.wait(10)
    took = time.monotonic() - t0
    rest = []
    try:
        rest = [ln for ln in lines if ln]
    except httpx.HTTPError:  # the connection closed under the stream: no more lines
        pass
    ctx.__exit__(None, None, None)
    assert status == 1, s.log()
    assert took < 3, f"the server took {took:.1f} s to exit after the second signal"
    chunks = [json.loads(ln[6:]) for ln in rest if ln != "data: [DONE]"]
    assert not any(c.get("usage", {}).get("completion_tokens") == 1000 for c in chunks)  # it did not run to its end
    errors = [c["error"] for c in chunks if "error" in c]
    assert not errors or errors[0]["code"] == "shutting_down"
    assert "a second signal ended the drain early" in s.log()


def _engine_process(pid: int) -> int:
    """The server's engine process: its one child that multiprocessing spawned (Linux's /proc)."""
    kids = [int(k) for k in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    spawned = [k for k in kids if "multiprocessing" in open(f"/proc/{k}/cmdline").read()
               and "resource_tracker" not in open(f"/proc/{k}/cmdline").read()]
    assert len(spawned) == 1, [open(f"/proc/{k}/cmdline").read() for k in kids]
    return spawned[0]


def test_the_engine_runs_in_its_own_process_and_ends_with_the_server(small_server):
    """The engine is a child process of the server (the HTTP side's event loop has the GIL of its own); after a
    drain it is gone too."""
    s = small_server
    child = _engine_process(s.proc.pid)
    ctx, lines = _open_stream(s, 20)
    rest = [ln for ln in lines if ln]
    ctx.__exit__(None, None, None)
    assert rest[-1] == "data: [DONE]"
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(30) == 0, s.log()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        try:  # a zombie until its parent's exit is reaped: gone as a process when its state is Z or X
            if open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] in "ZX":
                break
        except OSError:
            break
        time.sleep(0.05)
    else:
        assert not os.path.exists(f"/proc/{child}"), "the engine process outlived the server"


def test_an_engine_process_that_dies_ends_its_requests_and_the_server_exits_1(small_server):
    s = small_server
    ctx, lines = _open_stream(s, 1000)
    os.kill(_engine_process(s.proc.pid), signal.SIGKILL)
    rest = []
    try:
        rest = [ln for ln in lines if ln]
    except httpx.HTTPError:  # the connection closed under the stream
        pass
    ctx.__exit__(None, None, None)
    chunks = [json.loads(ln[6:]) for ln in rest if ln != "data: [DONE]"]
    assert not any(c.get("usage", {}).get("completion_tokens") == 1000 for c in chunks)
    errors = [c["error"] for c in chunks if "error" in c]
    assert errors and "engine process ended" in errors[0]["message"], rest[-3:]
    assert s.proc.wait(30) == 1, s.log()
    assert "engine process ended" in s.log()


def test_stream_events_rendered_as_the_json_of_the_chunk(model):
    """_Answer.sse (the head rendered once per request) writes the characters json.dumps writes for the chunk."""
    from gpt2block.sampler import SamplingParams
    from gpt2block.server import Checked, _Answer, _sse

    c = Checked([[1, 2, 3]], ["abc"], 2, SamplingParams(), 10, 0, [], 2, False, True, True)
    answer = _Answer(c, model.tokenizer, "tiny")
    lp = {"tokens": ["x"], "token_logprobs": [-0.5], "top_logprobs": [{"x": -0.5, "\u00e9": float("-inf")}],
          "text_offset": [0]}
    for pieces in ([(0, " word", None, None)], [(1, 'a"b\\c\n\u00e9\u4e2d\U0001F600\x01', lp, "stop")],
                   [(0, "", None, "length"), (1, "z", None, None)], []):
        assert answer.sse(pieces) == _sse(answer.chunk(pieces))


def test_two_replicas_answer_alike(server, ckpt, tmp_path):
    other = ServerProcess(ckpt, tmp_path / "replica.log", "--api-key", KEY, "--served-model-name", "tiny")
    try:
        answers = []
        for s in (server, other):
            assert httpx.get(s.url + "/health", timeout=5).status_code == 200
            answers.append(post(s, {"model": "tiny", "prompt": "Replica", "max_tokens": 10, "seed": 42}).json())
        assert answers[0]["choices"] == answers[1]["choices"]
    finally:
        other.stop()


def test_serve_refuses_device_without_cuda(ckpt):
    r = CliRunner().invoke(main, ["serve", "--model", str(ckpt), "--backend", "numpy", "--device", "1"])
    assert r.exit_code == 2 and "--device" in r.output


def test_load_benchmark_quick_runs_on_the_cpu(ckpt, tmp_path):
    import subprocess
    import sys

    from hf_checkpoints import REPO_ROOT

    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bench_serve.py"), "--model", str(ckpt),
                        "--backend", "numpy", "--quick", "--concurrency", "1,3", "--requests", "4", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    levels = json.loads(out.read_text())["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 3]
    for lv in levels:
        assert lv["errors"] == 0 and lv["rejected_429"] == 0 and lv["tokens"] > 0 and lv["tok_s"] > 0
        assert lv["equal"] == lv["answered"] == 4 and lv["offline_tokens"] >= lv["tokens"]
        assert lv["ttft_p50_ms"] <= lv["ttft_p99_ms"] and lv["itl_p50_ms"] <= lv["itl_p99_ms"]
    assert "| concurrency |" in r.stdout

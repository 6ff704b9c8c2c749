"""The generation loop on the NumPy runner: greedy equals full recomputation, seeds repeat,
stop strings (streamed and multi-token), <|endoftext|>, empty and too-long prompts, a full context."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt2block.backends import make_runner
from gpt2block.backends.base import BatchTooLarge, Cache, Runner
from gpt2block.checkpoint import load_model
from gpt2block.config import GPT2Config
from gpt2block.generate import GenerationWarning, RowText, generate
from gpt2block.sampler import SamplingParams
from gpt2block.tokenizer import Tokenizer

GREEDY = SamplingParams(temperature=0)
SAMPLED = SamplingParams(temperature=1.0, top_k=40, top_p=0.95)


@pytest.fixture(scope="module")
def tiny(tiny_ckpt):
    loaded = load_model(tiny_ckpt.path)
    return make_runner(loaded.weights, "numpy"), loaded.tokenizer


def collect():
    pieces = {}
    return pieces, lambda row, text: pieces.setdefault(row, []).append(text)


def test_greedy_equals_argmax_of_full_recomputation(tiny):
    runner, tok = tiny
    prompt = "The engine keeps each block"
    (res,) = generate(runner, tok, [prompt], max_new_tokens=16, params=GREEDY)
    seq = list(res.prompt_ids)
    ids = res.token_ids + ([tok.eot_id] if res.stop_reason == "eot" else [])
    for t in ids:
        assert int(np.argmax(runner.forward(seq)[-1])) == t
        seq.append(t)
    assert res.stop_reason in ("eot", "length")
    assert res.text == tok.decode(res.token_ids)


def test_greedy_with_a_penalty_takes_the_sampling_path_and_still_matches(tiny):
    runner, tok = tiny
    params = SamplingParams(temperature=0, repetition_penalty=1.3)
    (res,) = generate(runner, tok, ["Tokens become vectors"], max_new_tokens=10, params=params)
    seq = list(res.prompt_ids)
    for t in res.token_ids:
        z = runner.forward(seq)[-1].copy()
        seen = np.unique(seq)
        z[seen] = np.where(z[seen] > 0, z[seen] / 1.3, z[seen] * 1.3)
        assert int(np.argmax(z)) == t
        seq.append(t)


def test_same_seed_repeats_exactly_and_another_seed_differs(tiny):
    runner, tok = tiny
    run = lambda seed: [r.token_ids for r in generate(runner, tok, ["A language model"], 24, SAMPLED, seed=seed,
                                                     num_samples=2)]
    a, b, c = run(11), run(11), run(12)
    assert a == b
    assert a != c


def test_rows_of_a_batch_equal_running_each_alone(tiny):
    runner, tok = tiny
    prompts = ["Quick brown foxes", "Numbers like 1024 appear in", "When the weather is cold the river"]
    together = generate(runner, tok, prompts, 12, GREEDY)
    for p, r in zip(prompts, together):
        (alone,) = generate(runner, tok, [p], 12, GREEDY)
        assert r.token_ids == alone.token_ids and r.prompt == p


def test_num_samples_rows_are_prompt_major(tiny):
    runner, tok = tiny
    res = generate(runner, tok, ["first", "second"], 5, SAMPLED, seed=3, num_samples=3)
    assert [(r.prompt, r.sample) for r in res] == [("first", 0), ("first", 1), ("first", 2),
                                                   ("second", 0), ("second", 1), ("second", 2)]
    assert len({tuple(r.token_ids) for r in res[:3]}) > 1  # the samples of one prompt differ
    assert res[0].timing is res[5].timing and res[0].timing.new_tokens == sum(r.new_tokens for r in res)


def test_streamed_text_equals_the_result(tiny):
    runner, tok = tiny
    pieces, on_token = collect()
    res = generate(runner, tok, ["The cache remembers", "Sampling picks"], 20, SAMPLED, seed=5, on_token=on_token)
    for b, r in enumerate(res):
        assert "".join(pieces.get(b, [])) == r.text


def test_a_multi_token_stop_string_cuts_the_text_and_is_never_streamed(tiny):
    runner, tok = tiny
    prompt = "Every backend reads"
    (free,) = generate(runner, tok, [prompt], 30, GREEDY)
    # a stop string spanning tokens 3..6 of the free run
    start = len(tok.decode(free.token_ids[:3]))
    stop = tok.decode(free.token_ids[:6])[start:]
    assert len(free.token_ids) >= 6 and stop  # the stop string is made of 3 generated tokens
    pieces, on_token = collect()
    (res,) = generate(runner, tok, [prompt], 30, GREEDY, stop=[stop, "never-appears-zzz"], on_token=on_token)
    cut = free.text.find(stop)
    assert res.stop_reason == "stop" and res.stop_string == stop
    assert res.text == free.text[:cut]
    assert "".join(pieces.get(0, [])) == res.text
    assert res.token_ids == free.token_ids[:len(res.token_ids)]


def test_empty_prompt_starts_from_endoftext(tiny):
    runner, tok = tiny
    (res,) = generate(runner, tok, [""], 4, GREEDY)
    assert res.prompt_ids == [tok.eot_id]
    assert int(np.argmax(runner.forward([tok.eot_id])[-1])) == (res.token_ids or [tok.eot_id])[0]


def test_too_long_prompt_keeps_its_last_tokens_with_a_warning(tiny):
    runner, tok = tiny
    n_ctx = runner.config.n_ctx
    text = "Quick brown foxes jump over lazy dogs. " * 20
    ids = tok.encode(text)
    assert len(ids) > n_ctx
    with pytest.warns(GenerationWarning, match=f"keeping its last {n_ctx - 1} tokens"):
        (res,) = generate(runner, tok, [text], 1, GREEDY)
    assert res.prompt_ids == ids[-(n_ctx - 1):]


# ---- a scripted runner: each row's logits point at a chosen next token (exercises the loop alone)

class ScriptedRunner(Runner):
    backend, precision = "scripted", "fp32"

    def __init__(self, vocab, n_ctx, scripts):
        self.config = GPT2Config(n_layer=1, n_embd=64, n_head=1, n_positions=n_ctx, vocab_size=vocab)
        self.scripts = scripts  # row -> list of tokens it "predicts", in order
        self.fed = {}  # row -> tokens fed after the prompt

    def new_cache(self, batch):
        return Cache(batch, self.config.n_ctx)

    def _next(self, row):
        script = self.scripts[row]
        step = len(self.fed[row])
        z = np.zeros(self.config.vocab_size, np.float32)
        z[script[min(step, len(script) - 1)]] = 10.0
        return z

    def prefill(self, cache, row, ids, all_logits=False):
        cache.check_room(row, len(ids))
        cache.pos[row] += len(ids)
        self.fed[row] = []
        return self._next(row)

    def decode(self, cache, tokens):
        out = []
        for b, t in enumerate(tokens):
            cache.check_room(b, 1)
            cache.pos[b] += 1
            self.fed[b].append(int(t))
            out.append(self._next(b))
        return np.stack(out)


class AheadRunner(ScriptedRunner):
    """greedy_steps as the CUDA backend runs it: one step queued ahead of the consumer, fed by
    the step before (every row, finished or not), taken back when the stream is closed."""

    def _greedy_steps(self, cache, tokens, max_steps):
        ahead = [self.decode_greedy(cache, tokens)]
        launched = 1
        try:
            while ahead:
                out = ahead.pop()
                if (max_steps is None or launched < max_steps) and (cache.pos < cache.n_ctx).all():
                    ahead.append(self.decode_greedy(cache, out))
                    launched += 1
                yield out
        finally:
            if ahead:  # closed with a step queued: take it back
                cache.pos -= 1
                for b in range(cache.batch):
                    self.fed[b].pop()


@pytest.fixture(scope="module")
def small_tok(tiny_ckpt):
    return Tokenizer.from_dir(tiny_ckpt.path)


@pytest.mark.parametrize("runner_type", [ScriptedRunner, AheadRunner])
def test_endoftext_stops_a_row_and_finished_rows_keep_no_output(small_tok, runner_type):
    tok = small_tok
    a, b = tok.encode(" model"), tok.encode(" the engine reads the same offsets")
    runner = runner_type(tok.vocab_size, 64, {0: a + [tok.eot_id] + b, 1: b})
    res = generate(runner, tok, ["x", "y"], max_new_tokens=len(b), params=GREEDY)
    assert res[0].stop_reason == "eot" and res[0].token_ids == a and res[0].text == tok.decode(a)
    assert res[1].stop_reason == "length" and res[1].token_ids == b
    # a finished row may go on being fed (greedy_steps feeds each row its own argmax); what it
    # makes after its <|endoftext|> is never taken
    assert runner.fed[0][:len(a) + 1] == a + [tok.eot_id]


@pytest.mark.parametrize("runner_type", [ScriptedRunner, AheadRunner])
def test_a_long_prompt_is_cut_so_that_every_row_gets_its_new_tokens(small_tok, runner_type):
    tok = small_tok
    n_ctx = 16
    long_prompt = tok.encode("Quick brown foxes jump over lazy dogs; seven wizards quietly judge")[: n_ctx - 2]
    assert len(long_prompt) == n_ctx - 2
    filler = tok.encode(" warm bread")
    script = (filler * 40)[:30]
    runner = runner_type(tok.vocab_size, n_ctx, {0: script, 1: script})
    messages = []
    res = generate(runner, tok, [tok.decode(long_prompt), "a"], max_new_tokens=12, params=GREEDY,
                   log=messages.append)
    assert res[0].prompt_ids == long_prompt[-4:]
    assert messages == [f"the prompt has {n_ctx - 2} tokens; the context holds 16, 12 of them for new tokens: "
                        "keeping its last 4 tokens"]
    for r in res:
        assert r.stop_reason == "length" and r.token_ids == script[:12]
    # the whole context used, never more: a runner's cache refuses a token past n_ctx (ContextFull)
    with pytest.raises(ValueError, match="max_new_tokens must be at most 15"):
        generate(runner, tok, ["a"], max_new_tokens=16, params=GREEDY)
    (r,) = generate(runner_type(tok.vocab_size, n_ctx, {0: script}), tok, ["a"], max_new_tokens=15, params=GREEDY)
    assert r.token_ids == script[:15]


def test_greedy_steps_equal_decode_greedy_one_step_at_a_time(tiny):
    runner, _ = tiny
    rng = np.random.default_rng()
    prompts = [rng.integers(0, runner.config.vocab_size, n) for n in (3, 5)]
    caches = [runner.new_cache(2) for _ in range(2)]
    for c in caches:
        for row, p in enumerate(prompts):
            runner.prefill(c, row, p)
    tok = rng.integers(0, runner.config.vocab_size, 2)
    want, t = [], tok
    for _ in range(4):
        t = runner.decode_greedy(caches[0], t)
        want.append(t)
    got = list(runner.greedy_steps(caches[1], tok, max_steps=4))
    np.testing.assert_array_equal(np.stack(got), np.stack(want))
    np.testing.assert_array_equal(caches[0].pos, caches[1].pos)


@pytest.mark.parametrize("runner_type", [ScriptedRunner, AheadRunner])
def test_greedy_steps_end_at_a_full_context_and_closing_takes_back_the_step_ahead(small_tok, runner_type):
    runner = runner_type(small_tok.vocab_size, 10, {0: [7] * 20, 1: [8] * 20})
    cache = runner.new_cache(2)
    runner.prefill(cache, 0, [1, 2, 3])
    runner.prefill(cache, 1, [1])
    steps = list(runner.greedy_steps(cache, np.array([7, 8])))
    assert len(steps) == 7 and cache.pos.tolist() == [10, 8]  # row 0 filled its context
    cache.pos[:] = [3, 1]
    steps = runner.greedy_steps(cache, np.array([7, 8]), max_steps=5)
    assert next(steps).tolist() == [7, 8] and next(steps).tolist() == [7, 8]
    steps.close()
    assert cache.pos.tolist() == [5, 3]  # two steps taken, none left queued
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        runner.greedy_steps(cache, np.array([7, 8]), max_steps=0)
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        runner.greedy_steps(cache, np.array([7, 8]), max_steps=2.5)


def test_a_prompt_too_long_for_max_new_tokens_keeps_its_last_tokens_and_max_new_tokens_is_honoured(tiny):
    runner, tok = tiny
    n_ctx = runner.config.n_ctx
    ids = tok.encode("Numbers like 1024, 768, 50257 and 3.14159 appear in configuration files. " * 4)[: n_ctx - 3]
    no_eot = SamplingParams(temperature=0.8, top_k=0)
    with pytest.warns(GenerationWarning, match=f"keeping its last {n_ctx - 20} tokens"):
        res = generate(runner, tok, [tok.decode(ids), "Twelve"], 20, no_eot, seed=2)
    assert res[0].prompt_ids == tok.encode(tok.decode(ids))[-(n_ctx - 20):]
    for r in res:
        assert r.stop_reason == "eot" or len(r.token_ids) == 20
        assert len(r.prompt_ids) + len(r.token_ids) <= n_ctx
    # a whole context of new tokens after a one-token prompt
    (full,) = generate(runner, tok, [""], n_ctx - 1, GREEDY)
    assert full.stop_reason == "eot" or len(full.token_ids) == n_ctx - 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"prompts": "not a list"}, TypeError, "lists of str"),
    ({"prompts": [1]}, TypeError, "prompt 0 must be a str"),
    ({"prompts": ["ok", "a\udcffb"]}, ValueError, "prompt 1 is not valid Unicode text: .* at character 1"),
    ({"prompts": []}, ValueError, "no prompts"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 64}, ValueError, "max_new_tokens must be at most 63"),
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an integer"),
    ({"num_samples": 0}, ValueError, "num_samples"),
    ({"num_samples": True}, TypeError, "num_samples"),
    ({"num_samples": 10**30}, BatchTooLarge, "rows need .* GiB of KV cache"),
    ({"stop": [""]}, ValueError, "stop string"),
    ({"seed": -1}, ValueError, "seed must be in"),
    ({"seed": 2**64}, ValueError, "seed must be in"),
    ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ({"logprobs": 21}, ValueError, "top_logprobs must be in"),
])
def test_bad_arguments(tiny, kwargs, error, match):
    runner, tok = tiny
    args = {"prompts": ["x"], "max_new_tokens": 2, "num_samples": 1, "stop": (), "seed": 0, "logprobs": None} | kwargs
    with pytest.raises(error, match=match):
        generate(runner, tok, args["prompts"], args["max_new_tokens"], GREEDY, stop=args["stop"],
                 num_samples=args["num_samples"], seed=args["seed"], logprobs=args["logprobs"])


# ---- the stop-string streamer, property-tested on the small tokenizer

WORDS = ["the", " engine", " reads", " same", " offsets", "é", "ü", " 1024", ",", ".", "\n", " bread", "🙂"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), st.data())
def test_streamer_releases_exactly_the_text_before_the_first_stop(small_tok, words, data):
    text = "".join(words)
    ids = small_tok.encode(text)
    a = data.draw(st.integers(0, len(text) - 1))
    b = data.draw(st.integers(a + 1, min(len(text), a + 8)))
    stops = [text[a:b], data.draw(st.sampled_from(["zzz", "qq", "\t"]))]
    rt = RowText(small_tok, stops)
    out = []
    for t in ids:
        out.append(rt.push(t))
        if rt.stop_string is not None:
            break
    if rt.stop_string is None:
        out.append(rt.finish())
    full = small_tok.decode(ids)
    first = min(i for i in (full.find(s) for s in stops) if i >= 0)
    assert "".join(out) == full[:first] == rt.text
    assert rt.stop_string is not None


@settings(max_examples=25, deadline=None)
@given(temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]), top_k=st.integers(0, 600), top_p=st.floats(0.05, 1.0),
       penalty=st.floats(0.5, 2.0), seed=st.integers(0, 2**32), num_samples=st.integers(1, 3),
       max_new=st.integers(1, 12), stop=st.lists(st.sampled_from(["e", " the", "\n", "zz"]), max_size=2))
def test_any_generation_options_repeat_and_keep_their_promises(tiny, temperature, top_k, top_p, penalty, seed,
                                                                num_samples, max_new, stop):
    runner, tok = tiny
    params = SamplingParams(temperature, top_k, top_p, repetition_penalty=penalty)
    pieces, on_token = collect()
    a = generate(runner, tok, ["Sampling picks a token", ""], max_new, params, seed, stop, num_samples, on_token)
    b = generate(runner, tok, ["Sampling picks a token", ""], max_new, params, seed, stop, num_samples)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert len(a) == 2 * num_samples
    for row, r in enumerate(a):
        assert r.stop_reason in ("eot", "stop", "length")
        assert len(r.token_ids) <= max_new and tok.eot_id not in r.token_ids
        assert (r.stop_reason == "length") == (len(r.token_ids) == max_new and r.stop_reason != "stop")
        assert "".join(pieces.get(row, [])) == r.text
        assert not any(s in r.text for s in stop)
        if r.stop_reason == "stop":
            assert r.stop_string in stop and tok.decode(r.token_ids).startswith(r.text + r.stop_string)
        else:
            assert r.text == tok.decode(r.token_ids)


# ---- the Runner interface the generation loop uses (defaults in base.Runner; the NumPy runner's own)


@pytest.mark.parametrize("chunk_tokens", [2048, 40])
def test_batched_prefill_equals_each_row_alone(tiny, monkeypatch, chunk_tokens):
    from gpt2block.backends import numpy_ref

    monkeypatch.setattr(numpy_ref, "PREFILL_CHUNK_TOKENS", chunk_tokens)  # 40: rows split over several passes
    runner, _ = tiny
    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, 512, n) for n in (1, 2, 31, 32, 33, 60, 7)]
    cache = runner.new_cache(8)
    runner.prefill(cache, 3, [5, 6])  # a row that already holds tokens continues from its position
    rows = [0, 1, 2, 4, 5, 6, 3]
    got = runner.prefill_batch(cache, rows, prompts)  # [7, V]
    base = Runner.prefill_batch(runner, runner.new_cache(8), [0], [prompts[0]])  # the default: row by row
    assert got.shape == (7, 512) and got.dtype == np.float32
    for i, (r, ids) in enumerate(zip(rows, prompts)):
        alone = runner.new_cache(1)
        if r == 3:
            runner.prefill(alone, 0, [5, 6])
        want = runner.prefill(alone, 0, ids)
        np.testing.assert_allclose(got[i], want, atol=1e-4, rtol=0)
        assert cache.pos[r] == len(ids) + (2 if r == 3 else 0)
    np.testing.assert_allclose(base[0], got[0], atol=1e-4, rtol=0)
    # the next decode step reads what the batched prefill wrote
    step = runner.decode(cache, np.full(8, 9))
    alone = runner.new_cache(1)
    runner.prefill(alone, 0, prompts[2])
    np.testing.assert_allclose(step[rows[2]], runner.decode(alone, np.array([9]))[0], atol=1e-4, rtol=0)


def test_batched_prefill_refuses_bad_rows(tiny):
    runner, _ = tiny
    cache = runner.new_cache(2)
    with pytest.raises(ValueError, match="a row appears twice"):
        runner.prefill_batch(cache, [0, 0], [[1], [2]])
    with pytest.raises(ValueError, match="row 2 is outside"):
        runner.prefill_batch(cache, [2], [[1]])
    with pytest.raises(ValueError, match="got 1 rows and 2 id lists"):
        runner.prefill_batch(cache, [0], [[1], [2]])
    with pytest.raises(ValueError, match="no token ids"):
        runner.prefill_batch(cache, [0], [[]])


def test_sample_step_is_decode_then_the_sampler_at_the_caches_positions(tiny):
    from gpt2block.sampler import SamplingBatch, sample

    runner, _ = tiny
    params = [SamplingParams(top_k=0, top_p=0.9), SamplingParams(temperature=0.7, presence_penalty=1.0)]
    batch = SamplingBatch(params, [7, 7], [0, 1], [[1, 2, 3], [4]], [[], [9, 9]], top_logprobs=2)
    caches = [runner.new_cache(2) for _ in range(2)]
    first = runner.sample_prefill(caches[0], [[1, 2, 3], [4]], batch)
    logits = runner.prefill_batch(caches[1], [0, 1], [[1, 2, 3], [4]])
    want = sample(logits, params, seeds=7, positions=[3, 1], sample_indices=[0, 1], prompt_ids=batch.prompt_ids,
                  output_ids=batch.output_ids, top_logprobs=2)
    np.testing.assert_array_equal(first.ids, want.ids)
    out = runner.sample_step(caches[0], first.ids, batch)
    logits = runner.decode(caches[1], first.ids)
    want = sample(logits, params, seeds=7, positions=[4, 2], sample_indices=[0, 1], prompt_ids=batch.prompt_ids,
                  output_ids=batch.output_ids, top_logprobs=2)
    np.testing.assert_array_equal(out.ids, want.ids)
    np.testing.assert_array_equal(out.top_ids, want.top_ids)
    with pytest.raises(ValueError, match="sample_step got 2 sampling rows for a batch of 3"):
        runner.sample_step(runner.new_cache(3), np.zeros(3, np.int64), batch)


def test_check_batch_names_the_rows_and_the_memory(tiny):
    runner, _ = tiny
    runner.check_batch(8)
    per_row = runner.state_bytes(1)
    assert per_row == 2 * 2 * 64 * 128 * 4
    with pytest.raises(BatchTooLarge, match=r"10000000000 rows need .* GiB of KV cache \(0.125 MiB per row\)"):
        runner.check_batch(10**10)
    with pytest.raises(ValueError, match="batch must be a positive int"):
        runner.check_batch(0)

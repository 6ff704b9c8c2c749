"""The Python API (gpt2block.load and Model) on the NumPy backend: every documented call, its result shapes,
its defaults (the CLI's), its errors (each naming the argument), logits and perplexity against transformers."""

import inspect
import subprocess
import sys

import numpy as np
import pytest
import torch

import gpt2block
from gpt2block.backends import BackendError
from gpt2block.backends.base import BatchTooLarge
from gpt2block.checkpoint import CheckpointError
from gpt2block.generate import DEFAULT_MAX_NEW_TOKENS, GenerationResult
from gpt2block.perplexity import PerplexityError
from gpt2block.sampler import SamplingError, SamplingParams

from hf_checkpoints import make_tokenizer_json
from test_perplexity import TEXT, guide_perplexity


@pytest.fixture(scope="module")
def model(tiny_ckpt):
    return gpt2block.load(str(tiny_ckpt.path), backend="numpy")


def test_load_gives_a_model_with_its_tokenizer_and_config(model, tiny_ckpt):
    assert isinstance(model, gpt2block.Model)
    assert model.backend == "numpy" and model.precision == "fp32" and model.config.n_ctx == 64
    assert model.tokenizer.vocab_size == 512 and model.tokenizer.decode(model.tokenizer.encode("Hello")) == "Hello"
    assert "numpy (fp32)" in repr(model)
    assert gpt2block.load(tiny_ckpt.path, backend="numpy", precision="fp64").precision == "fp64"  # a Path works


def test_load_refuses_bad_arguments_by_name(tiny_ckpt, tmp_path):
    with pytest.raises(BackendError, match="unknown backend 'tpu'"):
        gpt2block.load(str(tiny_ckpt.path), backend="tpu")
    with pytest.raises(BackendError, match="precision bf16 is a CUDA mode"):
        gpt2block.load(str(tiny_ckpt.path), backend="numpy", precision="bf16")
    with pytest.raises(TypeError, match="backend must be a str"):
        gpt2block.load(str(tiny_ckpt.path), backend=None)
    with pytest.raises(CheckpointError, match="no-such"):
        gpt2block.load(str(tmp_path / "no-such"), backend="numpy")


def test_a_tokenizer_dir_replaces_the_checkpoints(tiny_ckpt, tmp_path):
    (tmp_path / "tokenizer.json").write_text(make_tokenizer_json(300), encoding="utf-8")
    m = gpt2block.load(str(tiny_ckpt.path), backend="numpy", tokenizer_dir=tmp_path)
    assert m.tokenizer.vocab_size == 300 and m.tokenizer.eot_id == 299
    r = m.generate("Hello", 4, temperature=0)
    assert r.prompt_ids == m.tokenizer.encode("Hello")
    (tmp_path / "tokenizer.json").write_text(make_tokenizer_json(600), encoding="utf-8")
    with pytest.raises(CheckpointError, match="the tokenizer has 600 tokens but the model's vocab_size is 512"):
        gpt2block.load(str(tiny_ckpt.path), backend="numpy", tokenizer_dir=tmp_path)


def test_generate_one_prompt(model):
    r = model.generate("Hello", max_new_tokens=8, temperature=0.8, top_p=0.95, seed=0)
    assert isinstance(r, GenerationResult)
    assert r.stop_reason in ("eot", "length", "stop") and r.seed == 0
    assert r.text == model.tokenizer.decode(r.token_ids) and r.prompt == "Hello"
    assert (r.stop_reason == "length") == (len(r.token_ids) == 8)
    t = r.timing
    assert t.prefill_ms > 0 and t.wall_s >= t.total_s > 0 and t.new_tokens == len(r.token_ids)
    assert t.decode_tokens == max(len(r.token_ids) - 1, 0)
    assert t.decode_tokens_per_s == pytest.approx(t.decode_tokens / t.decode_s)
    assert model.generate("Hello", max_new_tokens=8, temperature=0.8, top_p=0.95, seed=0).token_ids == r.token_ids


def test_result_shapes_for_lists_and_n(model):
    many = model.generate(["Hello", "Quick brown", ""], 4, temperature=0)
    assert [r.prompt for r in many] == ["Hello", "Quick brown", ""]
    samples = model.generate("Hello", 4, n=3, seed=1)
    assert len(samples) == 3 and [r.sample for r in samples] == [0, 1, 2]
    assert len({tuple(r.token_ids) for r in samples}) > 1
    grid = model.generate(["Hello", "Quick brown"], 4, n=2, seed=1)
    assert [[(r.prompt, r.sample) for r in rs] for rs in grid] == [[("Hello", 0), ("Hello", 1)],
                                                                   [("Quick brown", 0), ("Quick brown", 1)]]
    assert [r.token_ids for r in grid[0]] == [r.token_ids for r in samples[:2]]  # the batch around a row is no matter
    assert model.generate(("Hello",), 4, temperature=0)[0].token_ids == many[0].token_ids  # a tuple is a list


def test_a_row_gives_the_same_tokens_alone_or_in_any_batch(model):
    kw = dict(max_new_tokens=10, temperature=1.3, top_k=0, seed=77)
    alone = model.generate("Every backend reads", **kw)
    batch = model.generate(["Twelve blocks later", "Every backend reads", "x"], **kw)
    assert batch[1].token_ids == alone.token_ids


def test_stream_yields_the_text_then_holds_the_result(model):
    s = model.generate("The cache remembers", 12, seed=5, stream=True)
    assert isinstance(s, gpt2block.TextStream)
    with pytest.raises(RuntimeError, match="not been read to its end"):
        s.result
    pieces = list(s)
    assert all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == s.result.text
    assert s.result.token_ids == model.generate("The cache remembers", 12, seed=5).token_ids


def test_stream_of_several_rows_says_whose_piece_it_is(model):
    s = model.generate(["a", "b"], 8, n=2, seed=2, stream=True)
    pieces = list(s)
    assert all(isinstance(p, gpt2block.api.StreamPiece) for p in pieces)
    for i, rs in enumerate(s.result):
        for r in rs:
            assert "".join(p.text for p in pieces if (p.prompt, p.sample) == (i, r.sample)) == r.text


def test_stop_strings(model):
    free = model.generate("Numbers", 20, temperature=0)
    stop = free.text[3:6]
    r = model.generate("Numbers", 20, temperature=0, stop=stop)
    assert r.stop_reason == "stop" and r.stop_string == stop and r.text == free.text[:free.text.find(stop)]
    assert model.generate("Numbers", 20, temperature=0, stop=[stop, "zzz"]).text == r.text


def test_a_fresh_seed_is_reported_and_repeats(model):
    a = model.generate("Sampling picks", 10)
    assert 0 <= a.seed < 2**64
    assert model.generate("Sampling picks", 10, seed=a.seed).token_ids == a.token_ids


def test_logprobs_are_the_raw_log_softmax_of_the_models_logits(model):
    r = model.generate("Tokens become", 6, temperature=0.9, repetition_penalty=1.3, seed=3, logprobs=3)
    z = model.logits(r.prompt_ids + r.token_ids).astype(np.float64)  # [T, V]
    lp = z - z.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    P = len(r.prompt_ids)
    for i, t in enumerate(r.token_ids):
        assert r.logprobs[i] == pytest.approx(lp[P - 1 + i, t], abs=1e-4)
        top = np.argsort(-lp[P - 1 + i], kind="stable")[:3]
        assert [k for k, _ in r.top_logprobs[i]] == top.tolist()
    assert model.generate("Tokens become", 3, temperature=0, logprobs=0).top_logprobs is None


def test_greedy_through_the_sampler_equals_greedy_through_the_step_stream(model):
    stream = model.generate(["Quick brown", "The engine"], 12, temperature=0)
    sampled = model.generate(["Quick brown", "The engine"], 12, temperature=0, logprobs=0)
    assert [r.token_ids for r in stream] == [r.token_ids for r in sampled]


def test_logits_of_text_and_ids_equal_transformers(model, tiny_ckpt):
    ids = model.tokenizer.encode("Quick brown foxes jump over lazy dogs")
    z = model.logits("Quick brown foxes jump over lazy dogs")
    assert z.shape == (len(ids), 512) and z.dtype == np.float32
    np.testing.assert_array_equal(z, model.logits(ids))
    np.testing.assert_array_equal(z, model.logits(np.array(ids)))
    with torch.no_grad():
        ref = tiny_ckpt.model(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(z, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("arg, error, match", [
    ("", ValueError, "encodes to no tokens"),
    ([], ValueError, "no token ids"),
    ([1, 512], ValueError, "token id 512 is outside the vocabulary"),
    ([-1], ValueError, "token id -1"),
    ([1.5, 2.0], TypeError, "a str or a 1-D sequence of token ids"),
    ([[1, 2]], TypeError, "1-D"),
    (list(range(65)), ValueError, "65 tokens do not fit the context of 64"),
    ("a\udcffb", ValueError, "not valid Unicode text"),
])
def test_logits_refuses_bad_input(model, arg, error, match):
    with pytest.raises(error, match=match):
        model.logits(arg)


def test_perplexity_equals_the_guide_and_the_cli(model, tiny_ckpt, tmp_path):
    ids = model.tokenizer.encode(TEXT)
    res = model.perplexity(TEXT, max_length=40, stride=20)
    assert res.ppl == pytest.approx(guide_perplexity(tiny_ckpt.model, ids, 40, 20), rel=1e-4)
    assert model.perplexity(ids, 40, 20).ppl == res.ppl
    default = model.perplexity(TEXT)
    assert (default.max_length, default.stride) == (64, 32)
    from click.testing import CliRunner

    from gpt2block.cli import main

    f = tmp_path / "t.txt"
    f.write_text(TEXT)
    out = CliRunner().invoke(main, ["perplexity", str(f), "--model", str(tiny_ckpt.path), "--backend", "numpy"])
    assert out.stdout == f"perplexity {default.ppl:.6f}\n"
    with pytest.raises(PerplexityError, match="at least 2 tokens"):
        model.perplexity("a")
    with pytest.raises(PerplexityError, match="stride"):
        model.perplexity(TEXT, 32, 33)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_finite_logits_are_a_clear_error(tiny_ckpt):
    m = gpt2block.load(str(tiny_ckpt.path), backend="numpy")
    m.runner.ln_f_g = np.full_like(m.runner.ln_f_g, 3e38)  # finite weights, overflowing activations
    with pytest.raises(PerplexityError, match="NaN or \\+inf"):
        m.perplexity(TEXT)
    for t in (0, 1):
        with pytest.raises(SamplingError, match="logits of row 0 contain"):
            m.generate("hi", 3, temperature=t)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"prompt": 5}, TypeError, "prompt must be a str or a list of str"),
    ({"prompt": ["a", 5]}, TypeError, "prompt 1 must be a str"),
    ({"prompt": []}, ValueError, "no prompts"),
    ({"prompt": "a\udcff"}, ValueError, "prompt 0 is not valid Unicode text"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 64}, ValueError, "max_new_tokens must be at most 63"),
    ({"max_new_tokens": 10**30}, ValueError, "max_new_tokens must be at most 63"),
    ({"max_new_tokens": "8"}, TypeError, "max_new_tokens must be an integer"),
    ({"temperature": float("nan")}, SamplingError, "temperature"),
    ({"temperature": -1}, SamplingError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_k": -1}, SamplingError, "top_k"),
    ({"top_k": 1.0}, TypeError, "top_k"),
    ({"top_p": 0}, SamplingError, "top_p"),
    ({"min_p": 1.5}, SamplingError, "min_p"),
    ({"repetition_penalty": 0}, SamplingError, "repetition_penalty"),
    ({"presence_penalty": float("inf")}, SamplingError, "presence_penalty"),
    ({"frequency_penalty": -2.5}, SamplingError, "frequency_penalty"),
    ({"seed": -1}, SamplingError, "seed"),
    ({"seed": 2**64}, SamplingError, "seed"),
    ({"seed": "0"}, TypeError, "seed"),
    ({"n": 0}, ValueError, "num_samples"),
    ({"n": 10**30}, BatchTooLarge, "rows need .* GiB of KV cache"),
    ({"stop": ""}, ValueError, "stop string"),
    ({"stop": 5}, TypeError, "stop must be a str or a list of str"),
    ({"stream": "yes"}, TypeError, "stream must be True or False"),
    ({"logprobs": 21}, SamplingError, "top_logprobs must be in"),
    ({"logprobs": -1}, SamplingError, "top_logprobs must be in"),
])
def test_bad_generate_arguments_are_refused_by_name(model, kwargs, error, match):
    args = {"prompt": "Hello", "max_new_tokens": 4} | kwargs
    with pytest.raises(error, match=match):
        model.generate(**args)


def test_a_streams_arguments_are_checked_before_it_is_read(model):
    with pytest.raises(SamplingError, match="top_p"):
        model.generate("Hello", 4, top_p=2.0, stream=True)


def test_the_defaults_are_the_clis():
    sig = inspect.signature(gpt2block.Model.generate).parameters
    d = SamplingParams()
    assert sig["max_new_tokens"].default == DEFAULT_MAX_NEW_TOKENS == 64
    assert {k: sig[k].default for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                                        "presence_penalty", "frequency_penalty")} == vars(d)
    assert sig["seed"].default is None and sig["n"].default == 1 and sig["stream"].default is False


def test_the_api_imports_and_runs_without_cupy(tiny_ckpt):
    code = ("import sys; sys.modules['cupy'] = None\n"  # import cupy now fails, as on a machine without it
            "import gpt2block\n"
            f"m = gpt2block.load({str(tiny_ckpt.path)!r})\n"
            "r = m.generate('Hello', 3, temperature=0)\n"
            "assert m.backend == 'numpy' and len(r.token_ids) + (r.stop_reason == 'eot') >= 1\n"
            "assert not any(k.startswith('gpt2block.backends.cuda') for k in sys.modules), 'cuda imported'\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr

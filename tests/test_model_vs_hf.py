"""The whole model on the NumPy backend against transformers' GPT2LMHeadModel, and the KV cache against itself.

Checkpoints are random and written in Hugging Face's format (hf_checkpoints.make_hf_checkpoint);
the reference is the torch model in float32, eval mode. Limit: max |logit difference| <= 1e-4.
"""

import numpy as np
import pytest
import torch

from hf_checkpoints import make_hf_checkpoint
from gpt2block.backends import make_runner
from gpt2block.backends.base import ContextFull
from gpt2block.backends.numpy_ref import NumpyRunner
from gpt2block.checkpoint import load_model, load_weights, pack

LIMIT = 1e-4


def hf_logits(model, ids):  # [T] -> [T, V] float32
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].float().numpy()


def random_ids(vocab, n, seed):
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def check_against_hf(runner, model, ids):
    ours, ref = runner.forward(ids), hf_logits(model, ids)
    assert ours.shape == ref.shape and ours.dtype == np.float32
    diff = float(np.abs(ours - ref).max())
    assert diff <= LIMIT, f"max |logit difference| {diff:.3g} > {LIMIT}"
    np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))
    return diff


# ---------------------------------------------------------------- logits vs transformers

def test_tiny_logits_vs_hf(tiny_ckpt, tiny_weights):
    runner = make_runner(tiny_weights, "numpy")
    assert isinstance(runner, NumpyRunner)
    for n, seed in ((1, 0), (2, 1), (17, 2), (64, 3)):  # 64 = the whole context
        check_against_hf(runner, tiny_ckpt.model, random_ids(512, n, seed))


def test_tiny_text_logits_vs_hf(tiny_ckpt):
    lm = load_model(tiny_ckpt.path)
    ids = lm.tokenizer.encode("A language model reads a sequence of tokens and predicts the next one.")
    assert 5 < len(ids) < 64
    check_against_hf(make_runner(lm.weights, "numpy"), tiny_ckpt.model, ids)


@pytest.mark.parametrize("prefix", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_conventions_and_dtypes_vs_hf(tmp_path, prefix, dtype):
    c = make_hf_checkpoint(tmp_path / "c", 2, 128, 2, vocab_size=400, n_positions=48, seed=11,
                           prefix=prefix, dtype=dtype)
    check_against_hf(make_runner(load_weights(c.path), "numpy"), c.model, random_ids(400, 40, 5))


def test_packed_file_gives_the_same_logits(tmp_path, tiny_ckpt, tiny_weights):
    packed = load_weights(pack(tiny_ckpt.path, tmp_path / "tiny.safetensors"))
    ids = random_ids(512, 30, 6)
    np.testing.assert_array_equal(NumpyRunner(packed).forward(ids), NumpyRunner(tiny_weights).forward(ids))


@pytest.mark.slow
def test_gpt2_logits_vs_hf(gpt2_ckpt, gpt2_weights):
    runner = make_runner(gpt2_weights, "numpy")
    diff = check_against_hf(runner, gpt2_ckpt.model, random_ids(50257, 96, 7))
    assert diff > 0  # two different implementations: equal to the bit would mean we compared one with itself


@pytest.mark.slow
def test_gpt2_late_positions_vs_hf(gpt2_ckpt, gpt2_weights):
    """The last positions of the 1024 context, with the KV cache filled by one prefill."""
    ids = random_ids(50257, 1024, 8)
    runner = NumpyRunner(gpt2_weights)
    cache = runner.new_cache(1)
    runner.prefill(cache, 0, ids[:1000])
    ours = runner.prefill(cache, 0, ids[1000:], all_logits=True)  # [24, V]
    ref = hf_logits(gpt2_ckpt.model, ids)[1000:]
    assert float(np.abs(ours - ref).max()) <= LIMIT
    with pytest.raises(ContextFull):
        runner.decode(cache, np.array([1]))


# ---------------------------------------------------------------- the KV cache

def check_cached_decode(runner, ids, k):
    """Prefill ids[:k], then decode the rest one token at a time; compare with one full pass."""
    full = runner.forward(ids)  # [T, V]
    cache = runner.new_cache(1)
    steps = [runner.prefill(cache, 0, ids[:k])]
    for t in ids[k:]:
        steps.append(runner.decode(cache, np.array([t]))[0])
    cached = np.stack(steps)  # logits at positions k-1 .. T-1
    assert int(cache.pos[0]) == len(ids)
    diff = float(np.abs(cached - full[k - 1:]).max())
    assert diff <= LIMIT, diff
    return diff


@pytest.mark.parametrize("k", [1, 5, 31])
def test_tiny_kv_cache_decode_equals_recompute(tiny_weights, k):
    check_cached_decode(NumpyRunner(tiny_weights), random_ids(512, 40, 9), k)


@pytest.mark.slow
def test_gpt2_kv_cache_decode_equals_recompute(gpt2_weights):
    check_cached_decode(NumpyRunner(gpt2_weights), random_ids(50257, 24, 10), 8)


def test_batched_rows_equal_each_run_alone(tiny_ckpt, tiny_weights):
    """Batch 3, prompts of different lengths, each row prefilled on its own, then batched decode steps."""
    runner = NumpyRunner(tiny_weights)
    prompts = [random_ids(512, n, 20 + n) for n in (3, 11, 1)]
    steps = [random_ids(512, 6, 30 + i) for i in range(3)]  # the tokens fed at each decode step, per row
    cache = runner.new_cache(3)
    first = [runner.prefill(cache, b, p) for b, p in enumerate(prompts)]
    batched = [np.stack(first)]
    for s in range(6):
        batched.append(runner.decode(cache, np.array([steps[b][s] for b in range(3)])))
    batched = np.stack(batched, axis=1)  # [B, 7, V]
    np.testing.assert_array_equal(cache.pos, [3 + 6, 11 + 6, 1 + 6])
    for b in range(3):
        seq = prompts[b] + steps[b]
        alone = runner.forward(seq)[len(prompts[b]) - 1:]  # positions restart at 0 for every row
        assert float(np.abs(batched[b] - alone).max()) <= LIMIT
        assert float(np.abs(batched[b] - hf_logits(tiny_ckpt.model, seq)[len(prompts[b]) - 1:]).max()) <= LIMIT


def test_greedy_continuation_equals_hf(tiny_ckpt, tiny_weights):
    """12 greedy tokens with the cache equal transformers' greedy generate."""
    runner = NumpyRunner(tiny_weights)
    prompt = random_ids(512, 8, 40)
    cache = runner.new_cache(1)
    tok = int(np.argmax(runner.prefill(cache, 0, prompt)))
    ours = [tok]
    for _ in range(11):
        tok = int(runner.decode_greedy(cache, np.array([tok]))[0])
        ours.append(tok)
    with torch.no_grad():
        out = tiny_ckpt.model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                       pad_token_id=511, eos_token_id=None)
    assert ours == out[0, len(prompt):].tolist()


def test_cache_refuses_past_context(tiny_weights):
    runner = NumpyRunner(tiny_weights)
    cache = runner.new_cache(1)
    runner.prefill(cache, 0, random_ids(512, 64, 50))
    with pytest.raises(ContextFull, match="context of 64"):
        runner.decode(cache, np.array([1]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        runner.forward([512])

"""The Python API on the CUDA backend: every documented call, against the NumPy backend on the same
checkpoint (a random 2-layer model of gpt2's width and vocabulary)."""

import numpy as np
import pytest

import gpt2block
from hf_checkpoints import make_hf_checkpoint

from test_perplexity import TEXT


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    ckpt = make_hf_checkpoint(tmp_path_factory.mktemp("api") / "ckpt", 2, 768, 12, vocab_size=50257,
                              n_positions=1024, seed=43)
    return (gpt2block.load(str(ckpt.path), backend="cuda"), gpt2block.load(str(ckpt.path), backend="numpy"))


def test_logits_and_perplexity_equal_the_numpy_backends(models):
    cuda, ref = models
    text = "Quick brown foxes jump over lazy dogs; seven wizards quietly judge extravagant boxing matches."
    np.testing.assert_allclose(cuda.logits(text), ref.logits(text), atol=1e-4, rtol=0)
    a, b = cuda.perplexity(TEXT * 4, max_length=64, stride=32), ref.perplexity(TEXT * 4, max_length=64, stride=32)
    assert a.ppl == pytest.approx(b.ppl, rel=1e-5) and a.n_windows == b.n_windows


def test_greedy_generation_is_the_argmax_of_full_recomputation(models):
    cuda, _ = models
    for r in cuda.generate(["The engine keeps", "Numbers like"], 16, temperature=0):
        seq = list(r.prompt_ids)
        for t in r.token_ids:
            assert int(np.argmax(cuda.logits(seq)[-1])) == t
            seq.append(t)


def test_sampling_repeats_with_its_seed_and_streams_its_text(models):
    cuda, _ = models
    kw = dict(max_new_tokens=24, temperature=0.9, top_p=0.95, top_k=0, repetition_penalty=1.2, seed=5)
    a, b = cuda.generate("Hello", **kw), cuda.generate("Hello", **kw)
    assert a.token_ids == b.token_ids and len(a.token_ids) + (a.stop_reason == "eot") >= 1
    assert cuda.generate("Hello", **{**kw, "seed": 6}).token_ids != a.token_ids
    s = cuda.generate("Hello", stream=True, **kw)
    assert "".join(s) == s.result.text == a.text
    many = cuda.generate(["Hello", "Twelve blocks"], n=3, **kw)
    assert [len(rs) for rs in many] == [3, 3] and many[0][0].token_ids == a.token_ids
    assert a.timing.prefill_ms > 0 and a.timing.decode_tokens_per_s > 0


def test_batches_the_gpu_cannot_hold_are_refused_before_allocation(models):
    from gpt2block.backends.base import BatchTooLarge

    runner = models[0].runner
    with pytest.raises(BatchTooLarge, match="GiB of KV cache"):
        runner.check_batch(10**6)  # 12.6 TB of cache at this model's size
    with pytest.raises(BatchTooLarge, match="n_positions = 1024"):
        runner.check_batch(1025)
    runner.check_batch(1024)

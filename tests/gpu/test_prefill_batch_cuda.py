"""Packed prefill on the GPU (CudaRunner.prefill_batch: several rows in one pass, attention_prefill_varlen_*)
against each prompt prefilled alone and against transformers, and perplexity on the device
(window_nll_sums) against transformers' guide loop."""

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.backends.base import Runner
from gpt2block.checkpoint import load_weights
from gpt2block.perplexity import host_window_nll_sums, perplexity
from hf_checkpoints import make_hf_checkpoint

from test_perplexity import guide_perplexity

LENGTHS = [129, 1, 1000, 2, 128, 127]  # mixed: one token, tile edges (127, 128, 129), a long row


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory, torch_cuda):
    """A random checkpoint of gpt2's shape: (weights, the transformers model on the GPU)."""
    ckpt = make_hf_checkpoint(tmp_path_factory.mktemp("prefill") / "ckpt", 12, 768, 12, vocab_size=50257,
                              n_positions=1024, seed=4343)
    return load_weights(ckpt.path), ckpt.model.cuda()


@pytest.fixture(scope="module")
def runners(gpt2):
    weights, _ = gpt2
    return {p: make_runner(weights, "cuda", p) for p in ("fp32", "bf16", "tf32")}


def _hf_last(torch, model, ids):
    with torch.no_grad():
        return model(torch.tensor(np.asarray(ids), device="cuda")[None]).logits[0, -1].double().cpu().numpy()


def _alone(runner, ids):
    """The prompt prefilled alone in a fresh cache (one row, the one-sequence kernels): its last logits."""
    return runner.prefill(runner.new_cache(1), 0, ids)


def _prompts(seed, lengths):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50257, n) for n in lengths]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "tf32"])
def test_each_row_equals_its_prompt_alone(runners, gpt2, torch_cuda, precision):
    runner = runners[precision]
    prompts = _prompts(1, LENGTHS)
    rows = [5, 0, 3, 7, 1, 6]  # rows of an 8-row cache, in any order
    cache = runner.new_cache(8)
    got = runner.prefill_batch(cache, rows, prompts)
    assert got.shape == (6, 50257) and np.isfinite(got).all()
    np.testing.assert_array_equal(cache.pos, [LENGTHS[rows.index(r)] if r in rows else 0 for r in range(8)])
    alone = np.stack([_alone(runner, ids) for ids in prompts])
    hf = np.stack([_hf_last(torch_cuda, gpt2[1], ids) for ids in prompts])
    if precision == "tf32":  # tf32 GEMMs and attention: the packed pass within twice the alone's error
        err_alone, err = np.abs(alone - hf).max(), np.abs(got - hf).max()
        assert err <= 2 * err_alone + 1e-6, f"packed tf32 error {err:.3g} against alone {err_alone:.3g}"
    else:
        diff = np.abs(got - alone).max(axis=1)
        assert diff.max() <= 1e-4, f"rows {LENGTHS}: max |packed - alone| {diff}"
        assert np.abs(got - hf).max() <= 1e-4, f"max |packed - transformers| {np.abs(got - hf).max(axis=1)}"


def test_rows_with_a_cached_prefix_attend_to_it(runners, gpt2, torch_cuda):
    runner = runners["fp32"]
    prefixes, tails = [10, 0, 300, 64, 1], [5, 129, 1, 200, 700]
    full = _prompts(2, [p + t for p, t in zip(prefixes, tails)])
    cache = runner.new_cache(5)
    for r, (ids, p) in enumerate(zip(full, prefixes)):
        if p:
            runner.prefill(cache, r, ids[:p])
    got = runner.prefill_batch(cache, range(5), [ids[p:] for ids, p in zip(full, prefixes)])
    np.testing.assert_array_equal(cache.pos, [len(ids) for ids in full])
    for r, ids in enumerate(full):
        np.testing.assert_allclose(got[r], _alone(runner, ids), atol=1e-4, rtol=0, err_msg=f"row {r}")
        np.testing.assert_allclose(got[r], _hf_last(torch_cuda, gpt2[1], ids), atol=1e-4, rtol=0, err_msg=f"row {r}")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_decode_after_the_packed_prefill_equals_after_row_by_row(runners, precision):
    """The cache a packed prefill leaves decodes like the one row-by-row prefills leave: the same greedy
    tokens and logits, step after step (the decode paths of this batch: GEMMs at 6 rows)."""
    runner = runners[precision]
    lengths = [3, 130, 1, 64, 65, 500]
    prompts = _prompts(3, lengths)
    packed, rowwise = runner.new_cache(6), runner.new_cache(6)
    a = runner.prefill_batch(packed, range(6), prompts)
    b = Runner.prefill_batch(runner, rowwise, range(6), prompts)  # the default: one prefill a row
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    tokens = a.argmax(axis=1)
    for step in range(8):
        la, lb = runner.decode(packed, tokens), runner.decode(rowwise, tokens)
        np.testing.assert_allclose(la, lb, atol=1e-4, rtol=0, err_msg=f"step {step}")
        assert (la.argmax(axis=1) == lb.argmax(axis=1)).all(), f"step {step}"
        tokens = la.argmax(axis=1)
    np.testing.assert_array_equal(packed.pos, rowwise.pos)


def test_a_batch_past_one_pass_is_chunked(runners):
    """With passes of 1024 tokens, 150 prompts of 9..30 tokens (about 2,900) take several passes; each row
    still equals its prompt alone, and the pass workspace stays within one pass."""
    runner = runners["fp32"]
    keep = runner.pass_tokens
    rng = np.random.default_rng(4)
    lengths = list(rng.integers(9, 31, 150))
    prompts = _prompts(5, lengths)
    try:
        runner.pass_tokens = 1024
        runner._packed = None
        got = runner.prefill_batch(runner.new_cache(150), range(150), prompts)
        assert runner._packed.rows <= 1024
    finally:
        runner.pass_tokens = keep
    for r in (0, 37, 71, 149):
        np.testing.assert_allclose(got[r], _alone(runner, prompts[r]), atol=1e-4, rtol=0, err_msg=f"row {r}")


def test_sample_prefill_draws_from_the_packed_logits(runners):
    """sample_prefill's packed passes leave the cache as prefill_batch does, and greedy rows draw its argmax."""
    from gpt2block.sampler import SamplingBatch, SamplingParams

    runner = runners["fp32"]
    prompts = _prompts(6, [40, 1, 300, 129])
    batch = SamplingBatch([SamplingParams(temperature=0)] * 4, [0] * 4, [0] * 4, [list(p) for p in prompts])
    cache, ref = runner.new_cache(4), runner.new_cache(4)
    out = runner.sample_prefill(cache, prompts, batch)
    logits = runner.prefill_batch(ref, range(4), prompts)
    np.testing.assert_array_equal(out.ids, logits.argmax(axis=1))
    np.testing.assert_array_equal(cache.pos, ref.pos)
    tok = out.ids.astype(np.int64)
    np.testing.assert_allclose(runner.decode(cache, tok), runner.decode(ref, tok), atol=1e-4, rtol=0)


@pytest.mark.parametrize("n_ids, max_length, stride", [(2600, 1024, 512), (700, 64, 17), (1030, 1024, 1000)])
def test_perplexity_on_the_device_equals_the_guide(runners, gpt2, torch_cuda, n_ids, max_length, stride):
    runner = runners["fp32"]
    ids = [int(i) for i in np.random.default_rng(n_ids).integers(0, 50257, n_ids)]
    ours = perplexity(runner, ids, max_length, stride)
    ref = guide_perplexity(gpt2[1], ids, max_length, stride, device="cuda")
    assert ours.ppl == pytest.approx(ref, rel=1e-5)

    class Host:  # the same runner's forward, the log-softmax on the host in float64
        config = runner.config
        forward = staticmethod(runner.forward)
    host = perplexity(Host(), ids, max_length, stride)
    assert ours.ppl == pytest.approx(host.ppl, rel=1e-6) and ours.n_windows == host.n_windows


def test_window_nll_sums_equal_the_host_sums_and_refuse_bad_windows(runners):
    runner = runners["fp32"]
    rng = np.random.default_rng(7)
    wins = [(rng.integers(0, 50257, n), f) for n, f in ((1024, 1), (1024, 512), (37, 36), (2, 1), (900, 5))]
    got = runner.window_nll_sums(wins)
    want = host_window_nll_sums(runner, wins)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for bad in ([(np.arange(5), 5)], [(np.arange(5), 0)], [(np.zeros(1025, int), 1)]):
        with pytest.raises(ValueError):
            runner.window_nll_sums(bad)

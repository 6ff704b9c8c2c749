"""The fused decode step (kernels/decode_layers.cu): one decode step's logits against a float64
run of the NumPy reference for every GPT-2 width, lengths across the 64-key splits and mixed in
one batch, judged against the error of the unfused five-kernel path; bit-repeatability between
eager runs and graph replays; poisoned scratch; bf16 weights; the fallback where it does not fit."""

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.config import GPT2Config
from gpt2block.weights import ModelWeights

VOCAB = 4096  # the LM head is not what is tested here


def _weights(d: int, n_layer: int = 2) -> ModelWeights:
    seed = int(np.random.default_rng().integers(0, 2**31))
    return ModelWeights.random(GPT2Config(n_layer=n_layer, n_embd=d, n_head=d // 64, vocab_size=VOCAB), seed=seed)


def _runner(weights, precision="fp32", fused=True, graphs=True):
    r = make_runner(weights, "cuda", precision)
    r.fused_decode, r.use_graphs = fused, graphs
    return r


def _decode_once(runner, prompts, step_tokens):
    """Prefill each row's prompt (may be empty), then one decode step: its logits [B, V]."""
    cache = runner.new_cache(len(prompts))
    for r, p in enumerate(prompts):
        if len(p):
            runner.prefill(cache, r, p)
    return runner.decode(cache, step_tokens).astype(np.float64)


@pytest.mark.parametrize("d, lengths", [
    (768, [1]), (768, [2]), (768, [30]), (768, [64]), (768, [65]), (768, [1024]),
    (768, [65, 1, 100, 1024, 64, 2, 30, 129]),
    (1024, [100, 1024]), (1280, [64, 65, 3]), (1600, [1024]), (1600, [1, 2, 30, 100]),
])
def test_fused_step_matches_fp64(d, lengths):
    w = _weights(d)
    rng = np.random.default_rng()
    seqs = [rng.integers(0, VOCAB, n) for n in lengths]  # row r: lengths[r] tokens, the last decoded
    prompts, last = [s[:-1] for s in seqs], np.array([s[-1] for s in seqs])
    fused = _runner(w)
    assert fused._path(len(lengths)).blocks == "layers", "this case should run the fused kernel"
    ours = _decode_once(fused, prompts, last)
    peer = _decode_once(_runner(w, fused=False), prompts, last)
    judge_runner = make_runner(w, "numpy", "fp64")
    judge = np.stack([judge_runner.forward(s)[-1] for s in seqs])
    assert np.isfinite(ours).all()
    e_ours, e_peer = np.abs(ours - judge).max(), np.abs(peer - judge).max()
    print(f"d={d} lengths={lengths}: error vs fp64 fused {e_ours:.3g}, five-kernel path {e_peer:.3g}")
    assert e_ours <= 2 * e_peer + 1e-6, f"fused error {e_ours:.3g} > 2 x the unfused path's {e_peer:.3g}"
    assert (ours.argmax(-1) == judge.argmax(-1)).all()


def test_fused_repeats_bit_for_bit_and_ignores_poisoned_scratch(cp):
    """Eager steps, graph replays and a second runner give identical bits; NaN in every scratch
    buffer the kernel writes before it reads (activations, attention partials) changes nothing,
    and the grid barrier and tickets are back at zero after every step."""
    w = _weights(768, n_layer=3)
    rng = np.random.default_rng()
    prompts = [rng.integers(0, VOCAB, n) for n in (70, 3, 200)]
    toks = rng.integers(0, VOCAB, (5, 3))
    results = []
    for graphs in (False, True, True):
        r = _runner(w, graphs=graphs)
        cache = r.new_cache(3)
        for row, p in enumerate(prompts):
            r.prefill(cache, row, p)
        steps = []
        for t in toks:
            for buf in (r.ws.qkv, r.ws.att, r.ws.f):
                buf.fill(cp.nan)
            if r._fused is not None:
                r._fused.part_acc.fill(cp.nan)
                r._fused.part_ml.fill(cp.nan)
            steps.append(r.decode(cache, t))
            assert int(r._fused.barrier[0]) == 0 and int(cp.abs(r._fused.tickets).max()) == 0
        results.append(np.stack(steps))
    assert np.isfinite(results[0]).all()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_fused_bf16_matches_unfused_bf16():
    """bf16 weights: the fused and five-kernel paths read the same bf16 values and sum in float32;
    they differ only in summation order."""
    w = _weights(1024)
    rng = np.random.default_rng()
    prompts = [rng.integers(0, VOCAB, n) for n in (1, 64, 300)]
    last = rng.integers(0, VOCAB, 3)
    ours = _decode_once(_runner(w, "bf16"), prompts, last)
    peer = _decode_once(_runner(w, "bf16", fused=False), prompts, last)
    assert np.isfinite(ours).all()
    np.testing.assert_allclose(ours, peer, atol=2e-5, rtol=0)


def test_batch_too_large_for_shared_memory_falls_back():
    """gpt2-xl width at batch 8: activations [8, 4D] do not fit beside the weight ring; the
    step runs the five-kernel path and still agrees with the reference."""
    w = _weights(1600, n_layer=1)
    r = _runner(w)
    assert r._path(4).blocks == "layers" and r._path(8).blocks != "layers"
    rng = np.random.default_rng()
    prompts = [rng.integers(0, VOCAB, 5) for _ in range(8)]
    last = rng.integers(0, VOCAB, 8)
    ours = _decode_once(r, prompts, last)
    judge = make_runner(w, "numpy", "fp64")
    ref = np.stack([judge.forward(np.append(p, t))[-1] for p, t in zip(prompts, last)])
    assert np.abs(ours - ref).max() <= 1e-4


@pytest.mark.parametrize("d, precision, want", [
    (768, "fp32", {1: False, 2: False, 4: False, 8: False}),
    (768, "tf32", {1: False, 8: False}),
    (768, "bf16", {1: False, 4: False, 5: False, 8: False}),
    (1024, "fp32", {1: False, 8: False}),
    (1280, "fp32", {1: False}),
    (1600, "fp32", {1: False, 2: False}),
    (1600, "tf32", {1: False}),
    (1600, "bf16", {1: True, 2: True}),
])
def test_auto_picks_the_fused_step_where_it_measured_faster(d, precision, want):
    """fused_decode="auto" (the default) by width and weight precision, as the decode-path table states
    from the measured rates (backends/cuda/decode_paths.py; docs/PERFORMANCE.md, versions 15 and 17): bf16 weights at
    d = 1600; there a batch of 8 does not fit one SM's shared memory and runs five kernels whatever the
    choice."""
    r = _runner(_weights(d, n_layer=1), precision, fused="auto")
    got = {b: r._path(b).blocks == "layers" for b in want}
    assert got == want
    if d >= 1600 and precision == "bf16":
        assert r._path(8).blocks != "layers", "a batch of 8 at d = 1600 should not fit the fused kernel"

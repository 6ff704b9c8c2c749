"""validate: the three checks against transformers pass on a faithful runner and fail on a corrupted one."""

import copy

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.checkpoint import load_model
from gpt2block.validate import (DEFAULT_PROMPT, MissingDependency, _torch, check_greedy, check_top1,
                                hf_logits, hf_model_for, hf_model_from_weights, validate)


@pytest.fixture(scope="module")
def tiny(tiny_ckpt):
    loaded = load_model(tiny_ckpt.path)
    return loaded, make_runner(loaded.weights, "numpy")


def test_passes_on_the_numpy_runner(tiny, tiny_ckpt):
    loaded, runner = tiny
    ids = loaded.tokenizer.encode(DEFAULT_PROMPT)
    report = validate(runner, hf_model_for(loaded.source, loaded.weights), ids)
    assert report.passed, report.checks
    assert [c.name for c in report.checks] == ["max |logit difference|", "top-1 agreement",
                                               "greedy 32-token continuation"]
    assert report.checks[2].figure.startswith("32/32")


def test_the_model_built_from_packed_weights_is_the_checkpoint(tiny, tiny_ckpt):
    loaded, _ = tiny
    ids = loaded.tokenizer.encode(DEFAULT_PROMPT)
    built = hf_logits(hf_model_from_weights(loaded.weights), ids)
    ref = hf_logits(tiny_ckpt.model, ids)
    np.testing.assert_allclose(built, ref, atol=1e-5, rtol=0)


def test_fails_when_a_weight_is_corrupted(tiny):
    loaded, runner = tiny
    bad = copy.copy(runner)
    bad.blocks = [dict(b) for b in runner.blocks]
    bad.blocks[1]["w_fc"] = runner.blocks[1]["w_fc"] + np.float32(0.05)
    ids = loaded.tokenizer.encode(DEFAULT_PROMPT)
    report = validate(bad, hf_model_for(loaded.source, loaded.weights), ids)
    assert not report.passed
    assert not report.checks[0].passed  # the logit check catches it whatever the argmaxes do


def test_a_single_flipped_argmax_fails_top1():
    ref = np.array([[0.0, 1.0, 0.2], [2.0, 0.0, 0.1]], np.float32)
    ours = ref.copy()
    ours[1] = [0.0, 3.0, 0.0]
    c = check_top1(ours, ref, 1e-4)
    assert not c.passed and "1/2 positions agree" in c.figure and "position 1" in c.figure


def test_a_near_tie_is_excused_and_said():
    ref = np.array([[1.0, 1.00001, 0.0]], np.float32)
    ours = np.array([[1.00002, 1.0, 0.0]], np.float32)
    c = check_top1(ours, ref, 1e-4)
    assert c.passed and "near tie" in c.figure


def test_greedy_check_reports_the_first_difference():
    c = check_greedy([1, 2, 3, 9], [1, 2, 3, 4], [1.0, 1.0, 1.0, 0.5], 1e-4)
    assert not c.passed and "at token 3" in c.figure and "ours 9, HF 4" in c.figure
    assert check_greedy([1, 2], [1, 2], [1.0, 1.0], 1e-4).passed
    assert check_greedy([1, 5], [1, 2], [1.0, 1e-6], 1e-4).passed  # a near tie of HF's


def test_missing_transformers_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(MissingDependency, match="install torch and transformers"):
        _torch()


@pytest.mark.slow
def test_passes_on_a_full_size_gpt2(gpt2_ckpt):
    loaded = load_model(gpt2_ckpt.path)
    runner = make_runner(loaded.weights, "numpy")
    report = validate(runner, gpt2_ckpt.model, loaded.tokenizer.encode(DEFAULT_PROMPT))
    assert report.passed, report.checks

"""Sliding-window perplexity equals the one transformers' perplexity guide computes, to 1e-4 relative."""

import math

import pytest
import torch

from gpt2block.backends import make_runner
from gpt2block.checkpoint import load_model
from gpt2block.perplexity import PerplexityError, perplexity, windows

TEXT = ("The cache remembers keys and values of earlier positions, so that decoding one more token costs one "
        "column of work instead of the whole history again. When the weather is cold the river freezes, "
        "children skate on the ice, and the baker sells warm bread to everyone who walks past the market "
        "square on a quiet Sunday morning. Quick brown foxes jump over lazy dogs; seven wizards quietly judge "
        "extravagant boxing matches. Numbers like 1024, 768, 50257 and 3.14159 appear in configuration files.")


def guide_perplexity(model, ids, max_length, stride, device=None):
    """The loop of transformers' 'Perplexity of fixed-length models' guide, on a torch model (on ``device``)."""
    input_all = torch.tensor([ids], device=device)
    seq_len = input_all.size(1)
    nll_sum, n_tokens, prev_end_loc = 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = input_all[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            neg_log_likelihood = model(input_ids, labels=target_ids).loss
        num_valid_tokens = (target_ids != -100).sum().item()
        num_loss_tokens = num_valid_tokens - target_ids.size(0)
        nll_sum += neg_log_likelihood.double() * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return math.exp(nll_sum / n_tokens)


@pytest.fixture(scope="module")
def tiny(tiny_ckpt):
    loaded = load_model(tiny_ckpt.path)
    return make_runner(loaded.weights, "numpy"), loaded.tokenizer, tiny_ckpt.model


@pytest.mark.parametrize("max_length, stride, n_ids", [(64, 32, None), (64, 64, None), (64, 17, None),
                                                       (40, 13, None), (64, 1, 72), (8, 3, 30)])
def test_equals_the_guide(tiny, max_length, stride, n_ids):
    runner, tok, model = tiny
    ids = tok.encode(TEXT)[:n_ids]
    assert len(ids) > max_length + stride  # several windows
    ours = perplexity(runner, ids, max_length, stride)
    ref = guide_perplexity(model, ids, max_length, stride)
    assert ours.ppl == pytest.approx(ref, rel=1e-4)
    assert ours.n_windows == len(list(windows(len(ids), max_length, stride)))


def test_one_window_when_the_text_fits(tiny):
    runner, tok, model = tiny
    ids = tok.encode("Tokens become vectors through an embedding table.")
    assert len(ids) < 64
    res = perplexity(runner, ids)
    assert res.n_windows == 1 and res.max_length == 64 and res.stride == 32
    assert res.ppl == pytest.approx(guide_perplexity(model, ids, 64, 32), rel=1e-4)


def test_a_perfect_model_has_perplexity_one(tiny):
    """A runner whose logits put everything on the true next token: ppl -> 1; against a uniform one -> V."""
    runner, tok, _ = tiny
    ids = tok.encode(TEXT)
    V = runner.config.vocab_size

    class Oracle:
        config = runner.config

        def __init__(self, scale):
            self.scale = scale

        def forward(self, chunk):
            import numpy as np

            z = np.zeros((len(chunk), V), np.float32)
            z[np.arange(len(chunk) - 1), chunk[1:]] = self.scale
            return z

    assert perplexity(Oracle(50.0), ids, 64, 32).ppl == pytest.approx(1.0, abs=1e-6)
    assert perplexity(Oracle(0.0), ids, 64, 32).ppl == pytest.approx(V, rel=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_length": 65}, "max_length"),
    ({"max_length": 1}, "max_length"),
    ({"stride": 0}, "stride"),
    ({"max_length": 32, "stride": 33}, "stride"),
])
def test_bad_window_arguments(tiny, kwargs, match):
    runner, tok, _ = tiny
    with pytest.raises(PerplexityError, match=match):
        perplexity(runner, tok.encode(TEXT), **kwargs)


def test_a_one_token_text_is_refused(tiny):
    runner, tok, _ = tiny
    with pytest.raises(PerplexityError, match="at least 2 tokens"):
        perplexity(runner, [5])


def test_a_runners_own_window_sums_are_used_and_checked(tiny):
    """perplexity asks runner.window_nll_sums (one call, every scored window) where the runner has it, and
    never its forward; NaN sums and +inf sums raise PerplexityError naming the window."""
    import numpy as np

    from gpt2block.perplexity import host_window_nll_sums

    runner, tok, _ = tiny
    ids = tok.encode(TEXT)

    class Device:
        config = runner.config
        calls = []
        poison = None

        def forward(self, chunk):
            raise AssertionError("forward must not be called where window_nll_sums exists")

        def window_nll_sums(self, wins):
            self.calls.append(len(wins))
            sums = host_window_nll_sums(runner, wins)
            if self.poison is not None:
                sums[1] = self.poison
            return sums

    dev = Device()
    want = perplexity(runner, ids, 64, 17)
    got = perplexity(dev, ids, 64, 17)
    assert dev.calls == [got.n_windows] and got.ppl == pytest.approx(want.ppl, rel=1e-12)
    dev.poison = np.nan
    with pytest.raises(PerplexityError, match="window 2 .* NaN or \\+inf"):
        perplexity(dev, ids, 64, 17)
    dev.poison = np.inf
    with pytest.raises(PerplexityError, match="window 2 .* probability 0"):
        perplexity(dev, ids, 64, 17)

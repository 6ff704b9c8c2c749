"""Config options gpt2block honours, on the CUDA backend: transformers' logits within the fp32 limit in
prefill, in cached decode steps and in greedy ids (the NumPy side is tests/test_fuzz_inputs.py)."""

import json

import numpy as np
import pytest

from hf_checkpoints import make_hf_checkpoint
from gpt2block.backends import make_runner
from gpt2block.checkpoint import load_weights


@pytest.mark.parametrize("options", [{"layer_norm_epsilon": 1e-2}, {"layer_norm_epsilon": 1e-8},
                                     {"reorder_and_upcast_attn": True}])
@pytest.mark.parametrize("d", [128, 768])
def test_honoured_options_on_cuda(tmp_path, torch_cuda, options, d):
    import transformers

    torch = torch_cuda
    c = make_hf_checkpoint(tmp_path / "c", 2, d, d // 64, vocab_size=512, n_positions=64, seed=13)
    cfg = json.loads((c.path / "config.json").read_text())
    (c.path / "config.json").write_text(json.dumps({**cfg, **options}))
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(c.path), attn_implementation="eager").float().eval()
    ids = list(np.random.default_rng(1).integers(0, 512, 40))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    runner = make_runner(load_weights(c.path), "cuda")
    assert np.abs(runner.forward(ids) - ref).max() <= 1e-4
    cache = runner.new_cache(1)
    runner.prefill(cache, 0, ids[:30])
    steps = [runner.decode(cache, np.array([t], np.int64))[0] for t in ids[30:]]
    assert np.abs(np.stack(steps) - ref[30:]).max() <= 1e-4

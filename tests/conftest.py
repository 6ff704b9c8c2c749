"""Shared test helpers: random Hugging Face checkpoints, a small trained tokenizer, the real GPT-2 tokenizer.

Everything here is offline and deterministic. The helpers live in tests/hf_checkpoints.py;
import them from a test with

    from hf_checkpoints import SHARED_GPT2, requires_gpt2_tokenizer, make_hf_checkpoint, make_tokenizer_json

(pytest puts tests/ on sys.path; do not write ``from conftest import``: tests/gpu has a conftest.py
too and the name is ambiguous), or use the fixtures below.

Constants and markers (in hf_checkpoints)
    REPO_ROOT                  the checkout (the folder holding pyproject.toml)
    SHARED_GPT2                ../shared/gpt2 next to the checkout: the real GPT-2 tokenizer.json,
                               vocab.json, merges.txt (present on the project's machines, absent in CI)
    HAVE_GPT2_TOKENIZER        whether SHARED_GPT2 holds those files
    requires_gpt2_tokenizer    a skipif marker, with its reason, for tests that need them

Functions (in hf_checkpoints)
    make_tokenizer_json(vocab_size=512) -> str
        tokenizer.json text of a byte-level BPE (GPT-2's pre-tokenizer and decoder) trained on a
        fixed English text, with exactly ``vocab_size`` ids; <|endoftext|> is the LAST id
        (vocab_size - 1), as 50256 is in GPT-2. Cached per size.
    make_hf_checkpoint(path, n_layer, n_embd, n_head, vocab_size=512, n_positions=64, seed=0,
                       prefix=True, dtype=torch.float32, tokenizer="auto", mask_buffers=True) -> Ckpt
        A random transformers.GPT2LMHeadModel with EVERY parameter drawn fresh (LayerNorm gains
        around 1, biases nonzero; nothing is a trivial 1 or 0), written to the directory ``path``:
          prefix=True   save_pretrained(path): names "transformer.h.0....", as transformers writes them
          prefix=False  config.json + model.safetensors written directly with the original hub's names
                        ("h.0.attn.c_attn.weight", "wte.weight", ...) and, with mask_buffers, the
                        causal-mask buffers "h.N.attn.bias" / "h.N.attn.masked_bias" that loaders ignore
          dtype         torch.float32 / float16 / bfloat16: the dtype stored in the file
          tokenizer     "auto": the real GPT-2 tokenizer when vocab_size == 50257 and SHARED_GPT2 has it,
                              else make_tokenizer_json(vocab_size) (as many ids as the model: filler past 512)
                        "json": tokenizer.json only (the choice "auto" makes), "vocab_merges": vocab.json +
                        merges.txt only, None: no tokenizer files
        Returns Ckpt(path, model): ``model`` is the float32, eval-mode GPT2LMHeadModel holding exactly
        the stored weights (for fp16/bf16 files, the rounded values), the reference for logits.

Fixtures (session-scoped; build once, never modify them: copy the directory first)
    tiny_ckpt      Ckpt of 2 layers, n_embd 128, 2 heads, vocab 512, n_positions 64, save_pretrained form
    gpt2_ckpt      Ckpt of the full gpt2 shape (12 layers, 768, 12 heads, vocab 50257, 1024 positions);
                   ~0.5 GB on disk, a few seconds to build. Mark tests that use it @pytest.mark.slow.
    tiny_weights   gpt2block ModelWeights loaded from tiny_ckpt
    gpt2_weights   gpt2block ModelWeights loaded from gpt2_ckpt
"""

import pytest

from hf_checkpoints import (  # noqa: F401 (re-exported for the docstring's names)
    HAVE_GPT2_TOKENIZER, REPO_ROOT, SHARED_GPT2, Ckpt, make_hf_checkpoint, make_tokenizer_json,
    requires_gpt2_tokenizer,
)


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> Ckpt:
    """2 layers, n_embd 128, 2 heads, vocab 512, 64 positions; save_pretrained form."""
    return make_hf_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", 2, 128, 2, vocab_size=512,
                              n_positions=64, seed=1234)


@pytest.fixture(scope="session")
def gpt2_ckpt(tmp_path_factory) -> Ckpt:
    """The full gpt2 shape: 12 layers, 768 wide, 12 heads, vocab 50257, 1024 positions."""
    return make_hf_checkpoint(tmp_path_factory.mktemp("gpt2") / "ckpt", 12, 768, 12, vocab_size=50257,
                              n_positions=1024, seed=4321)


@pytest.fixture(scope="session")
def tiny_weights(tiny_ckpt):
    from gpt2block.checkpoint import load_weights

    return load_weights(tiny_ckpt.path)


@pytest.fixture(scope="session")
def gpt2_weights(gpt2_ckpt):
    from gpt2block.checkpoint import load_weights

    return load_weights(gpt2_ckpt.path)

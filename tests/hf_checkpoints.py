"""Helpers for tests: random Hugging Face GPT-2 checkpoints, a small trained tokenizer, the real GPT-2 tokenizer.

Import them with ``from hf_checkpoints import ...`` (pytest puts tests/ on sys.path). The
module has its own name because tests/gpu has a conftest.py too: ``from conftest import``
would find whichever conftest was loaded last. The fixtures that use these helpers are in
tests/conftest.py; see its docstring for what each name does.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from gpt2block.weights import randomize_hf_model

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_GPT2 = REPO_ROOT.parent / "shared" / "gpt2"
HAVE_GPT2_TOKENIZER = all((SHARED_GPT2 / f).is_file() for f in ("tokenizer.json", "vocab.json", "merges.txt"))
requires_gpt2_tokenizer = pytest.mark.skipif(
    not HAVE_GPT2_TOKENIZER,
    reason=f"the real GPT-2 tokenizer files are not at {SHARED_GPT2} (they are on the project's machines only)",
)
EOT = "<|endoftext|>"

# The fixed training text of the small tokenizer (written for these tests).
TRAINING_TEXT = """\
A language model reads a sequence of tokens and predicts the next one. The engine in this
repository keeps each transformer block in one flat buffer of floating point numbers, in a
fixed order: the first layer normalization, the query, key and value projection, the output
projection of attention, the second layer normalization, and the two matrices of the
feed-forward network with their biases. Every backend reads the same offsets.
Tokens become vectors through an embedding table, and positions add a learned vector of
their own. Twelve blocks later a final normalization and the tied output head turn each
vector back into scores over the whole vocabulary. Sampling picks a token from those
scores: greedily, or with a temperature, a top-k cut, a nucleus threshold, and a penalty
for repeating what was already written. The cache remembers keys and values of earlier
positions, so that decoding one more token costs one column of work instead of the whole
history again. Tests compare every number with an independent computation in double
precision, and with the reference implementation, on random weights of every size.
When the weather is cold the river freezes, children skate on the ice, and the baker sells
warm bread to everyone who walks past the market square on a quiet Sunday morning.
Quick brown foxes jump over lazy dogs; seven wizards quietly judge extravagant boxing matches.
Numbers like 1024, 768, 50257 and 3.14159 appear in configuration files and benchmarks.
"""


class Ckpt(NamedTuple):
    path: Path
    model: object  # transformers.GPT2LMHeadModel, float32, eval mode


@functools.lru_cache(maxsize=None)
def make_tokenizer_json(vocab_size: int = 512) -> str:
    """tokenizer.json text: byte-level BPE with exactly vocab_size ids, <|endoftext|> the last. Past 512 ids
    (more than the training text gives) the ids between the trained ones and <|endoftext|> are filler
    entries "<|unusedN|>" that no text encodes to (a model may not have ids its tokenizer lacks)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 258:
        raise ValueError(f"a byte-level tokenizer needs at least 258 ids (256 bytes, a merge, eot); got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trained = min(vocab_size, 512)
    trainer = trainers.BpeTrainer(vocab_size=trained - 1, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer)
    if tok.get_vocab_size() != trained - 1:
        raise ValueError(f"the training text gives only {tok.get_vocab_size()} tokens; asked for {trained - 1}")
    tok.add_special_tokens([EOT])
    data = json.loads(tok.to_str())
    for i in range(trained - 1, vocab_size - 1):  # printable ASCII: byte-level pieces no merge reaches
        data["model"]["vocab"][f"<|unused{i}|>"] = i
    data["added_tokens"][0]["id"] = vocab_size - 1
    data["model"]["vocab"][EOT] = vocab_size - 1  # in the model vocab too, as in GPT-2 (so vocab.json has it)
    return json.dumps(data, ensure_ascii=False)


def _write_tokenizer(path: Path, vocab_size: int, tokenizer) -> None:
    if tokenizer is None:
        return
    if tokenizer not in ("auto", "json", "vocab_merges"):
        raise ValueError(f"tokenizer must be 'auto', 'json', 'vocab_merges' or None; got {tokenizer!r}")
    if vocab_size == 50257 and HAVE_GPT2_TOKENIZER:
        files = ("vocab.json", "merges.txt") if tokenizer == "vocab_merges" else ("tokenizer.json",)
        for f in files:
            shutil.copy(SHARED_GPT2 / f, path / f)
        return
    text = make_tokenizer_json(vocab_size)
    if tokenizer != "vocab_merges":
        (path / "tokenizer.json").write_text(text, encoding="utf-8")
        return
    model = json.loads(text)["model"]
    (path / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def make_hf_checkpoint(path, n_layer, n_embd, n_head, vocab_size=512, n_positions=64, seed=0, prefix=True,
                       dtype=None, tokenizer="auto", mask_buffers=True) -> Ckpt:
    """A random GPT-2 checkpoint in Hugging Face's format at ``path`` (see the module docstring)."""
    import torch
    import transformers

    dtype = dtype or torch.float32
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab_size,
                                  n_positions=n_positions, bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    model = transformers.GPT2LMHeadModel(cfg)
    randomize_hf_model(model, seed)
    model = model.to(dtype)
    if prefix:
        model.save_pretrained(path)
    else:
        _save_plain(model, cfg, path, mask_buffers)
    _write_tokenizer(path, vocab_size, tokenizer)
    return Ckpt(path, model.to(torch.float32).eval())


def _save_plain(model, cfg, path: Path, mask_buffers: bool) -> None:
    """The original hub layout: no 'transformer.' prefix, mask buffers stored, no lm_head."""
    import torch
    from safetensors.torch import save_file

    sd = {k[len("transformer."):]: v.contiguous() for k, v in model.state_dict().items()
          if k.startswith("transformer.")}
    if mask_buffers:
        P = cfg.n_positions
        for i in range(cfg.n_layer):
            sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(P, P, dtype=torch.uint8)).view(1, 1, P, P).bool()
            sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(sd, str(path / "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(path)

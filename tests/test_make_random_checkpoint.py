"""scripts/make_random_checkpoint.py, the README's offline quick start: it writes a Hugging Face checkpoint that
transformers and gpt2block both load, with the tokenizer files copied from --tokenizer-dir."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gpt2block.checkpoint import load_model
from gpt2block.cli import main

from hf_checkpoints import SHARED_GPT2, requires_gpt2_tokenizer

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "make_random_checkpoint.py"


def run_script(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


@requires_gpt2_tokenizer
def test_quick_start_checkpoint_loads_and_generates(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "rand"
    r = run_script("distilgpt2", out, "--layers", "1", "--seed", "3", "--tokenizer-dir", SHARED_GPT2)
    assert r.returncode == 0, r.stderr
    assert "random distilgpt2 (1 layers" in r.stdout
    for f in ("config.json", "model.safetensors", "tokenizer.json", "vocab.json", "merges.txt"):
        assert (out / f).is_file(), f
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]) == (1, 768, 50257)

    model = load_model(str(out))
    assert model.weights.blocks.shape[0] == 1
    assert np.all(np.isfinite(model.weights.wte)) and np.std(model.weights.wte) > 0.01  # drawn, not zeros

    args = ["generate", "Hello, I'm a language model,", "-m", str(out), "--backend", "numpy", "-n", "3",
            "--seed", "7", "--json"]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, args, catch_exceptions=False)
    samples = json.loads(first.stdout)["samples"]
    assert len(samples[0]["token_ids"]) == 3
    assert json.loads(again.stdout)["samples"] == samples  # the same seed repeats the run


def test_missing_tokenizer_files_are_named(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "rand"
    r = run_script("distilgpt2", out, "--layers", "1", "--tokenizer-dir", tmp_path / "none")
    assert r.returncode == 0, r.stderr
    assert "no tokenizer files in" in r.stderr and "tokenizer.json" in r.stderr
    assert (out / "model.safetensors").is_file() and not (out / "tokenizer.json").exists()


def test_bad_layer_count_is_refused(tmp_path):
    r = run_script("gpt2", tmp_path / "x", "--layers", "0")
    assert r.returncode == 2 and "--layers must be >= 1" in r.stderr

"""pack killed mid-write (SIGTERM, SIGKILL, SIGHUP): the final name is never a partial file, SIGTERM and
SIGHUP leave no temporary, and a temporary left by SIGKILL does not survive the next run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open

from hf_checkpoints import REPO_ROOT, make_hf_checkpoint
from gpt2block.checkpoint import load_weights
from gpt2block.output import TMP_TAG

# The child packs with writes of 16 KiB, each followed by 10 ms: the ~2 MB checkpoint takes about 1.3 s,
# long enough to be caught mid-write.
CHILD = r"""
import sys, time
import gpt2block.checkpoint as ck
ck.PACK_CHUNK = 1 << 14
real = ck.write_packed
def slow(f, tensors, metadata):
    class Slow:
        def write(self, b):
            n = f.write(b)
            time.sleep(0.01)
            return n
    real(Slow(), tensors, metadata)
ck.write_packed = slow
ck.pack(sys.argv[1], sys.argv[2])
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """1 layer, n_embd 64, vocab 8000: a ~2.4 MB packed file, mostly wte."""
    return make_hf_checkpoint(tmp_path_factory.mktemp("kill") / "ckpt", 1, 64, 1, vocab_size=8000,
                              n_positions=16, seed=8).path


def temporaries(folder: Path):
    return [p for p in folder.iterdir() if TMP_TAG in p.name]


def start_and_kill(model, out: Path, sig) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(model), str(out)], env=env,
                             stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not any(p.stat().st_size > 100_000 for p in temporaries(out.parent)):  # well into the write
        assert child.poll() is None, child.stderr.read().decode()
        assert time.time() < deadline, "the child never started writing"
        time.sleep(0.01)
    child.send_signal(sig)
    child.wait(timeout=60)
    return child


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
@pytest.mark.parametrize("existing", [False, True])
def test_killed_pack(model, tmp_path, sig, existing):
    out = tmp_path / "m.safetensors"
    if existing:
        out.write_bytes(b"the previous file")
    child = start_and_kill(model, out, sig)
    assert child.returncode != 0
    assert (out.read_bytes() == b"the previous file") if existing else not out.exists()
    left = temporaries(tmp_path)
    if sig == signal.SIGKILL:
        assert len(left) == 1  # nothing can run on SIGKILL: the next run sweeps it
    else:
        assert left == [], left
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # the next run: a process started after the kill
    subprocess.run([sys.executable, "-m", "gpt2block", "pack", str(model), "-o", str(out)], env=env, check=True,
                   capture_output=True, timeout=120)
    assert temporaries(tmp_path) == []
    with safe_open(str(out), framework="numpy") as f:
        assert sorted(f.keys()) == ["blocks", "ln_f.bias", "ln_f.weight", "wpe", "wte"]
    assert load_weights(out).config.vocab_size == 8000

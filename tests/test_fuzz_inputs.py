"""Bad input, generated: safetensors headers, config fields, output targets of every file type, input
files that are no regular files, non-finite logits, prompts that are not UTF-8, a read-only solve()
output, the hub without network. Each case asserts one ``Error:`` line and the exit status (CLI) or the
exception naming the argument (API), and that no file was changed or left behind."""

import json
import math
import os
import stat
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from hf_checkpoints import make_hf_checkpoint, make_tokenizer_json
from gpt2block import checkpoint as ck
from gpt2block.checkpoint import CheckpointError, SafetensorsFile, load_model, load_weights, pack
from gpt2block.cli import main
from gpt2block.config import ConfigError, GPT2Config
from gpt2block.export import export_cuda
from gpt2block.output import TMP_TAG, OutputError

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)


def one_error(r, status=1, *words):
    """Exactly one line starting with Error:, the exit status, and the words in that line."""
    lines = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == status, r.output
    assert len(lines) == 1, r.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path) -> dict:
    """Every entry of ``folder`` (not following links): name -> (type, size, mtime_ns, bytes of a regular file)."""
    out = {}
    for p in sorted(folder.iterdir()):
        s = os.lstat(p)
        body = p.read_bytes() if stat.S_ISREG(s.st_mode) else None
        out[p.name] = (stat.S_IFMT(s.st_mode), s.st_size, s.st_mtime_ns, body)
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """1 layer, n_embd 64, 1 head, vocab 300, 16 positions, the plain hub names (no prefix)."""
    return make_hf_checkpoint(tmp_path_factory.mktemp("fz") / "ckpt", 1, 64, 1, vocab_size=300, n_positions=16,
                              seed=3, prefix=False, mask_buffers=False)


@pytest.fixture
def ckpt(small, tmp_path):
    """A fresh copy of ``small`` to spoil."""
    import shutil

    return Path(shutil.copytree(small.path, tmp_path / "ckpt"))


# ---------------------------------------------------------------- 1. safetensors headers

def raw_file(entries: list[tuple[str, str]], data: bytes) -> bytes:
    """A safetensors file from (name, entry JSON text) pairs written as given (duplicates kept)."""
    text = ("{" + ",".join(f"{json.dumps(n)}:{e}" for n, e in entries) + "}").encode()
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, a, b) -> str:
    return json.dumps({"dtype": dtype, "shape": shape, "data_offsets": [a, b]})


SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "U8": 1}
offset_value = st.one_of(st.integers(-4, 80), st.floats(0, 80).map(float), st.sampled_from(['"8"', "null", "[]"]))


@st.composite
def headers(draw):
    """A header of 1-3 tensors, then one spoiling: overlap, gap, out of range, non-integer offset,
    duplicated key, wrong dtype size, or none (a valid file)."""
    n = draw(st.integers(1, 3))
    names = [f"t{i}" for i in range(n)]
    dtypes = [draw(st.sampled_from(list(SIZES))) for _ in names]
    shapes = [[draw(st.integers(1, 3)), draw(st.integers(1, 3))] for _ in names]
    entries, pos = [], 0
    for name, dt, shape in zip(names, dtypes, shapes):
        size = SIZES[dt] * math.prod(shape)
        entries.append([name, dt, shape, pos, pos + size])
        pos += size
    data = bytes(draw(st.binary(min_size=pos, max_size=pos)))
    kind = draw(st.sampled_from(["valid", "overlap", "out_of_range", "non_integer", "duplicate", "dtype_size",
                                 "trailing", "truncated"]))
    i = draw(st.integers(0, n - 1))
    valid = raw_file([(e[0], entry(*e[1:])) for e in entries], data)
    if kind == "overlap":
        entries[i][3] = max(0, entries[i][3] - draw(st.integers(1, 8)))
    elif kind == "out_of_range":
        entries[i][4] += draw(st.integers(1, 64))
    elif kind == "dtype_size":
        entries[i][1] = draw(st.sampled_from([d for d in SIZES if SIZES[d] != SIZES[entries[i][1]]]))
    texts = [(e[0], entry(*e[1:])) for e in entries]
    if kind == "non_integer":
        a = draw(offset_value)
        texts[i] = (entries[i][0], '{"dtype": "%s", "shape": %s, "data_offsets": [%s, %d]}'
                    % (entries[i][1], json.dumps(entries[i][2]),
                       a if isinstance(a, str) else json.dumps(a), entries[i][4]))
    elif kind == "duplicate":
        j = draw(st.integers(0, n - 1))
        texts.insert(draw(st.integers(0, n)), (entries[i][0], texts[j][1]))
    elif kind == "trailing":
        data += b"\0" * draw(st.integers(1, 16))
    elif kind == "truncated" and data:
        data = data[:-1]
    raw = raw_file(texts, data)
    return ("valid" if raw == valid else kind), raw


def library_reads(path) -> dict | None:
    """Every tensor as the safetensors library gives it, or None where it refuses the file."""
    import ml_dtypes  # noqa: F401

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except Exception:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=headers())
def test_header_fuzz_refused_exactly_when_the_library_refuses(tmp_path, case):
    kind, raw = case
    path = tmp_path / "m.safetensors"
    path.write_bytes(raw)
    theirs = library_reads(path)
    try:
        f = SafetensorsFile(path)
        ours = {}
        for name in f.names():
            try:
                ours[name] = f.float32(name)
            except CheckpointError as e:  # an integer dtype, or NaN / Inf: no weight, refused by name
                assert f"tensor {name}" in str(e)
                assert f.dtype(name) not in ck.FLOAT_DTYPES or not np.isfinite(
                    theirs[name].astype(np.float32)).all(), str(e)
                ours[name] = None
    except CheckpointError as e:
        assert theirs is None, f"{kind}: the library reads it, gpt2block refused: {e}"
        assert str(e).startswith(f"{path}: ")
        return
    assert theirs is not None, f"{kind}: the library refuses it, gpt2block read it"
    assert kind in ("valid", "duplicate"), kind
    assert sorted(ours) == sorted(theirs)
    for name, arr in ours.items():
        if arr is not None:
            np.testing.assert_array_equal(arr, theirs[name].astype(np.float32))


# a spoiled header in a real checkpoint, through the CLI: (label, header edit)
def _spoil(kind):
    def edit(header: dict) -> str:
        names = [k for k in header if k != "__metadata__"]
        a, b = sorted(names, key=lambda k: header[k]["data_offsets"][0])[:2]
        if kind == "overlap":
            header[b]["data_offsets"][0] -= 4
            header[b]["data_offsets"][1] -= 4
        elif kind == "out_of_range":
            header[b]["data_offsets"][1] += 4
        elif kind == "float_offset":
            header[a]["data_offsets"][0] = 0.0
        elif kind == "string_offset":
            header[a]["data_offsets"][0] = "0"
        elif kind == "dtype_size":
            header[a]["dtype"] = "F16"
        text = json.dumps(header)
        if kind == "duplicate":  # the first tensor named again with the second's entry
            text = text[:-1] + f", {json.dumps(a)}: {json.dumps(header[b])}" + "}"
        return text
    return edit


@pytest.mark.parametrize("kind", ["overlap", "out_of_range", "float_offset", "string_offset", "dtype_size",
                                  "duplicate"])
def test_spoiled_header_through_the_cli(ckpt, tmp_path, kind):
    f = ckpt / "model.safetensors"
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    text = _spoil(kind)(json.loads(raw[8:8 + n])).encode()
    text += b" " * (-len(text) % 8)
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    before = snapshot(ckpt)
    r = run("pack", ckpt, "-o", tmp_path / "out" / "p.safetensors")
    one_error(r, 1, str(f), "not a valid safetensors file")
    assert snapshot(ckpt) == before and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 2. configs over the whole field list

BASE = {"n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 16, "vocab_size": 300}
FIELDS = ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "layer_norm_epsilon", "activation_function",
          "n_inner", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
          "add_cross_attention", "tie_word_embeddings")
VALUES = (0, -1, 1, 2, 64, 128, 512, 10**30, 0.5, 1e-5, 1e-320, float("nan"), float("inf"), -float("inf"), 2.0,
          True, False, None, "12", "gelu_new", "gelu_pytorch_tanh", "relu", [1], {})


def accepted(field, v) -> bool:
    """The values gpt2block runs, field by field, with BASE's other fields."""
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if field in ("n_layer", "vocab_size"):
        return is_int and v >= 1
    if field == "n_positions":
        return is_int and v >= 2
    if field == "n_embd":
        return v == 128 and is_int
    if field == "n_head":
        return v == 2 and is_int
    if field == "layer_norm_epsilon":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1
    if field == "activation_function":
        return v in ("gelu_new", "gelu_pytorch_tanh")
    if field == "n_inner":
        return v is None or (is_int and v == 512)
    if field == "scale_attn_weights":
        return v is True
    if field in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        return v is False
    return isinstance(v, bool)  # reorder_and_upcast_attn, tie_word_embeddings


def check_config(field, value):
    """One field set to ``value`` over BASE: refused with the field's name, or run with that value."""
    cfg = {**BASE, field: value}
    try:
        c = GPT2Config.from_dict(cfg, source="c.json")
    except ConfigError as e:
        assert not accepted(field, value), f"{field}={value!r} refused: {e}"
        assert str(e).startswith("c.json: ") and field in str(e), str(e)
        return
    assert accepted(field, value), f"{field}={value!r} accepted"
    if field in BASE or field in ("layer_norm_epsilon", "activation_function"):
        assert getattr(c, field) == value


def test_config_every_field_every_value():
    for field in FIELDS:
        for value in VALUES:
            check_config(field, value)


@FUZZ
@given(field=st.sampled_from(FIELDS),
       value=st.one_of(st.integers(-10**40, 10**40), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                       st.none(), st.text(max_size=12), st.lists(st.integers(), max_size=2)))
def test_config_field_fuzz(field, value):
    check_config(field, value)


@pytest.mark.parametrize("field, value", [("n_layer", 10**9), ("n_positions", 10**9), ("vocab_size", 10**9),
                                          ("n_embd", 64 * 10**5)])
def test_implausible_sizes_fail_at_once_with_the_memory(ckpt, tmp_path, field, value):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg[field] = value
    if field == "n_embd":
        cfg["n_head"] = value // 64
    (ckpt / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    r = run("pack", ckpt, "-o", tmp_path / "p.safetensors")
    assert time.perf_counter() - t0 < 3
    line = one_error(r, 1, "config.json" if False else "model.safetensors", "GiB as float32", field)
    assert "check those config fields" in line
    assert not (tmp_path / "p.safetensors").exists()


def test_n_positions_1_is_a_clear_error(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "n_positions": 1}))
    one_error(run("pack", ckpt, "-o", ckpt.parent / "p.safetensors"), 1, "config field n_positions is 1")


def test_vocab_past_the_tokenizer_is_refused_up_front(tmp_path):
    c = make_hf_checkpoint(tmp_path / "c", 1, 64, 1, vocab_size=320, n_positions=16, seed=5)
    (c.path / "tokenizer.json").write_text(make_tokenizer_json(300))
    line = one_error(run("pack", c.path, "-o", tmp_path / "p.safetensors"), 1,
                     "vocab_size is 320 but its tokenizer has 300 tokens", "300..319")
    assert line and not (tmp_path / "p.safetensors").exists()


def _rewrite(path, fn):
    f = path / "model.safetensors"
    save_file(fn(load_file(str(f))), str(f))


def _config(path, **kw):
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **kw}))


def test_untied_head_absent_is_refused_by_name(ckpt):
    _config(ckpt, tie_word_embeddings=False)
    one_error(run("pack", ckpt, "-o", ckpt.parent / "p.safetensors"), 1,
              "tie_word_embeddings is false", "no lm_head.weight")


def test_untied_head_different_is_refused_by_name(ckpt):
    _config(ckpt, tie_word_embeddings=False)
    _rewrite(ckpt, lambda t: {**t, "lm_head.weight": t["wte.weight"] * 2})
    one_error(run("pack", ckpt, "-o", ckpt.parent / "p.safetensors"), 1,
              "lm_head.weight differs from wte.weight", "tie_word_embeddings is false")


def test_untied_head_equal_to_wte_loads(ckpt, small):
    _config(ckpt, tie_word_embeddings=False)
    _rewrite(ckpt, lambda t: {**t, "lm_head.weight": t["wte.weight"].copy()})
    np.testing.assert_array_equal(load_weights(ckpt).wte, load_weights(small.path).wte)


@pytest.mark.parametrize("options", [{"layer_norm_epsilon": 1e-2}, {"reorder_and_upcast_attn": True},
                                     {"activation_function": "gelu_pytorch_tanh"}, {"n_inner": 256}])
def test_honoured_options_match_transformers(tmp_path, options):
    """Accepted options give transformers' logits (the NumPy runner, fp32 limit 1e-4)."""
    import torch
    import transformers

    from gpt2block.backends import make_runner

    c = make_hf_checkpoint(tmp_path / "c", 2, 64, 1, vocab_size=300, n_positions=16, seed=9)
    _config(c.path, **options)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(c.path), attn_implementation="eager").float().eval()
    ids = [5, 17, 200, 3, 99, 42]
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    ours = make_runner(load_weights(c.path), "numpy").forward(ids)
    assert np.abs(ours - ref).max() <= 1e-4


# ---------------------------------------------------------------- 5. output targets of every file type

def _targets(tmp_path, ckpt):
    """(label, path, maker) for every kind of target that must be refused."""
    d = tmp_path / "t"
    d.mkdir(exist_ok=True)
    return {
        "directory": (d / "dir", lambda p: p.mkdir()),
        "fifo": (d / "fifo", os.mkfifo),
        "device": (Path("/dev/null"), None),
        "link to device": (d / "null-link", lambda p: p.symlink_to("/dev/null")),
        "input model.safetensors": (ckpt / "model.safetensors", None),
        "input config.json": (ckpt / "config.json", None),
        "input tokenizer.json": (ckpt / "tokenizer.json", None),
        "hard link to an input": (d / "hard", lambda p: os.link(ckpt / "model.safetensors", p)),
        "name with NUL": (Path(str(d / "a\0b")), None),
        "name over 255 bytes": (d / ("x" * 256), None),
        "folder is a file": (ckpt / "config.json" / "p.safetensors", None),
    }


TARGET_KINDS = ("directory", "fifo", "device", "link to device", "input model.safetensors", "input config.json",
                "input tokenizer.json", "hard link to an input", "name with NUL", "name over 255 bytes",
                "folder is a file")


def _state(p: Path):
    try:
        s = os.stat(p)
    except (OSError, ValueError):
        return None
    return (stat.S_IFMT(s.st_mode), s.st_ino, s.st_size, s.st_mtime_ns)


@pytest.mark.parametrize("kind", TARGET_KINDS)
def test_pack_refuses_target(ckpt, tmp_path, kind):
    path, make = _targets(tmp_path, ckpt)[kind]
    if make is not None:
        make(path)
    before_target, before_ckpt = _state(path), snapshot(ckpt)
    before_t = snapshot(tmp_path / "t")
    if kind == "name with NUL":  # a NUL cannot cross argv: the API
        with pytest.raises(CheckpointError, match="out_path .*NUL byte"):
            pack(ckpt, path)
    elif kind == "directory":  # click's own check of -o (a usage error), and the API's
        one_error(run("pack", ckpt, "-o", path), 2, "is a directory")
        with pytest.raises(CheckpointError, match="out_path .* is a directory"):
            pack(ckpt, path)
    else:
        one_error(run("pack", ckpt, "-o", path), 1, "out_path")
    assert _state(path) == before_target
    assert snapshot(ckpt) == before_ckpt and snapshot(tmp_path / "t") == before_t


@pytest.mark.parametrize("kind", ("directory", "fifo", "device", "link to device", "name with NUL",
                                  "name over 255 bytes", "kernel source"))
def test_export_refuses_target(tmp_path, kind, monkeypatch):
    from gpt2block.kernel_source import kernels_dir

    targets = _targets(tmp_path, tmp_path)  # (makes the folder t/)
    path, make = targets[kind] if kind != "kernel source" else (kernels_dir() / "solve.cu", None)
    if make is not None:
        make(path)
    before = _state(path)
    before_t = snapshot(tmp_path / "t")
    before_k = snapshot(kernels_dir())
    if kind == "name with NUL":
        with pytest.raises(OutputError, match="out_path .*NUL byte"):
            export_cuda(path)
    elif kind == "directory":
        one_error(run("export-cuda", "-o", path), 2, "is a directory")
        with pytest.raises(OutputError, match="out_path .* is a directory"):
            export_cuda(path)
    else:
        one_error(run("export-cuda", "-o", path), 1, "out_path")
    assert _state(path) == before and snapshot(tmp_path / "t") == before_t and snapshot(kernels_dir()) == before_k


def test_pack_refuses_its_own_packed_input(small, tmp_path):
    p = pack(small.path, tmp_path / "p.safetensors")
    before = snapshot(tmp_path)
    one_error(run("pack", p, "-o", p), 1, "one of the input model's own files")
    assert snapshot(tmp_path) == before


def test_pack_refuses_a_shard(small, tmp_path):
    small.model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    (tmp_path / "sharded" / "tokenizer.json").write_text((small.path / "tokenizer.json").read_text())
    shard = sorted((tmp_path / "sharded").glob("model-0*.safetensors"))[0]
    before = snapshot(tmp_path / "sharded")
    one_error(run("pack", tmp_path / "sharded", "-o", shard), 1, "one of the input model's own files")
    assert snapshot(tmp_path / "sharded") == before


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_mode_and_same_bytes(small, tmp_path, umask):
    old = os.umask(umask)
    try:
        a = pack(small.path, tmp_path / "a.safetensors")
        b = pack(small.path, tmp_path / "b.safetensors")
        e1 = export_cuda(tmp_path / "s1.cu")
        e2 = export_cuda(tmp_path / "s2.cu")
        (tmp_path / "old.safetensors").write_bytes(b"old")
        c = pack(small.path, tmp_path / "old.safetensors")  # a regular file is replaced
    finally:
        os.umask(old)
    for p in (a, b, e1, e2, c):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o644 & ~umask
    assert a.read_bytes() == b.read_bytes() == c.read_bytes() and e1.read_bytes() == e2.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "b.safetensors", "old.safetensors",
                                                          "s1.cu", "s2.cu"]


def test_packed_file_is_what_the_library_reads(small, tmp_path):
    p = pack(small.path, tmp_path / "p.safetensors")
    w = load_weights(small.path)
    with safe_open(str(p), framework="numpy") as f:
        assert f.metadata()["format"] == ck.PACKED_FORMAT
        np.testing.assert_array_equal(f.get_tensor("blocks"), w.blocks)
        np.testing.assert_array_equal(f.get_tensor("wte"), w.wte)


@pytest.mark.parametrize("which", ["pack", "export"])
def test_full_disk_leaves_nothing(small, tmp_path, monkeypatch, which):
    import errno

    import gpt2block.output as output

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, b):
            self.n += 1
            if self.n > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    monkeypatch.setattr(output.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    target = tmp_path / ("p.safetensors" if which == "pack" else "s.cu")
    target.write_bytes(b"previous")
    args = ("pack", small.path, "-o", target) if which == "pack" else ("export-cuda", "-o", target)
    if which == "export":  # one write: let the first one fail
        monkeypatch.setattr(Full, "write", lambda self, b: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    one_error(run(*args), 1, "No space left on device", "nothing was left behind")
    assert target.read_bytes() == b"previous" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_stale_temporaries_are_swept(small, tmp_path):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        old = time.time() - 3600
        stale = tmp_path / f".p.safetensors{TMP_TAG}{dead.pid}"
        running = tmp_path / f".q.safetensors{TMP_TAG}{alive.pid}"
        other = tmp_path / ".notes.tmp"
        for p in (stale, running, other):
            p.write_bytes(b"x")
            os.utime(p, (old, old))
        pack(small.path, tmp_path / "p.safetensors")
        assert not stale.exists() and running.exists() and other.exists()
    finally:
        alive.kill()
        alive.wait()


# ---------------------------------------------------------------- 1. input files that are no regular files

@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_non_regular_checkpoint_files_are_refused_before_opening(ckpt, kind):
    f = ckpt / "model.safetensors"
    f.unlink()
    {"fifo": os.mkfifo, "directory": os.mkdir, "device": lambda p: p.symlink_to("/dev/null")}[kind](f)
    t0 = time.perf_counter()
    r = run("pack", ckpt, "-o", ckpt.parent / "p.safetensors")
    assert time.perf_counter() - t0 < 5
    one_error(r, 1, str(f), "not a regular file")


@pytest.mark.parametrize("name, words", [("a\0b.safetensors", "NUL byte"), ("s" * 300 + ".safetensors", "255")])
def test_bad_shard_names(ckpt, name, words):
    (ckpt / "model.safetensors").rename(ckpt / "shard.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": name}}))
    one_error(run("pack", ckpt, "-o", ckpt.parent / "p.safetensors"), 1, "index.json", words)


def test_fifo_shard_does_not_hang(ckpt):
    (ckpt / "model.safetensors").rename(ckpt / "shard-1.safetensors")
    os.mkfifo(ckpt / "shard-2.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"wte.weight": "shard-1.safetensors", "wpe.weight": "shard-2.safetensors"}}))
    one_error(run("pack", ckpt, "-o", ckpt.parent / "p.safetensors"), 1, "shard-2.safetensors", "FIFO")


# ---------------------------------------------------------------- 3, 4. validate

def test_validate_refuses_non_finite_logits(ckpt):
    _rewrite(ckpt, lambda t: {**t, "ln_f.weight": np.full_like(t["ln_f.weight"], 3e38)})
    r = run("validate", "--model", ckpt, "--backend", "numpy")
    line = one_error(r, 1, "logits hold", "no check can pass")
    assert "PASS" not in r.output and line


@pytest.mark.parametrize("prompt, offset, byte", [("ab\udcff", 2, "0xff"), ("\udcc3(", 0, "0xc3"),
                                                   ("é\udc80z", 2, "0x80")])
def test_validate_prompt_not_utf8(small, prompt, offset, byte):
    r = run("validate", "--model", small.path, "--backend", "numpy", "--prompt", prompt)
    one_error(r, 2, f"byte {byte} at byte offset {offset}", "--prompt")


def test_validate_checks_never_pass_on_nan():
    from gpt2block.validate import check_logits, check_top1

    ours = np.full((3, 5), np.nan, np.float32)
    assert not check_logits(ours, ours, 1e-4).passed and not check_top1(ours, ours, 1e-4).passed


def test_validate_on_a_short_context(tmp_path):
    c = make_hf_checkpoint(tmp_path / "c", 1, 64, 1, vocab_size=300, n_positions=4, seed=2)
    r = run("validate", "--model", c.path, "--backend", "numpy", "--prompt", "the cache remembers keys")
    assert r.exit_code == 0, r.output
    assert "greedy 3-token continuation" in r.output and "all checks passed" in r.output


# ---------------------------------------------------------------- 7. solve: output writable

def test_solve_refuses_read_only_output_before_computing(monkeypatch):
    import importlib

    from gpt2block.backends import numpy_ref
    from gpt2block.layout import block_numel

    solve_mod = importlib.import_module("gpt2block.solve")
    monkeypatch.setattr(numpy_ref, "block_flat", lambda *a, **k: pytest.fail("computed before the check"))
    x = np.zeros((3, 768), np.float32)
    out = np.zeros((3, 768), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="output is read-only"):
        solve_mod.solve(x, out, np.zeros(block_numel(768), np.float32), 3)


def test_solve_refuses_read_only_cuda_array_interface():
    import importlib

    solve_mod = importlib.import_module("gpt2block.solve")

    class Dev:
        def __init__(self, shape, readonly):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (4096, readonly),
                                             "version": 3, "strides": None}

    with pytest.raises(ValueError, match="output is read-only"):
        solve_mod.solve(Dev((3, 768), False), Dev((3, 768), True), Dev((7087872,), False), 3)


# ---------------------------------------------------------------- 6. the hub without network

def test_hub_without_network_fails_fast(monkeypatch, tmp_path):
    import socket

    from huggingface_hub import constants

    def refused(*a, **k):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr(ck, "_hub_probe", [])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    for v in ck.PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        load_model("gpt2")
    assert time.perf_counter() - t0 < 3
    msg = str(e.value)
    assert msg.startswith("openai-community/gpt2: could not reach the Hugging Face hub")
    assert "HF_HUB_OFFLINE=1" in msg and "python scripts/make_random_checkpoint.py gpt2 DIR" in msg


def test_hub_probe_remembers_a_success_only(monkeypatch):
    import socket

    calls = []

    class Conn:
        def close(self):
            pass

    def connect(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("Network is unreachable")
        return Conn()

    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setattr(ck, "_hub_probe", [])
    for v in ck.PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    assert ck.hub_reachable() is False  # offline at first
    assert ck.hub_reachable() is True and ck.hub_reachable() is True  # the network came: asked again, then kept
    assert len(calls) == 2


@pytest.mark.parametrize("bad", [None, 5, b"p.safetensors", ""])
def test_output_argument_of_wrong_type(small, bad):
    with pytest.raises(TypeError, match="out_path must be a non-empty str or Path"):
        pack(small.path, bad)
    with pytest.raises(TypeError, match="out_path must be a non-empty str or Path"):
        export_cuda(bad)

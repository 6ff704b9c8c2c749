"""Checkpoints: resolution, both name conventions, fp16/bf16, packing, and every error naming file and tensor."""

import json
import shutil
from types import SimpleNamespace

import huggingface_hub
import numpy as np
import pytest
import torch
from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from hf_checkpoints import make_hf_checkpoint, make_tokenizer_json
from gpt2block import checkpoint as ck
from gpt2block.checkpoint import (HUB_IDS, PACKED_FORMAT, CheckpointError, LoadedModel, default_pack_path,
                                  load_model, load_weights, pack, resolve)
from gpt2block.layout import FIELDS
from gpt2block.tokenizer import Tokenizer

ARRAYS = ("blocks", "wte", "wpe", "ln_f_g", "ln_f_b")


def small(path, **kw):
    """A 2-layer, 64-wide random checkpoint (fast to build)."""
    args = dict(vocab_size=300, n_positions=16, seed=7)
    args.update(kw)
    return make_hf_checkpoint(path, 2, 64, 1, **args)


def assert_same_weights(a, b):
    assert a.config == b.config
    for k in ARRAYS:
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)


def assert_weights_equal_model(w, model):
    """Every packed value equals the torch model's parameter, by layout field."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for i in range(w.config.n_layer):
        views = w.block(i)
        for field, suffix, _ in FIELDS:
            np.testing.assert_array_equal(views[field], sd[f"transformer.h.{i}.{suffix}"], err_msg=f"h.{i}.{suffix}")
    np.testing.assert_array_equal(w.wte, sd["transformer.wte.weight"])
    np.testing.assert_array_equal(w.wpe, sd["transformer.wpe.weight"])
    np.testing.assert_array_equal(w.ln_f_g, sd["transformer.ln_f.weight"])
    np.testing.assert_array_equal(w.ln_f_b, sd["transformer.ln_f.bias"])


def rewrite(path, fn):
    """Apply fn to the tensors of path/model.safetensors (a dict name -> array) and write them back."""
    f = path / "model.safetensors"
    tensors = fn(load_file(str(f)))
    save_file(tensors, str(f))


# ---------------------------------------------------------------- loading what is right

def test_both_conventions_load_the_model(tmp_path):
    a = small(tmp_path / "prefixed", prefix=True)
    b = small(tmp_path / "plain", prefix=False, mask_buffers=True)
    names = safe_open(str(b.path / "model.safetensors"), "np").keys()
    assert "h.0.attn.bias" in names and "h.1.attn.masked_bias" in names and "wte.weight" in names
    assert any(n.startswith("transformer.h.0.") for n in safe_open(str(a.path / "model.safetensors"), "np").keys())
    wa, wb = load_weights(a.path), load_weights(b.path)
    assert_same_weights(wa, wb)
    assert_weights_equal_model(wa, a.model)
    assert wa.blocks.shape == (2, 12 * 64 * 64 + 13 * 64) and wa.blocks.dtype == np.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_checkpoints(tmp_path, dtype):
    c = small(tmp_path / "half", dtype=dtype)
    want = {"float16": "F16", "bfloat16": "BF16"}[str(dtype).split(".")[1]]
    assert ck.SafetensorsFile(c.path / "model.safetensors").dtype("transformer.wte.weight") == want
    w = load_weights(c.path)
    assert_weights_equal_model(w, c.model)  # exact: every half value is a float32


def test_reader_agrees_with_safetensors(tmp_path):
    c = small(tmp_path / "c", prefix=False)
    mine = ck.SafetensorsFile(c.path / "model.safetensors")
    with safe_open(str(c.path / "model.safetensors"), "np") as theirs:
        for name in ("wte.weight", "h.1.mlp.c_proj.weight", "ln_f.bias"):
            np.testing.assert_array_equal(mine.float32(name), theirs.get_tensor(name))


def test_tied_lm_head_is_accepted(tmp_path):
    c = small(tmp_path / "c", prefix=False)
    rewrite(c.path, lambda t: {**t, "lm_head.weight": t["wte.weight"].copy()})
    assert_weights_equal_model(load_weights(c.path), c.model)


def test_sharded_checkpoint(tmp_path):
    c = small(tmp_path / "one")
    c.model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    shutil.copy(c.path / "tokenizer.json", tmp_path / "sharded")
    assert_same_weights(load_weights(tmp_path / "sharded"), load_weights(c.path))
    index = tmp_path / "sharded" / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"wte.weight": "../elsewhere.safetensors"}}))
    with pytest.raises(CheckpointError, match="index.json: its weight_map must name shard files"):
        load_weights(tmp_path / "sharded")
    index.write_text("{}")
    with pytest.raises(CheckpointError, match="index.json: not a safetensors index"):
        load_weights(tmp_path / "sharded")


def test_load_model_gives_tokenizer(tiny_ckpt):
    lm = load_model(tiny_ckpt.path)
    assert isinstance(lm, LoadedModel) and isinstance(lm.tokenizer, Tokenizer)
    assert lm.tokenizer.eot_id == 511 and lm.source == str(tiny_ckpt.path)
    assert lm.tokenizer.decode(lm.tokenizer.encode("the cache remembers keys")) == "the cache remembers keys"


def test_vocab_merges_tokenizer(tmp_path):
    c = small(tmp_path / "c", tokenizer="vocab_merges")
    assert not (c.path / "tokenizer.json").exists()
    lm = load_model(c.path)
    assert lm.tokenizer.eot_id == 299


# ---------------------------------------------------------------- packing

def test_pack_round_trip_is_bit_exact(tmp_path, tiny_ckpt):
    out = pack(tiny_ckpt.path, tmp_path / "new" / "dir" / "tiny.safetensors")
    assert out == tmp_path / "new" / "dir" / "tiny.safetensors" and out.is_file()
    assert [p.name for p in out.parent.iterdir()] == ["tiny.safetensors"]  # no temp file left
    original, packed = load_model(tiny_ckpt.path), load_model(out)
    assert_same_weights(original.weights, packed.weights)
    assert packed.tokenizer.to_json_str() == original.tokenizer.to_json_str()
    assert packed.source == str(out)
    with safe_open(str(out), "np") as f:  # readable by safetensors itself, with our metadata
        meta = f.metadata()
        assert sorted(f.keys()) == sorted(["blocks", "wte", "wpe", "ln_f.weight", "ln_f.bias"])
        np.testing.assert_array_equal(f.get_tensor("blocks"), original.weights.blocks)
    assert meta["format"] == PACKED_FORMAT
    assert json.loads(meta["config"]) == original.weights.config.to_dict()
    assert Tokenizer.from_json_str(meta["tokenizer"]).vocab_size == 512
    assert_same_weights(load_weights(pack(out, tmp_path / "again.safetensors")), original.weights)  # packed -> packed


def test_packed_weights_are_views_of_the_mapped_file(tmp_path, tiny_ckpt):
    """A packed model's arrays are read-only views of the memory-mapped file, not copies in memory."""
    out = pack(tiny_ckpt.path, tmp_path / "tiny.safetensors")
    w = load_weights(out)
    for arr in (w.blocks, w.wte, w.wpe, w.ln_f_g, w.ln_f_b):
        base = arr
        while base.base is not None and not isinstance(base, np.memmap):
            base = base.base
        assert isinstance(base, np.memmap) and not arr.flags.writeable


@pytest.mark.slow
def test_pack_round_trip_full_gpt2_shape(tmp_path, gpt2_ckpt, gpt2_weights):
    out = pack(gpt2_ckpt.path, tmp_path / "gpt2.safetensors")
    assert out.stat().st_size > 124_439_808 * 4  # every parameter as float32, plus the header
    packed = load_model(out)
    assert_same_weights(packed.weights, gpt2_weights)
    assert packed.weights.blocks.shape == (12, 7_087_872)


def test_pack_is_atomic(tmp_path, tiny_ckpt, monkeypatch):
    out = tmp_path / "m.safetensors"
    out.write_bytes(b"the old file")

    def broken(f, tensors, metadata):
        f.write(b"half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck, "write_packed", broken)
    with pytest.raises(CheckpointError, match="m.safetensors: cannot write.*No space"):
        pack(tiny_ckpt.path, out)
    assert out.read_bytes() == b"the old file"
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_pack_to_a_directory_is_refused(tmp_path, tiny_ckpt):
    with pytest.raises(CheckpointError, match="is a directory"):
        pack(tiny_ckpt.path, tmp_path)


def test_default_pack_path():
    assert default_pack_path("gpt2") == ck.DEFAULT_WEIGHTS_DIR / "gpt2.safetensors"
    assert default_pack_path("openai-community/gpt2-xl").name == "gpt2-xl.safetensors"
    assert default_pack_path("/some/dir/mymodel/").name == "mymodel.safetensors"
    assert ck.DEFAULT_WEIGHTS_DIR.name == "weights"


# ---------------------------------------------------------------- errors in HF directories

@pytest.fixture
def plain(tmp_path):
    """A fresh fp32 no-prefix checkpoint to break."""
    return small(tmp_path / "c", prefix=False, mask_buffers=False).path


def test_missing_model_file(plain):
    (plain / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"c/model\.safetensors: missing file"):
        load_weights(plain)
    torch.save({}, plain / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="only pytorch_model.bin"):
        load_weights(plain)


def test_missing_config(plain):
    (plain / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"c/config\.json: missing file"):
        load_weights(plain)


def test_missing_tokenizer(plain):
    (plain / "tokenizer.json").unlink()
    assert load_weights(plain).config.n_layer == 2  # weights alone do not need it
    with pytest.raises(CheckpointError, match="no tokenizer.json, and no vocab.json"):
        load_model(plain)


def test_missing_tensor(plain):
    rewrite(plain, lambda t: {k: v for k, v in t.items() if k != "h.1.mlp.c_fc.bias"})
    with pytest.raises(CheckpointError, match=r"model\.safetensors: missing tensor h\.1\.mlp\.c_fc\.bias"):
        load_weights(plain)


def test_extra_tensor(plain):
    rewrite(plain, lambda t: {**t, "h.2.ln_1.weight": t["h.1.ln_1.weight"]})
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unexpected tensor h\.2\.ln_1\.weight"):
        load_weights(plain)


def test_wrong_shape(plain):
    rewrite(plain, lambda t: {**t, "h.0.attn.c_attn.weight": t["h.0.attn.c_attn.weight"].T.copy()})
    with pytest.raises(CheckpointError, match=r"tensor h\.0\.attn\.c_attn\.weight has shape \[192, 64\]; "
                                              r"expected \[64, 192\]"):
        load_weights(plain)


def test_integer_dtype(plain):
    rewrite(plain, lambda t: {**t, "ln_f.weight": np.ones(64, np.int32)})
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor ln_f\.weight has dtype I32"):
        load_weights(plain)


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_non_finite_weight(plain, bad, word):
    def poison(t):
        t["h.1.attn.c_proj.weight"][5, 7] = bad
        return t

    rewrite(plain, poison)
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor h\.1\.attn\.c_proj\.weight holds "
                                              rf"{word} \(1 values; first at index \(5, 7\)"):
        load_weights(plain)


def test_untied_lm_head(plain):
    rewrite(plain, lambda t: {**t, "lm_head.weight": t["wte.weight"] * 2})
    with pytest.raises(CheckpointError, match=r"lm_head\.weight differs from wte\.weight; untied"):
        load_weights(plain)


def test_duplicate_names(plain):
    rewrite(plain, lambda t: {**t, "transformer.wte.weight": t["wte.weight"]})
    with pytest.raises(CheckpointError, match="appears twice"):
        load_weights(plain)


def test_config_refusal_names_file_and_field(plain):
    cfg = json.loads((plain / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({**cfg, "activation_function": "relu"}))
    with pytest.raises(CheckpointError, match=r"config\.json.*activation_function"):
        load_weights(plain)
    (plain / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(CheckpointError, match=r"config\.json: config field model_type"):
        load_weights(plain)
    (plain / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON"):
        load_weights(plain)


def test_tokenizer_larger_than_vocab(tmp_path):
    c = small(tmp_path / "c", vocab_size=300)
    (c.path / "tokenizer.json").write_text(make_tokenizer_json(400))
    with pytest.raises(CheckpointError, match="tokenizer has 400 tokens but the model's vocab_size is 300"):
        load_model(c.path)


@pytest.mark.parametrize("content, words", [
    (b"", "header too small"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!", "invalid JSON in header"),
])
def test_not_safetensors(plain, content, words):
    (plain / "model.safetensors").write_bytes(content)
    with pytest.raises(CheckpointError, match=f"model.safetensors: not a valid safetensors file \\(.*{words}"):
        load_weights(plain)


def test_truncated_file(plain):
    f = plain / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a valid safetensors file \(.*"
                                              r"(incomplete|not fully covered)"):
        load_weights(plain)


# ---------------------------------------------------------------- errors in packed files

def test_hf_file_is_not_a_packed_file(tiny_ckpt):
    with pytest.raises(CheckpointError, match="model.safetensors: not a gpt2block packed file"):
        load_weights(tiny_ckpt.path / "model.safetensors")


def _packed(tmp_path, tiny_ckpt):
    out = pack(tiny_ckpt.path, tmp_path / "p.safetensors")
    with safe_open(str(out), "np") as f:
        return out, {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def test_packed_wrong_format(tmp_path, tiny_ckpt):
    out, tensors, meta = _packed(tmp_path, tiny_ckpt)
    save_file(tensors, str(out), metadata={**meta, "format": "gpt2block-packed-v0"})
    with pytest.raises(CheckpointError, match="p.safetensors: packed format 'gpt2block-packed-v0'"):
        load_weights(out)


def test_packed_shape_against_config(tmp_path, tiny_ckpt):
    out, tensors, meta = _packed(tmp_path, tiny_ckpt)
    cfg = json.loads(meta["config"])
    save_file(tensors, str(out), metadata={**meta, "config": json.dumps({**cfg, "n_layer": 3})})
    with pytest.raises(CheckpointError, match=r"p\.safetensors: tensor blocks has shape \[2, 198272\]; "
                                              r"expected \[3, 198272\]"):
        load_weights(out)


def test_packed_missing_and_extra(tmp_path, tiny_ckpt):
    out, tensors, meta = _packed(tmp_path, tiny_ckpt)
    save_file({k: v for k, v in tensors.items() if k != "wpe"}, str(out), metadata=meta)
    with pytest.raises(CheckpointError, match=r"p\.safetensors: missing tensor wpe"):
        load_weights(out)
    save_file({**tensors, "lm_head": tensors["wte"]}, str(out), metadata=meta)
    with pytest.raises(CheckpointError, match=r"p\.safetensors: unexpected tensor lm_head"):
        load_weights(out)


def test_packed_bad_config_and_tokenizer(tmp_path, tiny_ckpt):
    out, tensors, meta = _packed(tmp_path, tiny_ckpt)
    cfg = json.loads(meta["config"])
    save_file(tensors, str(out), metadata={**meta, "config": json.dumps({**cfg, "activation_function": "relu"})})
    with pytest.raises(CheckpointError, match="p.safetensors: metadata config.*activation_function"):
        load_weights(out)
    save_file(tensors, str(out), metadata={k: v for k, v in meta.items() if k != "tokenizer"})
    assert load_weights(out).config.n_layer == 2
    with pytest.raises(CheckpointError, match="p.safetensors: packed file has no 'tokenizer'"):
        load_model(out)


def test_packed_nan(tmp_path, tiny_ckpt):
    out, tensors, meta = _packed(tmp_path, tiny_ckpt)
    tensors["blocks"][1, 1000] = np.nan
    save_file(tensors, str(out), metadata=meta)
    with pytest.raises(CheckpointError, match=r"p\.safetensors: tensor blocks holds NaN .*\(1, 1000\)"):
        load_weights(out)


# ---------------------------------------------------------------- model strings and the hub

def test_resolution():
    assert resolve("gpt2") == ("hub", "openai-community/gpt2")
    assert resolve("distilgpt2") == ("hub", "distilbert/distilgpt2")
    assert resolve("someone/my-gpt2.v2") == ("hub", "someone/my-gpt2.v2")
    assert set(HUB_IDS) == {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2"}


@pytest.mark.parametrize("model", ["no/such/dir", "./nope", "nope", "weights/nope.safetensors", "gpt3", ""])
def test_bad_model_string(model, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: pytest.fail("must not reach the hub"))
    with pytest.raises(CheckpointError, match="no such file or directory, and not a hub id|got ''"):
        load_model(model)


def test_model_of_wrong_type():
    with pytest.raises(CheckpointError, match="got 12"):
        load_model(12)


def fake_hub(tmp_path, source, missing=(), requested=None):
    """hf_hub_download over a local directory, recording which files were asked for."""
    snap = tmp_path / "snapshot"
    snap.mkdir()

    def download(repo_id, filename, **kw):
        if requested is not None:
            requested.append((repo_id, filename))
        if filename in missing or not (source / filename).exists():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        shutil.copy(source / filename, snap / filename)
        return str(snap / filename)

    return download


def test_hub_download_fetches_only_needed_files(tmp_path, monkeypatch, tiny_ckpt):
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hub(tmp_path, tiny_ckpt.path, requested=asked))
    lm = load_model("me/tiny")
    assert asked == [("me/tiny", "config.json"), ("me/tiny", "model.safetensors"), ("me/tiny", "tokenizer.json")]
    assert lm.source == "me/tiny" and lm.tokenizer.eot_id == 511
    assert_same_weights(lm.weights, load_weights(tiny_ckpt.path))
    asked.clear()
    load_weights("me/tiny")
    assert [f for _, f in asked] == ["config.json", "model.safetensors"]


def test_hub_tokenizer_fallback(tmp_path, monkeypatch):
    c = small(tmp_path / "c", tokenizer="vocab_merges")
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hub(tmp_path, c.path, requested=asked))
    assert load_model("me/small").tokenizer.eot_id == 299
    assert [f for _, f in asked] == ["config.json", "model.safetensors", "tokenizer.json", "vocab.json", "merges.txt"]


def test_hub_sharded_checkpoint(tmp_path, monkeypatch):
    c = small(tmp_path / "one")
    c.model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    shutil.copy(c.path / "tokenizer.json", tmp_path / "sharded")
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hub(tmp_path, tmp_path / "sharded", requested=asked))
    assert_same_weights(load_model("me/sharded").weights, load_weights(c.path))
    names = [f for _, f in asked]
    assert names[:3] == ["config.json", "model.safetensors", "model.safetensors.index.json"]
    assert len([n for n in names if n.startswith("model-0")]) > 1


def test_hub_repo_without_safetensors(tmp_path, monkeypatch, tiny_ckpt):
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        fake_hub(tmp_path, tiny_ckpt.path, missing=("model.safetensors",)))
    with pytest.raises(CheckpointError, match="me/tiny: the hub repository has no model.safetensors"):
        load_model("me/tiny")


@pytest.mark.parametrize("exc", [
    LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub and we cannot find "
                            "the requested files in the local cache."),
    OfflineModeIsEnabled("offline mode is enabled"),
    ConnectionError("[Errno 101] Network is unreachable"),
    TimeoutError("timed out"),
])
def test_hub_unreachable(monkeypatch, exc):
    def download(**kw):
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(CheckpointError) as e:
        load_model("gpt2")
    msg = str(e.value)
    assert msg.startswith("openai-community/gpt2: could not reach the Hugging Face hub")
    assert "local path" in msg and "gpt2block pack" in msg


def test_hub_offline_mode_real_function(monkeypatch, tmp_path):
    """huggingface_hub itself, in offline mode with an empty cache: no network is touched."""
    import socket

    from huggingface_hub import constants

    def no_network(*args, **kw):
        pytest.fail("the test touched the network")  # an OutcomeException: no except Exception swallows it

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match="could not reach the Hugging Face hub.*gpt2block pack"):
        load_weights("distilgpt2")


def test_hub_repo_not_found(monkeypatch):
    from huggingface_hub.utils import RepositoryNotFoundError

    def download(**kw):
        response = SimpleNamespace(headers={}, request=None, status_code=404)
        raise RepositoryNotFoundError("404 Client Error: Repository Not Found", response=response)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(CheckpointError, match="nobody/nothing: no such repository on the Hugging Face hub"):
        load_model("nobody/nothing")

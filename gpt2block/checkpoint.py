"""Checkpoints: find a model (hub id, local Hugging Face directory, packed file), read it, pack it.

    model argument -> resolve() -> Hugging Face dir (hub snapshot or local) | packed file
    HF dir: config.json + model.safetensors (+ tokenizer) -> check every tensor -> ModelWeights
    packed: one safetensors file, blocks [n_layer, block_numel] + wte, wpe, ln_f, config
            and tokenizer.json in its metadata (see weights/README.md)

safetensors files are read memory-mapped with a small header reader of our own,
so that fp32, fp16 and bf16 all take one path (NumPy has no bf16) and torch is
never needed. Every error is a CheckpointError naming the file and the tensor.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import ConfigError, GPT2Config
from .layout import FIELDS, block_layout
from .tokenizer import Tokenizer, TokenizerError
from .weights import ModelWeights

HUB_IDS = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "distilgpt2": "distilbert/distilgpt2",
}
PACKED_FORMAT = "gpt2block-packed-v1"
PACKED_TENSORS = ("blocks", "wte", "wpe", "ln_f.weight", "ln_f.bias")


def _default_weights_dir() -> Path:
    """The checkout's weights/ folder when running from a checkout, else ./weights."""
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").is_file() and (repo / "weights").is_dir():
        return repo / "weights"
    return Path("weights")


DEFAULT_WEIGHTS_DIR = _default_weights_dir()


class CheckpointError(Exception):
    """A model that cannot be found or read; the message names the file and, where relevant, the tensor."""


@dataclass
class LoadedModel:
    weights: ModelWeights
    tokenizer: Tokenizer
    source: str  # what was loaded, for messages (path or hub id)


# ---------------------------------------------------------------- safetensors, memory-mapped

# dtype -> bytes per element; the float ones are what a weight may be
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
MAX_HEADER = 100 * 1024 * 1024


class SafetensorsFile:
    """The header of one .safetensors file and its tensors as float32 arrays (memory-mapped)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
                n = int.from_bytes(head, "little") if len(head) == 8 else -1
                if n < 2 or n > min(MAX_HEADER, size - 8):
                    raise CheckpointError(f"{self.path}: not a safetensors file (bad header length)")
                header = self._parse_header(f.read(n))
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise CheckpointError(f"{self.path}: file not found") from None
        except (IsADirectoryError, PermissionError) as e:
            raise CheckpointError(f"{self.path}: cannot read ({e.strerror})") from None
        self._start = 8 + n
        meta = header.pop("__metadata__", None) or {}
        self.metadata: dict[str, str] = meta if isinstance(meta, dict) else {}
        self.entries: dict[str, dict] = header
        self._check_entries(size - self._start)

    def _parse_header(self, raw: bytes) -> dict:
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CheckpointError(f"{self.path}: not a safetensors file (header is not JSON)") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: not a safetensors file (header is not a JSON object)")
        return header

    def _check_entries(self, data_size: int) -> None:
        for name, e in self.entries.items():
            ok = (isinstance(e, dict) and e.get("dtype") in DTYPE_SIZES and isinstance(e.get("shape"), list)
                  and all(isinstance(s, int) and s >= 0 for s in e["shape"])
                  and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2)
            if not ok:
                raise CheckpointError(f"{self.path}: tensor {name}: malformed header entry {e!r}")
            a, b = e["data_offsets"]
            if not (0 <= a <= b <= data_size) or b - a != DTYPE_SIZES[e["dtype"]] * int(np.prod(e["shape"])):
                raise CheckpointError(f"{self.path}: tensor {name}: data offsets {a}..{b} do not fit the file "
                                      f"or its shape {e['shape']} and dtype {e['dtype']} (truncated file?)")

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name]["shape"])

    def dtype(self, name: str) -> str:
        return self.entries[name]["dtype"]

    def check(self, name: str, shape: tuple[int, ...], label: str | None = None) -> None:
        """Header-only checks: a float dtype and the expected shape."""
        label = label or name
        if self.dtype(name) not in FLOAT_DTYPES:
            raise CheckpointError(f"{self.path}: tensor {label} has dtype {self.dtype(name)}; "
                                  f"a weight must be a float ({', '.join(FLOAT_DTYPES)})")
        if self.shape(name) != tuple(shape):
            raise CheckpointError(f"{self.path}: tensor {label} has shape {list(self.shape(name))}; "
                                  f"expected {list(shape)}")

    def float32(self, name: str, label: str | None = None) -> np.ndarray:
        """The tensor as float32 (a read-only view of the file for F32), checked finite."""
        e = self.entries[name]
        a, b = e["data_offsets"]
        dt, shape, n = e["dtype"], tuple(e["shape"]), int(np.prod(e["shape"]))
        off = self._start + a
        if dt == "F32":
            arr = np.frombuffer(self._mm, "<f4", n, off)
        elif dt == "F16":
            arr = np.frombuffer(self._mm, "<f2", n, off).astype(np.float32)
        elif dt == "BF16":  # bf16 is the top half of a float32
            arr = (np.frombuffer(self._mm, "<u2", n, off).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F64":
            with np.errstate(over="ignore"):
                arr = np.frombuffer(self._mm, "<f8", n, off).astype(np.float32)
        else:
            raise CheckpointError(f"{self.path}: tensor {label or name} has dtype {dt}; a weight must be a float")
        arr = arr.reshape(shape)
        _check_finite(arr, f"{self.path}: tensor {label or name}")
        return arr


def _check_finite(arr: np.ndarray, what: str) -> None:
    if np.isfinite(arr).all():
        return
    bad = ~np.isfinite(arr)
    first = np.unravel_index(int(np.argmax(bad)), arr.shape)
    kinds = " and ".join(k for k, m in (("NaN", np.isnan(arr)), ("Inf", np.isinf(arr))) if m.any())
    raise CheckpointError(f"{what} holds {kinds} ({int(bad.sum())} values; first at index "
                          f"{tuple(int(i) for i in first)}: {arr[first]})")


# ---------------------------------------------------------------- resolving a model argument

HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def resolve(model: str | Path) -> tuple[str, str | Path]:
    """('dir', path) | ('packed', path) | ('hub', repo_id) for a model argument."""
    if isinstance(model, Path) or (isinstance(model, str) and model):
        p = Path(model).expanduser()
        if p.is_dir():
            return "dir", p
        if p.is_file():
            return "packed", p
        if isinstance(model, str):
            if model in HUB_IDS:
                return "hub", HUB_IDS[model]
            if HUB_ID_RE.match(model) and not model.endswith((".safetensors", ".json")):
                return "hub", model
    else:
        raise CheckpointError(f"model must be a hub id, a directory or a packed file; got {model!r}")
    raise CheckpointError(
        f"{model}: no such file or directory, and not a hub id "
        f"(aliases: {', '.join(HUB_IDS)}; or an id of the form org/name)"
    )


def _hub_download(repo_id: str, filename: str) -> Path | None:
    """One file of a hub repo (hf's own progress bars); None when the repo has no such file."""
    import huggingface_hub
    from huggingface_hub.utils import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                       LocalEntryNotFoundError, RepositoryNotFoundError,
                                       RevisionNotFoundError)

    offline = (f"{repo_id}: could not reach the Hugging Face hub to download {filename} "
               "(no network, or HF_HUB_OFFLINE is set, and it is not in the local cache). "
               "Pass a local path instead: a directory with config.json and model.safetensors, "
               "or a file made by `gpt2block pack` on a machine with network")
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename))
    except LocalEntryNotFoundError as e:
        raise CheckpointError(f"{offline} ({e})") from None
    except GatedRepoError:
        raise CheckpointError(f"{repo_id}: the hub repository is gated; log in with `hf auth login`") from None
    except RepositoryNotFoundError:
        raise CheckpointError(f"{repo_id}: no such repository on the Hugging Face hub "
                              "(and no such local file or directory)") from None
    except RevisionNotFoundError as e:
        raise CheckpointError(f"{repo_id}: revision not found on the hub ({e})") from None
    except EntryNotFoundError:
        return None
    except HfHubHTTPError as e:
        raise CheckpointError(f"{repo_id}: the hub refused {filename}: {e}") from None
    except (OSError, ConnectionError, TimeoutError) as e:
        raise CheckpointError(f"{offline} ({type(e).__name__}: {e})") from None


def _fetch_shards(repo_id: str) -> None:
    """A sharded checkpoint: model.safetensors.index.json and every shard it names."""
    index = _hub_download(repo_id, "model.safetensors.index.json")
    if index is None:
        raise CheckpointError(f"{repo_id}: the hub repository has no model.safetensors "
                              "(gpt2block reads safetensors checkpoints only)")
    for shard in _shard_names(index):
        if _hub_download(repo_id, shard) is None:
            raise CheckpointError(f"{repo_id}: the hub repository has no {shard}, named in its {index.name}")


def fetch(repo_id: str, tokenizer: bool = True) -> Path:
    """Download only the files gpt2block reads; returns the snapshot directory holding them."""
    config = _hub_download(repo_id, "config.json")
    if config is None:
        raise CheckpointError(f"{repo_id}: the hub repository has no config.json")
    if _hub_download(repo_id, "model.safetensors") is None:
        _fetch_shards(repo_id)
    if tokenizer and _hub_download(repo_id, "tokenizer.json") is None:
        for name in ("vocab.json", "merges.txt"):
            if _hub_download(repo_id, name) is None:
                raise CheckpointError(f"{repo_id}: the hub repository has no tokenizer.json and no {name}")
    return config.parent


# ---------------------------------------------------------------- Hugging Face directories

MASK_BUFFER_RE = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
PREFIX = "transformer."


def read_config(path: Path) -> GPT2Config:
    """config.json of a Hugging Face directory (a ConfigError becomes a CheckpointError, same words)."""
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path}: missing file (a Hugging Face checkpoint directory holds config.json)")
    try:
        raw = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_path}: not valid JSON ({e})") from None
    if isinstance(raw, dict) and raw.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{cfg_path}: config field model_type is {raw['model_type']!r}; "
                              "gpt2block runs GPT-2 checkpoints only")
    try:
        return GPT2Config.from_dict(raw, source=str(cfg_path))
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def _shard_names(index: Path) -> list[str]:
    """The shard files named by a model.safetensors.index.json."""
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
    if not names or not all(isinstance(n, str) and n and "/" not in n and n != ".." for n in names):
        raise CheckpointError(f"{index}: its weight_map must name shard files in the same folder")
    return names


def _safetensors_files(path: Path) -> list[SafetensorsFile]:
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        return [SafetensorsFile(single)]
    if index.is_file():  # a sharded save_pretrained
        return [SafetensorsFile(path / s) for s in _shard_names(index)]
    hint = " (only pytorch_model.bin is there; gpt2block reads safetensors)" if (
        path / "pytorch_model.bin").exists() else ""
    raise CheckpointError(f"{single}: missing file{hint}")


def _tensor_index(files: list[SafetensorsFile]) -> dict[str, tuple[SafetensorsFile, str]]:
    """Plain name (no 'transformer.' prefix) -> (file, name in the file); mask buffers dropped."""
    index: dict[str, tuple[SafetensorsFile, str]] = {}
    for f in files:
        for name in f.names():
            plain = name[len(PREFIX):] if name.startswith(PREFIX) else name
            if MASK_BUFFER_RE.match(plain):
                continue
            if plain in index:
                raise CheckpointError(f"{f.path}: tensor {name} appears twice "
                                      f"(also as {index[plain][1]} in {index[plain][0].path})")
            index[plain] = (f, name)
    return index


def expected_tensors(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    """Every parameter of a GPT-2 checkpoint (names without prefix) and its shape."""
    d = config.n_embd
    want = {"wte.weight": (config.vocab_size, d), "wpe.weight": (config.n_positions, d)}
    for i in range(config.n_layer):
        for _, suffix, shape_fn in FIELDS:
            want[f"h.{i}.{suffix}"] = tuple(shape_fn(d))
    want["ln_f.weight"] = want["ln_f.bias"] = (d,)
    return want


def _where(files: list[SafetensorsFile]) -> Path:
    return files[0].path if len(files) == 1 else files[0].path.parent


def _check_names(files, index, want) -> None:
    missing = [n for n in want if n not in index]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{_where(files)}: missing tensor {missing[0]}{more}")
    for plain, (f, name) in index.items():
        if plain not in want and plain != "lm_head.weight":
            raise CheckpointError(f"{f.path}: unexpected tensor {name} (not a parameter of a GPT-2 "
                                  f"with the n_layer, n_embd of its config.json)")


def read_hf_weights(path: Path) -> ModelWeights:
    """config.json + model.safetensors of a Hugging Face directory -> ModelWeights (float32)."""
    config = read_config(path)
    files = _safetensors_files(path)
    index = _tensor_index(files)
    want = expected_tensors(config)
    _check_names(files, index, want)
    if "lm_head.weight" in index:
        want = {**want, "lm_head.weight": want["wte.weight"]}
    for plain, shape in want.items():  # header only: dtypes and shapes, before reading any data
        f, name = index[plain]
        f.check(name, shape)
    get = lambda plain: index[plain][0].float32(index[plain][1])  # noqa: E731
    lay = block_layout(config.n_embd)
    blocks = np.empty((config.n_layer, lay.numel), np.float32)  # [n_layer, block_numel]
    for i in range(config.n_layer):
        views = lay.views(blocks[i])
        for field, suffix, _ in FIELDS:
            views[field][...] = get(f"h.{i}.{suffix}")
    wte = np.array(get("wte.weight"), np.float32)  # [V, D], copied out of the file
    if "lm_head.weight" in index and not np.array_equal(get("lm_head.weight"), wte):
        f, name = index["lm_head.weight"]
        raise CheckpointError(f"{f.path}: tensor {name} differs from wte.weight; "
                              "untied LM heads are not supported (GPT-2 ties the head to wte)")
    return ModelWeights(config, blocks, wte, np.array(get("wpe.weight"), np.float32),
                        np.array(get("ln_f.weight"), np.float32), np.array(get("ln_f.bias"), np.float32))


def read_hf_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_dir(path)
    except TokenizerError as e:
        raise CheckpointError(str(e)) from None


# ---------------------------------------------------------------- packed files

def packed_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    d = config.n_embd
    return {"blocks": (config.n_layer, block_layout(d).numel), "wte": (config.vocab_size, d),
            "wpe": (config.n_positions, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}


def _packed_config(f: SafetensorsFile) -> GPT2Config:
    fmt = f.metadata.get("format")
    if not isinstance(fmt, str) or not fmt.startswith("gpt2block-packed-"):
        raise CheckpointError(f"{f.path}: not a gpt2block packed file (its metadata format is {fmt!r}); "
                              f"a Hugging Face checkpoint is loaded from its directory ({f.path.parent})")
    if fmt != PACKED_FORMAT:
        raise CheckpointError(f"{f.path}: packed format {fmt!r}; this gpt2block reads {PACKED_FORMAT!r}")
    try:
        return GPT2Config.from_dict(json.loads(f.metadata["config"]), source=f"{f.path}: metadata config")
    except KeyError:
        raise CheckpointError(f"{f.path}: packed file has no 'config' in its metadata") from None
    except (json.JSONDecodeError, TypeError) as e:
        raise CheckpointError(f"{f.path}: metadata config is not valid JSON ({e})") from None
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def read_packed_weights(path: Path) -> ModelWeights:
    """A packed file -> ModelWeights whose arrays are read-only views of the mapped file."""
    f = SafetensorsFile(path)
    config = _packed_config(f)
    want = packed_shapes(config)
    for name in want:
        if name not in f.entries:
            raise CheckpointError(f"{f.path}: missing tensor {name}")
    for name in f.names():
        if name not in want:
            raise CheckpointError(f"{f.path}: unexpected tensor {name} in a packed file")
    for name, shape in want.items():
        f.check(name, shape)
        if f.dtype(name) != "F32":
            raise CheckpointError(f"{f.path}: tensor {name} has dtype {f.dtype(name)}; packed files hold F32")
    return ModelWeights(config, *(f.float32(name) for name in PACKED_TENSORS))


def read_packed_tokenizer(path: Path) -> Tokenizer:
    f = SafetensorsFile(path)
    text = f.metadata.get("tokenizer")
    if text is None:
        raise CheckpointError(f"{path}: packed file has no 'tokenizer' in its metadata")
    try:
        return Tokenizer.from_json_str(text, source=f"{path}: metadata tokenizer")
    except TokenizerError as e:
        raise CheckpointError(str(e)) from None


# ---------------------------------------------------------------- the public entry points

def _check_vocab(weights: ModelWeights, tok: Tokenizer, source: str) -> None:
    if tok.vocab_size > weights.config.vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has {tok.vocab_size} tokens but the model's "
                              f"vocab_size is {weights.config.vocab_size}")


def load_model(model: str | Path) -> LoadedModel:
    """Weights and tokenizer of a hub id or alias, a local Hugging Face directory, or a packed file."""
    kind, where = resolve(model)
    if kind == "packed":
        weights, tok = read_packed_weights(where), read_packed_tokenizer(where)
    else:
        path = fetch(where) if kind == "hub" else where
        weights, tok = read_hf_weights(path), read_hf_tokenizer(path)
    source = str(where)
    _check_vocab(weights, tok, source)
    return LoadedModel(weights, tok, source)


def load_weights(model: str | Path) -> ModelWeights:
    """The weights only (a hub id downloads no tokenizer)."""
    kind, where = resolve(model)
    if kind == "packed":
        return read_packed_weights(where)
    return read_hf_weights(fetch(where, tokenizer=False) if kind == "hub" else where)


def default_pack_path(model: str | Path) -> Path:
    """DEFAULT_WEIGHTS_DIR / <name>.safetensors, the name taken from the alias, hub id or directory."""
    name = Path(str(model).rstrip("/")).name or "model"
    if name.endswith(".safetensors"):
        name = name[: -len(".safetensors")]
    return DEFAULT_WEIGHTS_DIR / f"{name}.safetensors"


def pack(model: str | Path, out_path: str | Path) -> Path:
    """Write ``model`` as one packed safetensors file (atomically); returns its path."""
    from safetensors.numpy import save_file

    loaded = load_model(model)
    w = loaded.weights
    out = Path(out_path).expanduser()
    if out.is_dir():
        raise CheckpointError(f"{out}: is a directory; give the packed file's name (e.g. {out / 'gpt2.safetensors'})")
    tensors = dict(zip(PACKED_TENSORS, (w.blocks, w.wte, w.wpe, w.ln_f_g, w.ln_f_b)))
    metadata = {"format": PACKED_FORMAT, "config": json.dumps(w.config.to_dict(), sort_keys=True),
                "tokenizer": loaded.tokenizer.to_json_str()}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
    except OSError as e:
        raise CheckpointError(f"{out}: cannot write ({e.strerror})") from None
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp, metadata=metadata)
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a packed file is ordinary data
        os.replace(tmp, out)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise CheckpointError(f"{out}: cannot write ({e})") from None
        raise
    return out

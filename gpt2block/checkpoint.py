"""Checkpoints: find a model (hub id, local Hugging Face directory, packed file), read it, pack it.

    model argument -> resolve() -> Hugging Face dir (hub snapshot or local) | packed file
    HF dir: config.json + model.safetensors (+ tokenizer) -> check every tensor -> ModelWeights
    packed: one safetensors file, blocks [n_layer, block_numel] + wte, wpe, ln_f, config
            and tokenizer.json in its metadata (see weights/README.md)

safetensors files are read with the safetensors library (memory-mapped; bf16 through
ml_dtypes, torch is never needed). Every error is a CheckpointError naming the file
and, where there is one, the tensor.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from .config import ConfigError, GPT2Config
from .layout import FIELDS, block_layout
from .output import OutputError, file_kind, check_name, check_output, write_atomic
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


# ---------------------------------------------------------------- safetensors, through the library

FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def check_input_file(path: Path) -> None:
    """Refuse a name with a NUL byte or a component over 255 bytes, a missing file, and anything that is
    not a regular file (a FIFO would block open(), a device or directory is no checkpoint), before
    opening it."""
    try:
        check_name(path, "file")
    except OutputError as e:
        raise CheckpointError(str(e)) from None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path}: is a {file_kind(st.st_mode)}, not a regular file")


class SafetensorsFile:
    """One .safetensors file opened with the safetensors library (memory-mapped): its metadata, the
    names, dtypes and shapes of its tensors, and each tensor as float32. The library checks the header
    (JSON, dtypes, shapes, offsets that tile the data exactly); whatever it refuses is refused here, with
    the file's name."""

    def __init__(self, path: Path):
        self.path = Path(path)
        check_input_file(self.path)
        try:
            self._file = safe_open(str(self.path), framework="numpy")
            self.metadata: dict[str, str] = self._file.metadata() or {}
            self.entries: dict[str, tuple[str, tuple[int, ...]]] = {}
            for name in self._file.keys():
                sl = self._file.get_slice(name)
                self.entries[name] = (sl.get_dtype(), tuple(sl.get_shape()))
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot read ({e.strerror or e})") from None
        except Exception as e:  # SafetensorError: the library's own words
            raise CheckpointError(f"{self.path}: not a valid safetensors file ({_library_words(e)})") from None

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name][1]

    def dtype(self, name: str) -> str:
        return self.entries[name][0]

    def numel(self, name: str) -> int:
        return math.prod(self.shape(name))

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
        """The tensor as a float32 array (F32: a read-only view of the mapped file; other floats converted), checked
        finite."""
        label = label or name
        dt = self.dtype(name)
        if dt not in FLOAT_DTYPES:
            raise CheckpointError(f"{self.path}: tensor {label} has dtype {dt}; a weight must be a float")
        if dt == "BF16":
            try:
                import ml_dtypes  # noqa: F401  (gives NumPy the bfloat16 dtype the library builds)
            except ImportError:
                raise CheckpointError(f"{self.path}: tensor {label} is bf16, which needs the ml_dtypes package "
                                      "(pip install ml_dtypes)") from None
        try:
            arr = self._mapped_f32(name) if dt == "F32" else self._file.get_tensor(name)
        except Exception as e:
            raise CheckpointError(f"{self.path}: tensor {label}: cannot read it ({_library_words(e)})") from None
        if arr.dtype != np.float32:
            with np.errstate(over="ignore"):  # an F64 beyond float32's range becomes Inf, refused below
                arr = arr.astype(np.float32)
        _check_finite(arr, f"{self.path}: tensor {label}")
        return arr


    def _mapped_f32(self, name: str) -> np.ndarray:
        """An F32 tensor as a read-only view of the memory-mapped file (the library's NumPy reader copies:
        a packed gpt2-xl would take twice its 6.2 GB). The header was validated by the library when the
        file was opened; its data offsets are read here with the standard JSON reader."""
        if not hasattr(self, "_map"):
            with open(self.path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
            self._base = 8 + n
            self._offsets = {k: v["data_offsets"] for k, v in header.items() if k != "__metadata__"}
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        begin, end = self._offsets[name]
        return self._map[self._base + begin:self._base + end].view("<f4").reshape(self.shape(name))


def _library_words(e: Exception) -> str:
    text = str(e) or type(e).__name__
    return text if type(e).__name__ == "SafetensorError" else f"{type(e).__name__}: {text}"


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
        if "\0" in str(model):
            raise CheckpointError(f"model {str(model)!r}: a path cannot hold a NUL byte")
        p = Path(model).expanduser()
        if p.is_dir():
            return "dir", p
        if p.is_file():
            return "packed", p
        if os.path.lexists(p):
            check_input_file(p)  # a FIFO, a device, a dangling link: refused by what it is
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


HUB_PROBE_TIMEOUT = 1.5  # seconds to open a TCP connection to the hub before working from the cache
_hub_probe: list[bool] = []  # [True] once the hub answered in this process (a failure is asked again)
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to the hub's endpoint opens within ``timeout`` (a success is remembered for
    the process, a failure asked again at the next download, so a long-running process that started
    offline finds the network once it comes; True behind a proxy, which only the download itself can try). huggingface_hub retries a failing
    request five times over ~24 s; this check answers in at most ``timeout``."""
    if _hub_probe:
        return _hub_probe[0]
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if any(os.environ.get(v) for v in PROXY_VARS):
        return True
    url = urlsplit(constants.ENDPOINT)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    answer = []

    def probe():  # in a thread: a name lookup can outlast the socket's own timeout
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    if answer and answer[0]:
        _hub_probe.append(True)
        return True
    return False


def _hub_download(repo_id: str, filename: str) -> Path | None:
    """One file of a hub repo (hf's own progress bars); None when the repo has no such file. Without a
    connection to the hub, only the local cache is asked."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                       LocalEntryNotFoundError, RepositoryNotFoundError,
                                       RevisionNotFoundError)

    offline = (f"{repo_id}: could not reach the Hugging Face hub to download {filename} "
               "(no network, or HF_HUB_OFFLINE is set, and it is not in the local cache). "
               "Pass a local path instead: a directory with config.json and model.safetensors "
               "(`python scripts/make_random_checkpoint.py gpt2 DIR` writes a random one), "
               "or a file made by `gpt2block pack` on a machine with network; "
               "set HF_HUB_OFFLINE=1 to use the local cache without trying the network")
    local_only = not constants.HF_HUB_OFFLINE and not hub_reachable()
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename,
                                                    local_files_only=local_only))
    except LocalEntryNotFoundError as e:
        raise CheckpointError(offline if local_only else f"{offline} ({e})") from None
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


def read_config_dict(path: Path) -> tuple[GPT2Config, dict]:
    """config.json of a Hugging Face directory, checked, and its raw dict (a ConfigError becomes a
    CheckpointError, same words)."""
    cfg_path = path / "config.json"
    if not cfg_path.exists():
        raise CheckpointError(f"{cfg_path}: missing file (a Hugging Face checkpoint directory holds config.json)")
    check_input_file(cfg_path)
    try:
        raw = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_path}: not valid JSON ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{cfg_path}: cannot read ({e.strerror})") from None
    if isinstance(raw, dict) and raw.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{cfg_path}: config field model_type is {raw['model_type']!r}; "
                              "gpt2block runs GPT-2 checkpoints only")
    try:
        return GPT2Config.from_dict(raw, source=str(cfg_path)), raw
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def read_config(path: Path) -> GPT2Config:
    """config.json of a Hugging Face directory (a ConfigError becomes a CheckpointError, same words)."""
    return read_config_dict(path)[0]


def _shard_names(index: Path) -> list[str]:
    """The shard files named by a model.safetensors.index.json."""
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise CheckpointError(f"{index}: cannot read ({e.strerror})") from None
    if not names or not all(isinstance(n, str) and n and "/" not in n and n not in (".", "..") for n in names):
        raise CheckpointError(f"{index}: its weight_map must name shard files in the same folder")
    for n in names:
        if "\0" in n:
            raise CheckpointError(f"{index}: shard name {n!r} holds a NUL byte")
        if len(os.fsencode(n)) > 255:
            raise CheckpointError(f"{index}: shard name {n[:40]!r}... is {len(os.fsencode(n))} bytes long; "
                                  "file names hold at most 255")
    return names


def _safetensors_files(path: Path) -> list[SafetensorsFile]:
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.exists():
        return [SafetensorsFile(single)]
    if index.exists():  # a sharded save_pretrained
        check_input_file(index)
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


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:,.1f} MiB"


def check_sizes(config: GPT2Config, held: int, where) -> None:
    """Before anything is allocated or listed: a config that describes more than twice the values the
    files hold is refused with the memory it would need (a nearer miss is named tensor by tensor)."""
    need = config.n_params
    if need > 2 * held:
        raise CheckpointError(
            f"{where}: the config (n_layer {config.n_layer}, n_embd {config.n_embd}, n_positions "
            f"{config.n_positions}, vocab_size {config.vocab_size}) describes {need:,} parameters "
            f"({_gib(4 * need)} as float32), but the checkpoint holds only {held:,} values; "
            "check those config fields")


def read_hf_weights(path: Path) -> ModelWeights:
    """config.json + model.safetensors of a Hugging Face directory -> ModelWeights (float32)."""
    config, raw = read_config_dict(path)
    files = _safetensors_files(path)
    index = _tensor_index(files)
    check_sizes(config, sum(f.numel(name) for f, name in index.values()), _where(files))
    want = expected_tensors(config)
    _check_names(files, index, want)
    tied = raw.get("tie_word_embeddings", True)
    if not tied and "lm_head.weight" not in index:
        raise CheckpointError(f"{path / 'config.json'}: config field tie_word_embeddings is false but "
                              f"{_where(files)} has no lm_head.weight (an untied model needs its LM head)")
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
        field = f"config field tie_word_embeddings is {'true' if tied else 'false'}"
        raise CheckpointError(f"{f.path}: tensor {name} differs from wte.weight; untied LM heads are not "
                              f"supported (GPT-2 ties the head to wte; {field})")
    return ModelWeights(config, blocks, wte, np.array(get("wpe.weight"), np.float32),
                        np.array(get("ln_f.weight"), np.float32), np.array(get("ln_f.bias"), np.float32))


def read_hf_tokenizer(path: Path) -> Tokenizer:
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        if os.path.lexists(path / name):
            check_input_file(path / name)
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
    check_sizes(config, sum(f.numel(n) for n in f.names()), f.path)
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
    if tok.vocab_size < weights.config.vocab_size:
        raise CheckpointError(f"{source}: the model's vocab_size is {weights.config.vocab_size} but its tokenizer "
                              f"has {tok.vocab_size} tokens; ids {tok.vocab_size}..{weights.config.vocab_size - 1} "
                              "could be sampled and have no text (gpt2block runs models whose vocab_size equals "
                              "the tokenizer's)")


HF_INPUT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json",
                  "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                  "generation_config.json", "pytorch_model.bin")


def _load(model: str | Path) -> tuple[LoadedModel, list[Path]]:
    """The loaded model and the files it came from (what pack must never overwrite)."""
    kind, where = resolve(model)
    if kind == "packed":
        weights, tok = read_packed_weights(where), read_packed_tokenizer(where)
        files = [Path(where)]
    else:
        path = fetch(where) if kind == "hub" else where
        weights, tok = read_hf_weights(path), read_hf_tokenizer(path)
        files = [path / n for n in HF_INPUT_FILES]
        index = path / "model.safetensors.index.json"
        if index.is_file() and not (path / "model.safetensors").exists():
            files += [path / n for n in _shard_names(index)]
    source = str(where)
    _check_vocab(weights, tok, source)
    return LoadedModel(weights, tok, source), files


def load_model(model: str | Path) -> LoadedModel:
    """Weights and tokenizer of a hub id or alias, a local Hugging Face directory, or a packed file."""
    return _load(model)[0]


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


PACK_CHUNK = 16 * 2**20  # bytes per write: a signal is answered between two writes


def write_packed(f, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """A safetensors file of float32 ``tensors`` with ``metadata``, byte for byte the same for the same
    input: the tensors in name order (as the library's writer orders one dtype), the metadata's keys
    sorted (the library's writer orders them differently from run to run), the header padded with
    spaces to 8 bytes. The library reads the result back before it is renamed into place (pack)."""
    names = sorted(tensors)
    header: dict = {"__metadata__": dict(sorted(metadata.items()))}
    offset = 0
    for name in names:
        a = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    f.write(len(text).to_bytes(8, "little"))
    f.write(text)
    for name in names:
        data = memoryview(np.ascontiguousarray(tensors[name], "<f4")).cast("B")
        for i in range(0, len(data), PACK_CHUNK):
            f.write(data[i:i + PACK_CHUNK])


def _verify_packed(path: Path, names) -> None:
    f = SafetensorsFile(path)
    if sorted(f.names()) != sorted(names):
        raise CheckpointError(f"{path}: the written file holds {f.names()}, not {list(names)}")


def pack(model: str | Path, out_path: str | Path) -> Path:
    """Write ``model`` as one packed safetensors file (atomically); returns its path.

    ``out_path`` must be absent or a regular file other than the model's own files; it is written
    through a temporary file in the same folder, renamed into place (see output.write_atomic)."""
    if not isinstance(out_path, (str, Path)) or str(out_path) == "":
        raise TypeError(f"out_path must be a non-empty str or Path; got {out_path!r}")
    out = Path(out_path).expanduser()
    try:
        check_output(out, what="out_path")  # before the model is read: a bad target fails at once
    except OutputError as e:
        raise CheckpointError(str(e)) from None
    loaded, inputs = _load(model)
    w = loaded.weights
    tensors = dict(zip(PACKED_TENSORS, (w.blocks, w.wte, w.wpe, w.ln_f_g, w.ln_f_b)))
    metadata = {"format": PACKED_FORMAT, "config": json.dumps(w.config.to_dict(), sort_keys=True),
                "tokenizer": loaded.tokenizer.to_json_str()}
    try:
        return write_atomic(out, lambda f: write_packed(f, tensors, metadata), inputs, what="out_path",
                            verify=lambda p: _verify_packed(p, PACKED_TENSORS))
    except OutputError as e:
        raise CheckpointError(str(e)) from None

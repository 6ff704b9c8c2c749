"""GPT-2 model configuration: the five published sizes and Hugging Face config.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

HEAD_DIM = 64


class ConfigError(ValueError):
    """A configuration the engine cannot run; the message names the field."""


@dataclass(frozen=True)
class GPT2Config:
    n_layer: int = 12
    n_embd: int = 768
    n_head: int = 12
    n_positions: int = 1024
    vocab_size: int = 50257
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"

    def __post_init__(self):
        for field in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size"):
            v = getattr(self, field)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"config field {field} must be a positive integer; got {v!r}")
        if self.n_positions < 2:
            raise ConfigError(f"config field n_positions is {self.n_positions}; a context must hold at least "
                              "2 positions (a token and the one it predicts)")
        if not isinstance(self.activation_function, str):
            raise ConfigError(f"config field activation_function must be a string; got {self.activation_function!r}")
        if self.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ConfigError(
                f"config field activation_function is {self.activation_function!r}; "
                "gpt2block runs only 'gelu_new' (the tanh GELU of GPT-2)"
            )
        if self.n_embd % self.n_head:
            raise ConfigError(
                f"config field n_embd ({self.n_embd}) is not divisible by n_head ({self.n_head})"
            )
        if self.n_embd // self.n_head != HEAD_DIM:
            raise ConfigError(
                f"config fields n_embd / n_head give a head dim of {self.n_embd // self.n_head}; "
                f"gpt2block runs head dim {HEAD_DIM} only"
            )
        eps = self.layer_norm_epsilon
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not (0 < eps < 1):
            raise ConfigError(f"config field layer_norm_epsilon must be a number in (0, 1); got {eps!r}")

    @property
    def n_params(self) -> int:
        """Parameters of the model: the blocks, wte (also the LM head), wpe and ln_f."""
        d = self.n_embd
        return self.n_layer * (12 * d * d + 13 * d) + (self.vocab_size + self.n_positions) * d + 2 * d

    @property
    def d(self) -> int:
        return self.n_embd

    @property
    def head_dim(self) -> int:
        return HEAD_DIM

    @property
    def n_ctx(self) -> int:
        return self.n_positions

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "config") -> "GPT2Config":
        """Read the GPT-2 fields of a Hugging Face config dict; unknown keys are ignored."""
        if not isinstance(cfg, dict):
            raise ConfigError(f"{source}: expected a JSON object")
        kwargs = {}
        for field, default in asdict(cls()).items():
            if field in cfg:
                kwargs[field] = cfg[field]
            elif field == "n_positions" and "n_ctx" in cfg:
                kwargs[field] = cfg["n_ctx"]
            elif field in ("n_layer", "n_embd", "n_head"):
                raise ConfigError(f"{source}: missing field {field}")
        try:
            config = cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        _refuse_variants(cfg, config, source)
        return config

    @classmethod
    def from_json(cls, path: str | Path) -> "GPT2Config":
        path = Path(path)
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_dict(cfg, source=str(path))


# Hugging Face GPT-2 options that change the arithmetic and have one value here: (key, that value, why)
_FIXED_OPTIONS = (
    ("scale_attn_weights", True, "attention scores are scaled by 1/sqrt(64)"),
    ("scale_attn_by_inverse_layer_idx", False, "no extra per-layer scaling of attention scores"),
    ("add_cross_attention", False, "decoder-only blocks"),
)
# Options accepted with either value: reorder_and_upcast_attn computes the attention scores in float32
# with the 1/sqrt(64) scale applied before the product, which is the arithmetic of our fp32 attention up
# to rounding; tie_word_embeddings false is read by checkpoint.read_hf_weights (an lm_head.weight equal
# to wte is used, any other head refused there).
_BOOL_OPTIONS = ("reorder_and_upcast_attn", "tie_word_embeddings")


def _refuse_variants(cfg: dict, config: GPT2Config, source: str) -> None:
    """Refuse config.json options of GPT2Config that would give different logits than our block."""
    n_inner = cfg.get("n_inner")
    if n_inner is not None and (not isinstance(n_inner, int) or isinstance(n_inner, bool)
                                or n_inner != 4 * config.n_embd):
        raise ConfigError(f"{source}: config field n_inner is {n_inner!r}; gpt2block runs FF = 4 * n_embd "
                          f"({4 * config.n_embd})")
    for key, value, why in _FIXED_OPTIONS:
        if key in cfg and cfg[key] is not value:
            raise ConfigError(f"{source}: config field {key} is {cfg[key]!r}; gpt2block runs {value} ({why})")
    for key in _BOOL_OPTIONS:
        if key in cfg and not isinstance(cfg[key], bool):
            raise ConfigError(f"{source}: config field {key} must be true or false; got {cfg[key]!r}")


# The published sizes, by their short names (hub ids in checkpoint.HUB_IDS).
SIZES: dict[str, GPT2Config] = {
    "gpt2": GPT2Config(n_layer=12, n_embd=768, n_head=12),
    "gpt2-medium": GPT2Config(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-large": GPT2Config(n_layer=36, n_embd=1280, n_head=20),
    "gpt2-xl": GPT2Config(n_layer=48, n_embd=1600, n_head=25),
    "distilgpt2": GPT2Config(n_layer=6, n_embd=768, n_head=12),
}

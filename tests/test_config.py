"""GPT2Config: the five sizes, config.json, and refusals that name the field."""

import json

import pytest

from gpt2block.checkpoint import HUB_IDS
from gpt2block.config import SIZES, ConfigError, GPT2Config
from gpt2block.layout import block_numel

# REFERENCE.md size table: name -> (n_layer, D, heads, params as printed)
REFERENCE_SIZES = {
    "gpt2": (12, 768, 12, "124M"),
    "gpt2-medium": (24, 1024, 16, "355M"),
    "gpt2-large": (36, 1280, 20, "774M"),
    "gpt2-xl": (48, 1600, 25, "1.56B"),
    "distilgpt2": (6, 768, 12, "82M"),
}


def n_params(c: GPT2Config) -> int:
    return c.n_layer * block_numel(c.n_embd) + (c.vocab_size + c.n_positions) * c.n_embd + 2 * c.n_embd


def printed(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{round(n / 1e6)}M"


@pytest.mark.parametrize("name", list(REFERENCE_SIZES))
def test_sizes_match_reference(name):
    n_layer, d, heads, params = REFERENCE_SIZES[name]
    c = SIZES[name]
    assert (c.n_layer, c.n_embd, c.n_head) == (n_layer, d, heads)
    assert (c.head_dim, c.n_ctx, c.vocab_size) == (64, 1024, 50257)
    assert printed(n_params(c)) == params
    assert name in HUB_IDS


def test_gpt2_parameter_count_exact():
    assert n_params(SIZES["gpt2"]) == 124_439_808


@pytest.mark.parametrize("changes, field", [
    ({"activation_function": "relu"}, "activation_function"),
    ({"activation_function": "gelu"}, "activation_function"),
    ({"n_head": 16}, "head dim"),  # 768 / 16 = 48
    ({"n_embd": 100, "n_head": 3}, "n_embd"),  # not divisible
    ({"n_layer": 0}, "n_layer"),
    ({"n_layer": "12"}, "n_layer"),
    ({"n_positions": -1}, "n_positions"),
    ({"vocab_size": True}, "vocab_size"),
    ({"layer_norm_epsilon": 0}, "layer_norm_epsilon"),
    ({"layer_norm_epsilon": "1e-5"}, "layer_norm_epsilon"),
    ({"n_inner": 1024}, "n_inner"),
    ({"scale_attn_weights": False}, "scale_attn_weights"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"add_cross_attention": True}, "add_cross_attention"),
])
def test_refusals_name_the_field(changes, field):
    cfg = {**SIZES["gpt2"].to_dict(), **changes}
    with pytest.raises(ConfigError, match=field) as e:
        GPT2Config.from_dict(cfg, source="my/config.json")
    assert "my/config.json" in str(e.value)


@pytest.mark.parametrize("missing", ["n_layer", "n_embd", "n_head"])
def test_missing_required_field(missing):
    cfg = SIZES["gpt2"].to_dict()
    del cfg[missing]
    with pytest.raises(ConfigError, match=f"missing field {missing}"):
        GPT2Config.from_dict(cfg)


def test_accepted_variants():
    base = SIZES["gpt2"].to_dict()
    assert GPT2Config.from_dict({**base, "activation_function": "gelu_pytorch_tanh"}).n_layer == 12
    assert GPT2Config.from_dict({**base, "n_inner": None}).n_embd == 768
    assert GPT2Config.from_dict({**base, "n_inner": 3072}).n_embd == 768
    del base["n_positions"]
    assert GPT2Config.from_dict({**base, "n_ctx": 512}).n_positions == 512  # the old key
    assert GPT2Config(n_layer=48, n_embd=1600, n_head=25).head_dim == 64  # 25 heads: no power of two


def test_round_trip_and_from_json(tmp_path):
    for c in SIZES.values():
        assert GPT2Config.from_dict(c.to_dict()) == c
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**SIZES["gpt2-medium"].to_dict(), "model_type": "gpt2", "n_inner": None}))
    assert GPT2Config.from_json(p) == SIZES["gpt2-medium"]
    with pytest.raises(ConfigError, match="not found"):
        GPT2Config.from_json(tmp_path / "nope.json")
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        GPT2Config.from_json(p)
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        GPT2Config.from_json(p)

"""cuda/linear.gemv_nt_plan, the one-token and batched nt GEMVs' grids (warps per row group, blocks) on a
132-SM device, for every GPT-2 width's decode products: as measured best (docs/PERFORMANCE.md); and the
one-token builds' #defines. Run in a subprocess with CuPy stubbed out (CI has none; both are host arithmetic)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_HEAD = r"""
import json, sys
from unittest import mock
sys.modules["cupy"] = mock.MagicMock()
sys.path.insert(0, sys.argv[1])
from gpt2block.backends.cuda import linear as L
from gpt2block.backends.cuda import build as B
"""  # CuPy stubbed out: the plans and builds are host arithmetic

_SNIPPET = _HEAD + r"""
plans = {}
for d in (768, 1024, 1280, 1600):
    for bf16 in (False, True):
        for mp in (1, 2, 8):
            for name, (n, k) in {"qkv": (3 * d, d), "attn": (d, d), "fc": (4 * d, d), "proj": (d, 4 * d)}.items():
                plans[f"{d} {'bf16' if bf16 else 'f32'} m{mp} {name}"] = L.gemv_nt_plan(n, k, 8 if bf16 else 4, mp,
                                                                                        bf16, sms=132)
print(json.dumps(plans))
"""


def _plans() -> dict:
    return {k: tuple(v) for k, v in _run(_SNIPPET).items()}


def _run(snippet: str) -> dict:
    out = subprocess.run([sys.executable, "-c", snippet, str(ROOT)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_gpt2_one_token_plans():
    p = _plans()
    # bf16 at one token: the attention projection at 4 warps a row group (96 blocks; the two-blocks-a-SM rule with
    # a whole chunk per lane gave 2 and 48: version 31 measured 4 +3.7%, 8 +2%); the others as before
    assert p["768 bf16 m1 attn"] == (4, 96)
    assert p["768 bf16 m1 qkv"] == (2, 144)
    assert p["768 bf16 m1 fc"] == (2, 192)
    assert p["768 bf16 m1 proj"] == (8, 192)
    assert p["768 f32 m1 attn"] == (4, 192)


def test_half_chunk_rule_only_below_one_block_a_sm():
    """Lanes without a piece of K are allowed only at one token and only while the grid is smaller than the
    SMs: every plan of a batched build, and every one-token plan with a grid of at least 132 blocks before it,
    keeps a whole 16-byte chunk per lane (K / wpr >= 32 chunks of 4 float32 or 8 bf16 weights)."""
    for key, (wpr, grid) in _plans().items():
        d, prec, mp, name = key.split()
        k = 4 * int(d) if name == "proj" else int(d)
        cpt = 8 if prec == "bf16" else 4
        if key != "768 bf16 m1 attn":
            assert k // wpr >= 32 * cpt, f"{key}: wpr {wpr} leaves lanes without a chunk"
        assert 1 <= wpr <= 8 and 1 <= grid


_DEFINES_SNIPPET = _HEAD + r"""
out = {}
for d in (768, 1024, 1280, 1600):
    for bf16 in (False, True):
        p = f"{d} {'bf16' if bf16 else 'f32'}"
        # a decode step's one-token products (LayerNorm: QKV, FC, the LM head) and the screen's build
        out[p] = [B.gemv_nt(3 * d, d, 1, bf16, True), B.gemv_nt(d, d, 1, bf16),
                  B.gemv_nt(4 * d, d, 1, bf16, True), B.gemv_nt(d, 4 * d, 1, bf16),
                  B.gemv_nt(50257, d, 1, bf16, True)]
        out[p + " screen"] = B.lm_screen(50257, d, bf16)
out["ln 104 x 37"] = B.gemv_nt(37, 104, 1, True, True)
out["m2"] = B.gemv_nt(3 * 768, 768, 2, True, True)
print(json.dumps(out))
"""


def test_one_token_builds_layernorm_k_and_one_build_a_model():
    """The one-token builds' LayerNorm is built for its K (GEMV_LN_K, kernels/gemv.cu): the launch's K where it
    has a LayerNorm, else the product's width, so that a model's one-token products (QKV, the attention and MLP
    projections, FC, the LM head) still share one build (a first run compiles one module a precision) and the
    screen's build has the head's K; batched builds are not specialised."""
    got = _run(_DEFINES_SNIPPET)
    for d in (768, 1024, 1280, 1600):
        for prec in ("f32", "bf16"):
            builds = {tuple(map(tuple, b)) for b in got[f"{d} {prec}"]}
            assert len(builds) == 1, f"{d} {prec}: the one-token products take {len(builds)} builds"
            assert dict(builds.pop())["GEMV_LN_K"] == d
            assert dict(map(tuple, got[f"{d} {prec} screen"]))["GEMV_LN_K"] == d
    assert dict(map(tuple, got["ln 104 x 37"]))["GEMV_LN_K"] == 104  # a LayerNorm's K, not the width 37
    assert dict(map(tuple, got["m2"]))["GEMV_LN_K"] == 0  # any K

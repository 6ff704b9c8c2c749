"""solve() on NumPy arrays (the reference path) and its argument checks, on the CPU."""

import numpy as np
import pytest

import gpt2block
from gpt2block.backends.numpy_ref import attention, gelu_tanh, layer_norm
from gpt2block.layout import block_layout

N = gpt2block.block_numel(768)


def _weights(rng, biases=True):
    flat = np.zeros(N, np.float32)
    for s in block_layout(768).slots:
        v = flat[s.offset:s.end]
        if s.name.endswith("_g"):
            v[:] = rng.uniform(0.8, 1.2, s.size)
        elif len(s.shape) == 2 or biases:
            v[:] = rng.normal(0, 0.02, s.size)
    return flat


def _block64(x, flat):  # independent float64 block from the layout's offsets
    w = {k: v.astype(np.float64) for k, v in block_layout(768).views(flat).items()}
    x = x.astype(np.float64)
    h = layer_norm(x, w["ln1_g"], w["ln1_b"])
    qkv = h @ w["w_qkv"] + w["b_qkv"]
    a = attention(qkv[:, :768], qkv[:, 768:1536], qkv[:, 1536:], 12, causal=False)
    x1 = x + a @ w["w_attn"] + w["b_attn"]
    f = gelu_tanh(layer_norm(x1, w["ln2_g"], w["ln2_b"]) @ w["w_fc"] + w["b_fc"])
    return x1 + f @ w["w_proj"] + w["b_proj"]


@pytest.mark.parametrize("seq_len", [1, 2, 30])
def test_solve_numpy_matches_float64(seq_len):
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, (seq_len, 768)).astype(np.float32)
    w = _weights(rng)
    out = np.full_like(x, np.nan)
    gpt2block.solve(x, out, w, seq_len)
    np.testing.assert_allclose(out, _block64(x, w), atol=1e-4, rtol=1e-4)


def test_solve_accepts_flat_arrays():
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, 4 * 768).astype(np.float32)
    w = _weights(rng)
    out = np.full_like(x, np.nan)
    gpt2block.solve(x, out, w, 4)
    np.testing.assert_allclose(out.reshape(4, 768), _block64(x.reshape(4, 768), w), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "change, err, match",
    [
        (lambda a: {**a, "seq_len": 0}, ValueError, "seq_len must be positive"),
        (lambda a: {**a, "seq_len": -3}, ValueError, "seq_len must be positive"),
        (lambda a: {**a, "seq_len": 2.0}, TypeError, "seq_len must be an int"),
        (lambda a: {**a, "seq_len": 3}, ValueError, "x must have shape"),
        (lambda a: {**a, "x": a["x"].astype(np.float64)}, TypeError, "x must be float32"),
        (lambda a: {**a, "weights": a["weights"][:-1]}, ValueError, "weights must have shape"),
        (lambda a: {**a, "output": np.zeros((2, 768), np.float32)[:, ::1].T.copy().T}, ValueError,
         "output must be C-contiguous"),
        (lambda a: {**a, "output": a["x"]}, ValueError, "output must not overlap x"),
        (lambda a: {**a, "output": a["weights"][:2 * 768].reshape(2, 768)}, ValueError,
         "output must not overlap weights"),
        (lambda a: {**a, "x": a["x"].tolist()}, TypeError, "x must be a NumPy array or a CUDA array"),
        (lambda a: {**a, "precision": "fp16"}, ValueError, "precision must be one of"),
        (lambda a: {**a, "precision": "tf32"}, ValueError, "needs device arrays"),
    ],
)
def test_solve_rejects_bad_arguments_before_writing(change, err, match):
    rng = np.random.default_rng(0)
    args = {"x": rng.uniform(-1, 1, (2, 768)).astype(np.float32), "output": np.full((2, 768), 5.0, np.float32),
            "weights": _weights(rng), "seq_len": 2}
    bad = change(args)
    before = bad["output"].copy() if isinstance(bad["output"], np.ndarray) else None
    with pytest.raises(err, match=match):
        gpt2block.solve(**bad)
    if before is not None and bad["output"] is args["output"]:
        np.testing.assert_array_equal(bad["output"], before)

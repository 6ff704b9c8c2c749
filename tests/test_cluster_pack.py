"""The cluster decode kernel's weight order and partition, without a GPU (kernels/decode_cluster.cu,
gpt2block/backends/cuda/decode_paths.py): every block's share of a layer holds the rows and columns the kernel's
header says it does; one decode step of a layer formed from the packed shares block by block and cluster
by cluster (the projections' partials summed in cluster order) agrees with the reference block (its
attention as one softmax: the kernel's split softmax is tested on the GPU, tests/gpu/test_decode_cluster.py);
and the Python sizes agree with the kernel's own #defines."""

import re

import numpy as np
import pytest

from gpt2block.backends import numpy_ref
from gpt2block.backends.cuda.decode_paths import (CLUSTER, GROUPS, PART, THREADS, WIDTH, block_share, pack_matrices,
                                             smem_bytes)
from gpt2block.config import HEAD_DIM
from gpt2block.kernel_source import kernels_dir
from gpt2block.layout import block_layout

D = WIDTH
H = D // HEAD_DIM
QR, OR, FR, FH = HEAD_DIM // CLUSTER, D // CLUSTER, 4 * HEAD_DIM // CLUSTER, 4 * HEAD_DIM


def _decode_mats(rng):
    """A layer's decode matrices as the runner keeps them: [N, K] (transposed), distinct values."""
    return {"w_qkv": rng.standard_normal((3 * D, D)), "w_attn": rng.standard_normal((D, D)),
            "w_fc": rng.standard_normal((4 * D, D)), "w_proj": rng.standard_normal((D, 4 * D))}


def _shares(packed, c, r):
    """Block (c, r)'s share split as decode_cluster.cu reads it: QKV [3][8][D], W_attn [96][64], W_fc [32][D],
    W_proj [96][256]."""
    s = packed[c, r]
    n_qkv, n_o, n_fc = 3 * QR * D, OR * HEAD_DIM, FR * D
    return (s[:n_qkv].reshape(3, QR, D), s[n_qkv:n_qkv + n_o].reshape(OR, HEAD_DIM),
            s[n_qkv + n_o:n_qkv + n_o + n_fc].reshape(FR, D), s[n_qkv + n_o + n_fc:].reshape(OR, FH))


def test_each_block_share_holds_what_the_kernel_header_says():
    m = _decode_mats(np.random.default_rng())
    packed = pack_matrices(np, m["w_qkv"], m["w_attn"], m["w_fc"], m["w_proj"])
    assert packed.shape == (H, CLUSTER, block_share(D))
    for c in range(H):
        for r in range(CLUSTER):
            qkv, o, fc, pr = _shares(packed, c, r)
            for t in range(3):  # q, k, v rows 64c + 8r + j
                np.testing.assert_array_equal(qkv[t], m["w_qkv"][t * D + c * HEAD_DIM + r * QR:][:QR])
            np.testing.assert_array_equal(o, m["w_attn"][r * OR:(r + 1) * OR, c * HEAD_DIM:(c + 1) * HEAD_DIM])
            np.testing.assert_array_equal(fc, m["w_fc"][c * FH + r * FR:][:FR])
            np.testing.assert_array_equal(pr, m["w_proj"][r * OR:(r + 1) * OR, c * FH:(c + 1) * FH])


@pytest.mark.parametrize("length", [1, 2, 30, 129])
def test_a_step_split_as_the_kernel_splits_it_matches_the_reference(length):
    """float64: the reference block on the new token (K, V of the earlier positions given) against the
    step formed from the packed shares block by block and cluster by cluster, as the kernel splits it."""
    rng = np.random.default_rng()
    lay = block_layout(D)
    flat = rng.standard_normal(lay.numel) * 0.05
    w = lay.views(flat)
    for k in ("ln1_g", "ln2_g"):
        w[k][...] = rng.uniform(0.8, 1.2, D)
    m = {k: np.ascontiguousarray(w[k].T) for k in ("w_qkv", "w_attn", "w_fc", "w_proj")}
    packed = pack_matrices(np, m["w_qkv"], m["w_attn"], m["w_fc"], m["w_proj"])
    x = rng.standard_normal(D)
    kc, vc = np.zeros((length, D)), np.zeros((length, D))
    kc[:-1], vc[:-1] = rng.standard_normal((length - 1, D)), rng.standard_normal((length - 1, D))
    kref, vref = kc.copy(), vc.copy()
    ref = numpy_ref.block(x[None], w, H, causal=True, kv=(kref, vref), q_start=length - 1)[0]

    h = numpy_ref.layer_norm(x[None], w["ln1_g"], w["ln1_b"])[0]
    part1, f_all = np.zeros((H, D)), np.zeros((H, FH))
    q = np.zeros((H, HEAD_DIM))
    for c in range(H):
        for r in range(CLUSTER):  # phase A: q, k, v dims [8r, 8r + 8) of head c
            qkv = _shares(packed, c, r)[0] @ h + w["b_qkv"].reshape(3, H, CLUSTER, QR)[:, c, r]
            q[c, r * QR:(r + 1) * QR] = qkv[0]
            kc[-1, c * HEAD_DIM + r * QR:][:QR], vc[-1, c * HEAD_DIM + r * QR:][:QR] = qkv[1], qkv[2]
    for c in range(H):  # phase B: head c's attention; C: its partial of the attention projection
        sl = slice(c * HEAD_DIM, (c + 1) * HEAD_DIM)
        s = kc[:, sl] @ q[c] * 0.125
        p = np.exp(s - s.max())
        att = p @ vc[:, sl] / p.sum()
        for r in range(CLUSTER):
            part1[c, r * OR:(r + 1) * OR] = _shares(packed, c, r)[1] @ att
    np.testing.assert_allclose(kc[-1], kref[-1], rtol=0, atol=1e-12)  # the K, V the kernel stores
    np.testing.assert_allclose(vc[-1], vref[-1], rtol=0, atol=1e-12)
    x1 = x + (w["b_attn"] + part1.sum(axis=0))
    h2 = numpy_ref.layer_norm(x1[None], w["ln2_g"], w["ln2_b"])[0]
    part2 = np.zeros((H, D))
    for c in range(H):  # phase D: FC rows 256c + 32r + i; E: the partial of the MLP projection
        for r in range(CLUSTER):
            f_all[c, r * FR:(r + 1) * FR] = numpy_ref.gelu_tanh(
                _shares(packed, c, r)[2] @ h2 + w["b_fc"][c * FH + r * FR:][:FR])
        for r in range(CLUSTER):
            part2[c, r * OR:(r + 1) * OR] = _shares(packed, c, r)[3] @ f_all[c]
    ours = x1 + (w["b_proj"] + part2.sum(axis=0))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)


def _kernel_defines() -> dict:
    """decode_cluster.cu's object-like #defines, evaluated (integers; HEAD_DIM from common.cuh, the build
    parameters from cuda.build), so that the host's sizes are checked against the kernel's own arithmetic."""
    from gpt2block.backends.cuda import build

    text = (kernels_dir() / "decode_cluster.cu").read_text()
    env = {"HEAD_DIM": HEAD_DIM, **dict(build.decode_cluster())}
    for name, expr in re.findall(r"^#define (DC_[A-Z0-9_]+)[ \t]+(.+)$", text, re.M):
        expr = expr.split("//")[0].strip()
        if not re.fullmatch(r"[\w\s()+\-*/]+", expr):
            continue
        try:
            env[name] = int(eval(expr.replace("/", "//"), {}, dict(env)))
        except (NameError, SyntaxError):
            continue
    return env


def test_sizes_agree_with_the_kernel():
    k = _kernel_defines()
    got = (k["DC_D"], k["DC_C"], k["DC_THREADS"], k["DC_PART"], k["DC_GROUPS"])
    assert got == (WIDTH, CLUSTER, THREADS, PART, GROUPS)
    assert k["DC_E"] == block_share(D)
    assert k["DC_SMEM"] == smem_bytes(D)
    assert smem_bytes(D) <= 227 * 1024, "the kernel's shared memory must fit one Hopper SM's opt-in limit"

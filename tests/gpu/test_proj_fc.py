"""The attention projection + residual, ln_2 and FC + GELU in one cluster kernel (kernels/proj_fc.cu):
x1 and f against float64 on the same bf16 weights, judged by the error of the two GEMVs it replaces;
every build shape (cluster 8 and 16, Wo in registers or shared memory, widths 256 to 1024); bits
repeat and poisoned outputs are overwritten; the bad arguments; and the bf16 batch-1 decode step
with it against float64 and against the step without it."""

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.config import GPT2Config
from gpt2block.weights import ModelWeights

BUILDS = [  # (d, (cluster, warps, grid, wo_smem))
    (768, (16, 12, 128, 1)), (768, (16, 12, 128, 0)), (768, (8, 12, 128, 1)), (768, (16, 12, 64, 1)),
    (1024, (16, 16, 128, 1)), (256, (8, 8, 32, 0)), (256, (4, 4, 64, 1)),
]


def _gelu(z):
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))


def _case(cp, d, offset):
    from gpt2block.backends import cuda_linear as L

    rng = cp.random.default_rng()
    a = rng.standard_normal((1, d), dtype=cp.float32)
    x = rng.standard_normal((1, d), dtype=cp.float32) * 3 + offset  # a residual far from zero mean too
    wo = L.to_bf16_bits(rng.standard_normal((d, d), dtype=cp.float32) * 0.05)
    wf = L.to_bf16_bits(rng.standard_normal((4 * d, d), dtype=cp.float32) * 0.05)
    bo = rng.standard_normal(d, dtype=cp.float32) * 0.1
    bf = rng.standard_normal(4 * d, dtype=cp.float32) * 0.1
    g = rng.uniform(0.8, 1.2, d, dtype=cp.float32)
    b = rng.standard_normal(d, dtype=cp.float32) * 0.1
    return a, x, wo, bo, (g, b, 1e-5), wf, bf


def _fp64(cp, a, x, wo, bo, ln, wf, bf):
    from gpt2block.backends import cuda_linear as L

    h = lambda v: cp.asnumpy(v).astype(np.float64)  # noqa: E731
    x1 = h(x) + h(a) @ h(L.from_bf16_bits(wo)).T + h(bo)
    mu = x1.mean(-1, keepdims=True)
    n = (x1 - mu) / np.sqrt(((x1 - mu) ** 2).mean(-1, keepdims=True) + ln[2]) * h(ln[0]) + h(ln[1])
    return x1, _gelu(n @ h(L.from_bf16_bits(wf)).T + h(bf))


@pytest.mark.parametrize("d,build", BUILDS)
@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_proj_fc_matches_fp64(cp, monkeypatch, d, build, offset):
    from gpt2block.backends import cuda_linear as L
    from gpt2block.backends import cuda_proj_fc as P

    monkeypatch.setitem(P.PROJ_FC_BY_WIDTH, d, build)
    if P.proj_fc_plan(d) is None:
        pytest.skip(f"this device cannot hold the grid of build {build} at once")
    a, x, wo, bo, ln, wf, bf = _case(cp, d, offset)
    x1_64, f_64 = _fp64(cp, a, x, wo, bo, ln, wf, bf)
    runs = []
    for _ in range(2):
        x1 = cp.full((1, d), cp.nan, cp.float32)
        f = cp.full((1, 4 * d), cp.nan, cp.float32)
        P.proj_fc(a, x, wo, bo, x1, ln, wf, bf, f)
        runs.append((cp.asnumpy(x1), cp.asnumpy(f)))
    np.testing.assert_array_equal(runs[0][0].view(np.uint32), runs[1][0].view(np.uint32))
    np.testing.assert_array_equal(runs[0][1].view(np.uint32), runs[1][1].view(np.uint32))
    # the two GEMVs it replaces, on the same inputs
    px1 = cp.full((1, d), cp.nan, cp.float32)
    pf = cp.full((1, 4 * d), cp.nan, cp.float32)
    L.gemv_nt(a, wo, px1, bias=bo, epilogue="bias_residual", residual=x)
    L.gemv_nt(px1, wf, pf, bias=bf, epilogue="bias_gelu", ln=ln)
    x1, f = runs[0]
    assert np.isfinite(x1).all() and np.isfinite(f).all()
    e_x1, p_x1 = np.abs(x1 - x1_64).max(), np.abs(cp.asnumpy(px1) - x1_64).max()
    e_f, p_f = np.abs(f - f_64).max(), np.abs(cp.asnumpy(pf) - f_64).max()
    print(f"d={d} build={build} offset={offset}: x1 error {e_x1:.3g} (two GEMVs {p_x1:.3g}), "
          f"f error {e_f:.3g} (two GEMVs {p_f:.3g})")
    assert e_x1 <= 2 * p_x1 + 1e-6 * (1 + offset)
    assert e_f <= 2 * p_f + 1e-6


def test_proj_fc_bad_arguments(cp):
    from gpt2block.backends import cuda_proj_fc as P

    d = 768
    if P.proj_fc_plan(d) is None:
        pytest.skip("no proj_fc build runs here at D = 768")
    a, x, wo, bo, ln, wf, bf = _case(cp, d, 0.0)
    x1 = cp.zeros((1, d), cp.float32)
    f = cp.zeros((1, 4 * d), cp.float32)
    with pytest.raises(ValueError, match="x must have shape"):
        P.proj_fc(a, x[:, :512], wo, bo, x1, ln, wf, bf, f)
    with pytest.raises(ValueError, match="f must have shape"):
        P.proj_fc(a, x, wo, bo, x1, ln, wf, bf, f[:, :100])
    with pytest.raises(ValueError, match="wo must be bf16 bits"):
        P.proj_fc(a, x, cp.zeros((d, d), cp.float32), bo, x1, ln, wf, bf, f)
    with pytest.raises(ValueError, match="wf must have shape"):
        P.proj_fc(a, x, wo, bo, x1, ln, wf[:100], bf, f)
    with pytest.raises(ValueError, match="bf must have shape"):
        P.proj_fc(a, x, wo, bo, x1, ln, wf, bf[:10], f)
    with pytest.raises(ValueError, match="ln gain must have shape"):
        P.proj_fc(a, x, wo, bo, x1, (ln[0][:10], ln[1], 1e-5), wf, bf, f)
    with pytest.raises(ValueError, match="x1 overlaps x"):
        P.proj_fc(a, x, wo, bo, x, ln, wf, bf, f)
    buf = cp.zeros(5 * d, cp.float32)  # f starting inside x1
    with pytest.raises(ValueError, match="f overlaps x1"):
        P.proj_fc(a, x, wo, bo, buf[:d].reshape(1, d), ln, wf, bf, buf[d // 2:d // 2 + 4 * d].reshape(1, 4 * d))
    a2, x2, wo2, bo2, ln2, wf2, bf2 = _case(cp, 512, 0.0)
    with pytest.raises(ValueError, match="no build for D = 512"):
        P.proj_fc(a2, x2, wo2, bo2, cp.zeros((1, 512), cp.float32), ln2, wf2, bf2, cp.zeros((1, 2048), cp.float32))


@pytest.mark.parametrize("length", [1, 2, 30, 100, 1024])
def test_decode_step_with_proj_fc_matches_fp64(monkeypatch, length):
    """gpt2's width, bf16 weights, batch 1: the step with proj_fc against float64 of the same bf16
    weights, within twice the error of the step without it, the same argmax; its scratch poisoned."""
    from gpt2block.backends import cuda, cuda_proj_fc

    if cuda_proj_fc.proj_fc_plan(768) is None:
        pytest.skip("no proj_fc build runs here at D = 768")
    seed = int(np.random.default_rng().integers(0, 2**31))
    w = ModelWeights.random(GPT2Config(n_layer=3, n_embd=768, n_head=12, vocab_size=4096), seed=seed)
    seq = np.random.default_rng().integers(0, 4096, length)
    out = {}
    for on in (True, False):
        monkeypatch.setattr(cuda, "PROJ_FC", on)
        r = make_runner(w, "cuda", "bf16")
        cache = r.new_cache(1)
        if length > 1:
            r.prefill(cache, 0, seq[:-1])
        for buf in (r.x1, r.ws.att, r.ws.f):  # written before they are read
            buf.fill(np.nan)
        out[on] = r.decode(cache, seq[-1:])[0].astype(np.float64)
    judge = _judge_bf16(w, seq)
    e_on, e_off = np.abs(out[True] - judge).max(), np.abs(out[False] - judge).max()
    print(f"length {length}: bf16 decode error vs fp64 with proj_fc {e_on:.3g}, without {e_off:.3g}")
    assert e_on <= 2 * e_off + 1e-6
    assert out[True].argmax() == judge.argmax()


def _bf16(a):
    """float32 -> the nearest bf16 (ties to even), as float32 (cuda_linear.to_bf16_bits on the host)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return (((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def _judge_bf16(w: ModelWeights, seq) -> np.ndarray:
    """The last token's logits in float64 from the weights the bf16 mode multiplies by: the four block
    matrices and the LM head rounded to bf16, the embedding lookup on float32 wte."""
    from gpt2block.backends.numpy_ref import NumpyRunner

    blocks = w.blocks.copy()
    rounded = ModelWeights(w.config, blocks, w.wte, w.wpe, w.ln_f_g, w.ln_f_b)
    for i in range(w.config.n_layer):
        v = rounded.block(i)
        for name in ("w_qkv", "w_attn", "w_fc", "w_proj"):
            v[name][...] = _bf16(v[name])
    r = NumpyRunner(rounded, np.float64)
    h = r._run(r.new_cache(1), 0, np.asarray(seq))[-1]
    return h @ _bf16(w.wte).astype(np.float64).T

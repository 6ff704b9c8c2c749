"""kernels/attention_qkv.cu on the GPU: ln_1 + the QKV product + decode attention of one token in one
kernel (batch 1, bf16 weights). Judged against float64 (the same bf16 weights, widened), with torch
float32 (TF32 off) doing the same arithmetic as the peer whose error sets the limit (at most 2x, plus
one float32 ulp of the result's scale), as tests/gpu/test_attention.py judges attention_decode_f32.
Fresh random data each run (the seed is printed on failure); the cache past the token's position
poisoned with NaN, which must neither be read nor overwritten."""

import numpy as np
import pytest

EPS32 = float(np.finfo(np.float32).eps)
EPS_LN = 1e-5
N_CTX = 1024


@pytest.fixture(scope="module")
def ca(cp):
    from gpt2block.backends import cuda_attention

    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("attention_decode_qkv needs clusters (sm_90)")
    return cuda_attention


def _bf16(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint16 bits rounded to nearest even, their float32 values) of a float32 array."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def _inputs(rng, d, length, x_mean=0.0):
    x = (rng.standard_normal((1, d)) + x_mean).astype(np.float32)
    w_bits, w32 = _bf16(rng.standard_normal((3 * d, d)).astype(np.float32) * 0.05)
    bias = (rng.standard_normal(3 * d) * 0.1).astype(np.float32)
    g = (1.0 + 0.2 * rng.standard_normal(d)).astype(np.float32)
    b = (0.1 * rng.standard_normal(d)).astype(np.float32)
    k = rng.standard_normal((N_CTX, d)).astype(np.float32)
    v = rng.standard_normal((N_CTX, d)).astype(np.float32)
    k[length - 1:] = np.nan  # this step's position and those after it: poison
    v[length - 1:] = np.nan
    return x, w_bits, w32, bias, g, b, k, v


def _reference(x, w, bias, g, b, k, v, length, n_head, xp=np, dtype=np.float64):
    """(out [1, D], q k v [3D]) of the block's first half in ``dtype`` (NumPy float64, or torch)."""
    if xp is np:
        x, w, bias, g, b = (np.asarray(a, dtype) for a in (x, w, bias, g, b))
        mu = x.mean()
        h = (x - mu) / np.sqrt(((x - mu) ** 2).mean() + EPS_LN) * g + b
    else:
        h = xp.nn.functional.layer_norm(x, (x.shape[1],), g, b, EPS_LN)
    qkv = (h @ w.T + bias)[0]
    d = x.shape[1]
    kk = xp.cat([k[:length - 1], qkv[None, d:2 * d]]) if xp is not np else np.concatenate(
        [k[:length - 1].astype(dtype), qkv[None, d:2 * d]])
    vv = xp.cat([v[:length - 1], qkv[None, 2 * d:]]) if xp is not np else np.concatenate(
        [v[:length - 1].astype(dtype), qkv[None, 2 * d:]])
    outs = []
    for hd in range(n_head):
        sl = slice(64 * hd, 64 * hd + 64)
        s = kk[:, sl] @ qkv[sl] / 8.0
        p = xp.exp(s - s.max())
        outs.append((p / p.sum()) @ vv[:, sl])
    out = np.concatenate(outs) if xp is np else xp.cat(outs)
    return out[None], qkv


def _run(cp, ca, x, w_bits, bias, g, b, k, v, step, n_head, max_len=N_CTX, out=None):
    d = x.shape[1]
    dev = {name: cp.asarray(a) for name, a in (("x", x), ("w", w_bits), ("bias", bias), ("g", g), ("b", b))}
    kc, vc = cp.asarray(k), cp.asarray(v)
    out = cp.full((1, d), cp.nan, cp.float32) if out is None else out
    ca.attention_decode_qkv(dev["x"], dev["w"], dev["bias"], (dev["g"], dev["b"], EPS_LN), kc, vc,
                            cp.asarray(np.asarray(step, np.int32).reshape(4, 1)), out, n_head=n_head,
                            cache_batch_stride=N_CTX * d, max_len=max_len)
    return cp.asnumpy(out), cp.asnumpy(kc), cp.asnumpy(vc)


def _judge(torch, got, ref, peer_val, what, seed):
    err = float(np.abs(got - ref).max())
    peer = float(np.abs(peer_val - ref).max())
    limit = 2.0 * peer + EPS32 * float(np.abs(ref).max())
    assert np.isfinite(got).all(), f"seed {seed}: {what} not finite"
    assert err <= limit, f"seed {seed}: {what} err {err:.3e} > limit {limit:.3e} (torch {peer:.3e})"
    return err, peer


@pytest.mark.parametrize("d", [768, 1024])
@pytest.mark.parametrize("length", [1, 2, 30, 64, 65, 100, 513, 1024])
def test_matches_float64(cp, ca, torch_cuda, d, length):
    """out and the stored key and value against float64, at every length shape: one key, one chunk,
    a chunk edge, several ranks, every rank, past 512 keys (a second round), the whole context."""
    torch = torch_cuda
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    n_head = d // 64
    if not ca.decode_qkv_fits(d, n_head, cp.zeros((1,), cp.uint16)):
        pytest.skip(f"D = {d} does not fit this device's multiprocessors")
    x, w_bits, w32, bias, g, b, k, v = _inputs(rng, d, length, x_mean=3.0 if length % 2 else 0.0)
    out, kc, vc = _run(cp, ca, x, w_bits, bias, g, b, k, v, [0, 0, length - 1, length], n_head)
    ref, qkv = _reference(x, w32, bias, g, b, k, v, length, n_head)
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), device="cuda")  # noqa: E731
    t_out, t_qkv = _reference(t(x), t(w32), t(bias), t(g), t(b), t(k), t(v), length, n_head, xp=torch)
    _judge(torch, out, ref, t_out.cpu().numpy(), "out", seed)
    p = length - 1
    _judge(torch, kc[p], qkv[d:2 * d], t_qkv[d:2 * d].cpu().numpy(), "stored key", seed)
    _judge(torch, vc[p], qkv[2 * d:], t_qkv[2 * d:].cpu().numpy(), "stored value", seed)
    # nothing else of the cache changed: the older keys as they were, the later positions still poison
    assert np.array_equal(kc[:p], k[:p]) and np.array_equal(vc[:p], v[:p])
    assert np.isnan(kc[p + 1:]).all() and np.isnan(vc[p + 1:]).all()


def test_agrees_with_the_two_kernel_path(cp, ca):
    """The same inputs through gemv_nt (ln_1 + QKV with the K / V store) and attention_decode: the
    same result within float32 rounding (the sums are added in another order, so not the same bits)."""
    from gpt2block.backends import cuda_linear

    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    d, length = 768, 300
    x, w_bits, w32, bias, g, b, k, v = _inputs(rng, d, length)
    out, kc, vc = _run(cp, ca, x, w_bits, bias, g, b, k, v, [0, 0, length - 1, length], 12)
    xd, wd, bd, gd, bbd = (cp.asarray(a) for a in (x, w_bits, bias, g, b))
    kc2, vc2 = cp.asarray(k), cp.asarray(v)
    qkv = cp.empty((1, 3 * d), cp.float32)
    seq, pos = cp.asarray([0], cp.int32), cp.asarray([length - 1], cp.int32)
    cuda_linear.gemv_nt(xd, wd, qkv, bias=bd, epilogue="bias", ln=(gd, bbd, EPS_LN), kv=(seq, pos, kc2, vc2, N_CTX * d))
    out2 = cp.empty((1, d), cp.float32)
    ca.attention_decode(qkv, kc2, vc2, cp.asarray([length], cp.int32), out2, n_head=12, q_stride=3 * d,
                        cache_batch_stride=N_CTX * d, max_len=N_CTX)
    out2, kc2, vc2 = cp.asnumpy(out2), cp.asnumpy(kc2), cp.asnumpy(vc2)
    scale = float(np.abs(out2).max())
    assert np.abs(out - out2).max() <= 64 * EPS32 * scale, f"seed {seed}"
    assert np.abs(kc[length - 1] - kc2[length - 1]).max() <= 64 * EPS32 * float(np.abs(kc2[length - 1]).max())
    assert np.array_equal(np.isnan(kc), np.isnan(kc2))


def test_repeats_bit_exactly(cp, ca):
    rng = np.random.default_rng(11)
    x, w_bits, _, bias, g, b, k, v = _inputs(rng, 768, 700)
    a = _run(cp, ca, x, w_bits, bias, g, b, k, v, [0, 0, 699, 700], 12)
    c = _run(cp, ca, x, w_bits, bias, g, b, k, v, [0, 0, 699, 700], 12)
    assert all(p.tobytes() == q.tobytes() for p, q in zip(a, c))


@pytest.mark.parametrize("step, max_len", [([0, 0, 5, 0], N_CTX), ([0, 0, 5, 7], N_CTX), ([0, 0, 5, 6], 5),
                                           ([0, 0, -1, 0], N_CTX)])
def test_bad_length_gives_nan_and_leaves_the_cache(cp, ca, step, max_len):
    """A length outside 1 .. max_len, or one that is not the position + 1: out is NaN (a visible
    error) and the cache is not written."""
    rng = np.random.default_rng(3)
    x, w_bits, _, bias, g, b, k, v = _inputs(rng, 768, 6)
    out, kc, vc = _run(cp, ca, x, w_bits, bias, g, b, k, v, step, 12, max_len=max_len,
                       out=cp.zeros((1, 768), cp.float32))
    assert np.isnan(out).all()
    assert np.array_equal(kc, k, equal_nan=True) and np.array_equal(vc, v, equal_nan=True)


def test_rejects_bad_arguments(cp, ca):
    d = 768
    x = cp.zeros((1, d), cp.float32)
    w = cp.zeros((3 * d, d), cp.uint16)
    bias = cp.zeros(3 * d, cp.float32)
    ln = (cp.ones(d, cp.float32), cp.zeros(d, cp.float32), EPS_LN)
    cache = cp.zeros((N_CTX, d), cp.float32)
    cache2 = cp.zeros((N_CTX, d), cp.float32)
    step = cp.asarray([[0], [0], [0], [1]], cp.int32)
    out = cp.empty((1, d), cp.float32)
    kw = dict(n_head=12, cache_batch_stride=N_CTX * d, max_len=N_CTX)
    ca.attention_decode_qkv(x, w, bias, ln, cache, cache2, step, out, **kw)  # valid
    cases = [
        ((x, w.view(cp.float16), bias, ln, cache, cache2, step, out), kw, "bf16"),
        ((x, cp.zeros((3 * d, d), cp.float32), bias, ln, cache, cache2, step, out), kw, "bf16"),
        ((x, w[:, :512], bias, ln, cache, cache2, step, out), kw, "w must"),
        ((x[:, :512], w, bias, ln, cache, cache2, step, out), kw, "x must"),
        ((x, w, bias[:d], ln, cache, cache2, step, out), kw, "bias"),
        ((x, w, bias, (ln[0][:512], ln[1], EPS_LN), cache, cache2, step, out), kw, "ln gain"),
        ((x, w, bias, ln, cache, cache2, step.astype(cp.int64), out), kw, "step"),
        ((x, w, bias, ln, cache, cache2, step[:3], out), kw, "step"),
        ((x, w, bias, ln, cp.zeros((8, d), cp.float32), cache2, step, out), kw, "k_cache is too small"),
        ((x, w, bias, ln, cache, cache, step, out), kw, "overlaps"),
        ((x, w, bias, ln, cache, cache2, step, x), kw, "overlaps"),
        ((x, w, bias, ln, cache, cache2, step, out), {**kw, "max_len": 0}, "max_len"),
        ((x, w, bias, ln, cache, cache2, step, out), {**kw, "n_head": 20}, "does not serve"),
    ]
    for args, kws, word in cases:
        with pytest.raises((ValueError, TypeError), match=word):
            ca.attention_decode_qkv(*args, **kws)


@pytest.mark.parametrize("size, n_layer", [("gpt2", 12), ("gpt2-medium", 3)])
def test_decode_step_agrees_with_the_two_kernel_path(cp, ca, monkeypatch, size, n_layer):
    """bf16 batch-1 decode through the runner, the fused kernel (cuda.QKV_ATTENTION, the default) against
    the QKV GEMV and the attention kernel: the logits of several steps agree to float32 rounding,
    carried through the layers (and the same greedy tokens); greedy_steps, which takes the argmax
    through the screen, gives decode_greedy's tokens."""
    from dataclasses import replace

    from gpt2block.backends import cuda, make_runner
    from gpt2block.config import SIZES
    from gpt2block.weights import ModelWeights

    cfg = replace(SIZES[size], n_layer=n_layer)
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    weights = ModelWeights.random(cfg, seed=seed % 1000)
    prompt, toks = rng.integers(0, cfg.vocab_size, 20), rng.integers(0, cfg.vocab_size, 6)
    logits = {}
    for fused in (True, False):
        monkeypatch.setattr(cuda, "QKV_ATTENTION", fused)
        runner = make_runner(weights, "cuda", "bf16")
        assert runner._qkv_attention(1) == fused
        cache = runner.new_cache(1)
        runner.prefill(cache, 0, prompt)
        logits[fused] = np.stack([runner.decode(cache, toks[i:i + 1])[0] for i in range(len(toks))])
    scale = float(np.abs(logits[False]).max())
    err = float(np.abs(logits[True] - logits[False]).max())
    assert err <= 1e-4 * scale, f"seed {seed}: fused vs two kernels {err:.3e} (logit scale {scale:.3g})"
    monkeypatch.setattr(cuda, "QKV_ATTENTION", True)
    runner = make_runner(weights, "cuda", "bf16")
    c1, c2 = runner.new_cache(1), runner.new_cache(1)
    t1 = runner.prefill(c1, 0, prompt).argmax(-1, keepdims=True)
    t2 = runner.prefill(c2, 0, prompt).argmax(-1, keepdims=True)
    want = []
    for _ in range(6):
        t2 = runner.decode_greedy(c2, t2)
        want.append(t2)
    steps = runner.greedy_steps(c1, t1, max_steps=6)
    np.testing.assert_array_equal(np.stack(list(steps)), np.stack(want))

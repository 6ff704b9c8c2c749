"""kernels/attention.cu on the GPU: prefill (f32, tf32x3, tf32) and decode against a float64 reference,
with torch float32 (TF32 off) as the peer whose error sets the limit (at most 2x, plus one float32
ulp of the output's scale). The checks are attention_checks.py's (beside this file)."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def chk(cp):
    import attention_checks  # imports CuPy: only where the GPU tests run

    return attention_checks


def _assert_all(results):
    bad = [r.line() for r in results if not r.ok]
    assert not bad, "\n".join(bad)


PREFILL = [  # (s_q, d, causal, q_start, scale)
    (1, 768, False, 0, 1.0), (2, 1600, True, 0, 1.0), (3, 1024, False, 0, 1.0), (30, 1280, True, 0, 1.0),
    (64, 768, True, 0, 1.0), (100, 1600, False, 0, 1.0), (1023, 768, True, 0, 1.0), (1025, 1600, False, 0, 1.0),
    (1025, 768, True, 0, 10.0), (100, 1024, False, 0, 10.0), (4096, 768, False, 0, 1.0),
    (1, 768, True, 7, 1.0), (30, 1600, True, 100, 1.0), (24, 768, True, 1000, 1.0), (64, 1280, True, 64, 1.0),
]


@pytest.mark.parametrize("case", PREFILL, ids=lambda c: f"S{c[0]}-D{c[1]}-{'causal' if c[2] else 'full'}-q0{c[3]}-x{c[4]:g}")
def test_prefill_matches_float64(chk, torch_cuda, case):
    rng = np.random.default_rng(hash(case) % 2**32)
    _assert_all(chk.check_prefill(torch_cuda, rng, *case))


@pytest.mark.parametrize("s", [1, 100, 1025])
def test_prefill_cache_layout_noncausal(chk, torch_cuda, s):
    """Non-causal attention with K/V read from a cache (stride D), not the solve layout."""
    _assert_all(chk.check_prefill(torch_cuda, np.random.default_rng(s), s, 768, False, 0, 1.0, layout="cache"))


@pytest.mark.parametrize("impl", ["auto", "mma"])
@pytest.mark.parametrize("variant", ["tf32x3f", "tf32"])
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_split_keys_agree_and_repeat(cp, variant, causal, impl):
    """The split-key kernels at any chunk (1 = one key tile per block, up to 16 splits) agree with the
    plain kernel (chunk 0) to rounding and repeat bit for bit (the combine runs in split order);
    impl "auto" is attention_wgmma.cu's kernel on a wgmma GPU, "mma" attention.cu's."""
    from gpt2block.backends.cuda import attention as ca

    s, d = 1023, 768
    qkv = cp.asarray(np.random.default_rng(5).standard_normal((s, 3 * d)).astype(np.float32))

    def run(chunk):
        out = cp.full((s, d), cp.nan, cp.float32)
        ca.attention_prefill(qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], out, n_head=d // 64, s_q=s, s_kv=s,
                             causal=causal, q_stride=3 * d, kv_stride=3 * d, variant=variant, chunk=chunk,
                             impl=impl)
        return out

    base = run(0)
    assert bool(cp.isfinite(base).all())
    scale = float(cp.abs(base).max())
    for chunk in (1, 2, 3, 5, 16, None):
        a, b = run(chunk), run(chunk)
        assert bool(cp.isfinite(a).all()), f"chunk {chunk}: unwritten outputs"
        assert bool((a == b).all()), f"chunk {chunk}: two runs differ"
        tol = 1e-5 if variant == "tf32x3f" else 2e-3
        assert float(cp.abs(a - base).max()) <= tol * scale, f"chunk {chunk}: differs from the plain kernel"
    with pytest.raises(ValueError, match="no split-key kernel"):
        ca.attention_prefill(qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], base, n_head=d // 64, s_q=s, s_kv=s,
                             causal=causal, q_stride=3 * d, kv_stride=3 * d, variant="f32", chunk=2)


def test_prefill_wgmma_is_the_default_on_hopper(cp):
    """On a compute capability 9.0 GPU impl="auto" runs attention_wgmma.cu (its planes scratch is
    made), "wgmma" is accepted for the tensor-core variants and refused, with a message, for f32."""
    from gpt2block.backends.cuda import attention as ca
    from gpt2block.backends.cuda.linear import wgmma_available

    if not wgmma_available():
        pytest.skip("no wgmma on this GPU")
    s, d = 100, 768
    qkv = cp.asarray(np.random.default_rng(9).standard_normal((s, 3 * d)).astype(np.float32))
    args = (qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:])
    kw = dict(n_head=d // 64, s_q=s, s_kv=s, causal=False, q_stride=3 * d, kv_stride=3 * d)
    outs = {}
    for impl in ("auto", "wgmma", "mma"):
        outs[impl] = cp.full((s, d), cp.nan, cp.float32)
        ca.attention_prefill(*args, outs[impl], variant="tf32x3f", impl=impl, **kw)
    assert bool((outs["auto"] == outs["wgmma"]).all())
    assert not bool((outs["auto"] == outs["mma"]).all()), "auto and mma gave identical bits: the same kernel?"
    assert float(cp.abs(outs["auto"] - outs["mma"]).max()) < 1e-5
    with pytest.raises(ValueError, match="wgmma attention needs variant"):
        ca.attention_prefill(*args, outs["auto"], variant="f32", impl="wgmma", **kw)
    with pytest.raises(ValueError, match="impl must be"):
        ca.attention_prefill(*args, outs["auto"], variant="tf32", impl="cuda", **kw)


DECODE = [  # (lengths, d, scale, n_ctx, tight max_len)
    ([1], 768, 1.0, 1024, False), ([1024], 1600, 1.0, 1024, False), ([1, 7, 300], 768, 1.0, 1024, True),
    ([1, 7, 300, 1024, 1024, 300, 7, 1], 768, 1.0, 1024, False), ([1024, 300, 7], 1024, 10.0, 1024, False),
    ([2048, 1500], 768, 1.0, 2048, False),
]


@pytest.mark.parametrize("case", DECODE, ids=lambda c: f"B{len(c[0])}-D{c[1]}-x{c[2]:g}-ctx{c[3]}{'-tight' if c[4] else ''}")
def test_decode_matches_float64(chk, torch_cuda, case):
    lengths, d, scale, n_ctx, tight = case
    _assert_all(chk.check_decode(torch_cuda, np.random.default_rng(len(lengths) * d), lengths, d, scale, n_ctx, tight))


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_decode_any_cluster_size(chk, torch_cuda, monkeypatch, ranks):
    """Blocks per (row, head) 1 (one block, every chunk of 64 keys a round of its online softmax,
    as on pre-Hopper devices), 2, 4 and 8 (clusters): rows around the chunk and round edges, fresh
    random data, each within the float64 judge's limit."""
    from gpt2block.backends.cuda import attention as ca

    if ranks > 1 and int(ca.cp.cuda.Device().compute_capability) < 90:
        pytest.skip("clusters need sm_90: before it the kernel runs one block per (row, head)")
    monkeypatch.setattr(ca, "decode_ranks", lambda batch, n_head: ranks)
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    for lengths, d in (([1, 63, 64, 65, 129, 200], 768), ([513, 1024, 2, 64 * ranks + 1], 1600)):
        bad = [r.line() for r in chk.check_decode(torch_cuda, rng, lengths, d, 1.0, 1024, False) if not r.ok]
        assert not bad, f"seed {seed}: " + "\n".join(bad)


def test_decode_ranks_by_batch(cp):
    """gpt2's 12 heads: 8 blocks per (row, head) at batch 1, 4 at batch 8 (H200, 132 SMs), 1 at 512."""
    from gpt2block.backends.cuda import attention as ca

    if int(cp.cuda.Device().compute_capability) < 90:
        assert ca.decode_ranks(1, 12) == 1
        return
    sms = ca.sm_count()
    for b in (1, 2, 8, 64, 512):
        r = ca.decode_ranks(b, 12)
        assert r in (1, 2, 4, 8) and (r == 1 or b * 12 * r <= ca.DECODE_BLOCKS_PER_SM * sms)
        assert r == 8 or b * 12 * 2 * r > ca.DECODE_BLOCKS_PER_SM * sms
    if sms == 132:
        assert [ca.decode_ranks(b, 12) for b in (1, 8, 512)] == [8, 4, 1]


def test_decode_repeats_bit_exactly(chk):
    _assert_all(chk.check_decode_repeat(np.random.default_rng(5)))


def test_decode_out_of_range_length_gives_nan(chk, cp):
    """A row whose length is 0 or above max_len is NaN (a visible error); the other rows are unaffected."""
    rng = np.random.default_rng(9)
    d = 768
    qkv, cache = chk.decode_inputs(rng, [5, 5, 5], d, 1024, 1.0)
    qkv_d, cache_d = cp.asarray(qkv), cp.asarray(cache)
    good = cp.asnumpy(chk.run_decode(qkv_d, cache_d, [5, 5, 5], d, 1024))
    for max_len in (1024, 8):  # max_len only bounds the lengths: 9 is bad at 8
        bad = cp.asnumpy(chk.run_decode(qkv_d, cache_d, [5, 0, 9], d, max_len))
        assert np.isnan(bad[1]).all()
        same = cp.asnumpy(chk.run_decode(qkv_d, cache_d, [5, 5, 5], d, max_len))
        assert np.isfinite(bad[0]).all() and np.array_equal(bad[0], same[0])
        if max_len == 8:
            assert np.isnan(bad[2]).all()  # 9 > max_len
    assert np.isfinite(good).all()
    # a bad row beside rows of many chunks (several ranks of their clusters at work)
    qkv, cache = chk.decode_inputs(rng, [1024, 1024, 300], d, 1024, 1.0)
    qkv_d, cache_d = cp.asarray(qkv), cp.asarray(cache)
    bad = cp.asnumpy(chk.run_decode(qkv_d, cache_d, [1024, 0, 300], d, 1024))
    same = cp.asnumpy(chk.run_decode(qkv_d, cache_d, [1024, 1024, 300], d, 1024))
    assert np.isnan(bad[1]).all() and np.isfinite(same).all()
    assert np.array_equal(bad[0], same[0]) and np.array_equal(bad[2], same[2])


def _prefill_args(cp, s=8, d=128):
    qkv = cp.zeros((s, 3 * d), cp.float32)
    out = cp.empty((s, d), cp.float32)
    kw = dict(n_head=d // 64, s_q=s, s_kv=s, causal=False, q_stride=3 * d, kv_stride=3 * d)
    return (qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], out), kw


@pytest.mark.parametrize("change, word", [
    (lambda a, kw: (a, {**kw, "variant": "fp16"}), "variant"),
    (lambda a, kw: (a, {**kw, "n_head": 0}), "n_head"),
    (lambda a, kw: (a, {**kw, "s_q": 0}), "s_q"),
    (lambda a, kw: (a, {**kw, "s_kv": 9}), "k is too small"),
    (lambda a, kw: (a, {**kw, "q_stride": 100}), "q_stride"),
    (lambda a, kw: (a, {**kw, "kv_stride": 130}), "kv_stride"),
    (lambda a, kw: ((a[0], a[1], a[2], a[3][:, :64]), kw), "out"),
    (lambda a, kw: ((a[0], a[1], a[2], a[3].astype("float64")), kw), "out"),
    (lambda a, kw: ((a[0], a[1], a[2], a[0]), kw), "out"),
])
def test_prefill_rejects_bad_arguments(cp, change, word):
    from gpt2block.backends.cuda.attention import attention_prefill

    args, kw = change(*_prefill_args(cp))
    with pytest.raises((ValueError, TypeError), match=word):
        attention_prefill(*args, **kw)


def test_prefill_rejects_overlapping_output(cp):
    from gpt2block.backends.cuda.attention import attention_prefill

    _, kw = _prefill_args(cp)
    big = cp.zeros(8 * 384 + 8 * 128, cp.float32)
    qkv = big[:8 * 384].reshape(8, 384)
    out = big[128:128 + 8 * 128].reshape(8, 128)  # contiguous, inside q's rows
    with pytest.raises(ValueError, match="overlaps"):
        attention_prefill(qkv[:, :128], qkv[:, 128:256], qkv[:, 256:], out, **kw)


def test_decode_rejects_bad_arguments(cp):
    from gpt2block.backends.cuda.attention import attention_decode

    d = 128
    q = cp.zeros((2, 3 * d), cp.float32)
    cache = cp.zeros((2, 16, d), cp.float32)
    out = cp.empty((2, d), cp.float32)
    lens = cp.asarray([3, 4], cp.int32)
    kw = dict(n_head=2, q_stride=3 * d, cache_batch_stride=16 * d, max_len=16)
    attention_decode(q, cache, cache, lens, out, **kw)  # valid
    with pytest.raises(ValueError, match="lengths"):
        attention_decode(q, cache, cache, lens.astype(cp.int64), out, **kw)
    small = cp.zeros((1, 16, d), cp.float32)
    with pytest.raises(ValueError, match="k_cache is too small"):
        attention_decode(q, small, cache, lens, out, **kw)
    with pytest.raises(ValueError, match="v_cache is too small"):
        attention_decode(q, cache, small, lens, out, **kw)
    with pytest.raises(ValueError, match="cache_batch_stride"):
        attention_decode(q, cache, cache, lens, out, **{**kw, "max_len": 17})
    with pytest.raises(ValueError, match="q is too small"):
        attention_decode(cp.zeros((1, 3 * d), cp.float32), cache, cache, lens, out, **kw)
    with pytest.raises(ValueError, match="max_len"):
        attention_decode(q, cache, cache, lens, out, **{**kw, "max_len": 0})
    with pytest.raises(ValueError, match="out"):
        attention_decode(q, cache, cache, lens, out[:, :64], **kw)

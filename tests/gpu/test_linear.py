"""The matrix kernels (kernels/gemm.cu, kernels/gemv.cu through backends/cuda/linear.py)
against a float64 reference on awkward shapes: fp32-mode variants (tf32x3 GEMM from M = 9, the
smallest M that linear() gives it; float32 and bf16 GEMV below) within twice torch fp32's error,
tf32 within 1e-3 of the output's scale.
The checking functions are linear_checks.py's (beside this file); the cases a subset of
dev/check_linear.py's lists."""

import zlib

import pytest


def _load_checks():
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    import linear_checks  # imports CuPy and torch: only where the GPU tests run

    return linear_checks


def _case_id(c: dict) -> str:
    head = c.get("variant", c.get("wdtype"))
    epi = c.get("epilogue", "bias")
    what = ("nt" + ("-ln" if c.get("ln") else "") + (f"-{epi}" if epi else "")) if c.get("nt") else epi
    tail = ("".join(f"-{k}{c[k]}" for k in ("offset", "ln_mean") if c.get(k)) + ("-inplace" if c.get("inplace") else "")
            + ("-planes" if c.get("planes") else ""))
    return f"{head}-{what}-M{c['m']}-K{c['k']}-N{c['n']}{tail}"


def _gemm_cases() -> list:
    cases = []
    for variant in ("tf32x3", "tf32"):
        for d in (768, 1600):
            for k, n in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)):
                for m in (9, 100, 1025):
                    cases.append(dict(variant=variant, m=m, k=k, n=n))
        cases += [
            dict(variant=variant, m=30, k=768, n=3072, epilogue="bias_gelu"),
            dict(variant=variant, m=1023, k=768, n=3072, epilogue="bias_gelu"),
            dict(variant=variant, m=9, k=768, n=768, epilogue="bias_residual"),
            dict(variant=variant, m=1025, k=3072, n=768, epilogue="bias_residual"),
            dict(variant=variant, m=100, k=3072, n=768, epilogue="bias_residual", inplace=True),
            dict(variant=variant, m=7, k=30, n=5),
            dict(variant=variant, m=33, k=100, n=97),
            dict(variant=variant, m=1, k=1, n=1),
            dict(variant=variant, m=100, k=768, n=768, epilogue="bias_gelu", offset=1),
            dict(variant=variant, m=100, k=768, n=770, epilogue="bias_residual", offset=2),
            dict(variant=variant, m=9, k=768, n=50257, nt=True),
            dict(variant=variant, m=30, k=768, n=50257, nt=True),
            dict(variant=variant, m=1025, k=1600, n=50257, nt=True),
            # column counts past one wide tile; K not a multiple of the k tile
            dict(variant=variant, m=129, k=800, n=8195, nt=True, offset=1),
            dict(variant=variant, m=64, k=256, n=8192, nt=True),
            dict(variant=variant, m=37, k=30, n=101, nt=True),
        ]
    return cases


def _gemv_cases() -> list:
    cases = []
    for wdtype in ("f32", "bf16"):
        for d in (768, 1600):
            for k, n in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)):
                for m in (1, 3, 8):
                    cases.append(dict(wdtype=wdtype, m=m, k=k, n=n))
        cases += [
            dict(wdtype=wdtype, m=5, k=768, n=3072, epilogue="bias_gelu"),
            dict(wdtype=wdtype, m=8, k=3072, n=768, epilogue="bias_residual"),
            dict(wdtype=wdtype, m=3, k=3072, n=768, epilogue="bias_residual", inplace=True),
            dict(wdtype=wdtype, m=2, k=100, n=64),
            dict(wdtype=wdtype, m=8, k=5000, n=8),
            dict(wdtype=wdtype, m=1, k=768, n=50257, nt=True, epilogue=None),
            dict(wdtype=wdtype, m=8, k=1600, n=50257, nt=True, epilogue=None, ln=True),
            # the decode layout: transposed matrices, LayerNorm fused into QKV and FC
            dict(wdtype=wdtype, m=1, k=768, n=2304, nt=True, epilogue="bias", ln=True),
            dict(wdtype=wdtype, m=8, k=1600, n=4800, nt=True, epilogue="bias", ln=True),
            dict(wdtype=wdtype, m=3, k=1024, n=4096, nt=True, epilogue="bias_gelu", ln=True),
            dict(wdtype=wdtype, m=8, k=1280, n=1280, nt=True, epilogue="bias_residual"),
            dict(wdtype=wdtype, m=1, k=6400, n=1600, nt=True, epilogue="bias_residual", inplace=True),
            # one token's builds by width (float32: 4 blocks per SM at 1600 and 1024; bf16: 4 blocks at 1024)
            dict(wdtype=wdtype, m=1, k=1600, n=6400, nt=True, epilogue="bias_gelu", ln=True),
            dict(wdtype=wdtype, m=1, k=4096, n=1024, nt=True, epilogue="bias_residual"),
            dict(wdtype=wdtype, m=2, k=104, n=33, nt=True, epilogue="bias_gelu"),
            # narrow outputs: the warps of a row group split K (gemv_nt_plan's wpr)
            dict(wdtype=wdtype, m=8, k=3072, n=768, nt=True, epilogue="bias_residual"),
            dict(wdtype=wdtype, m=5, k=768, n=768, nt=True, epilogue="bias_residual", inplace=True),
            # every build of the nt kernels (kernels/gemv.cu: 1, 2, 4, 8 tokens), padded ones included
            dict(wdtype=wdtype, m=4, k=768, n=2304, nt=True, epilogue="bias", ln=True),
            dict(wdtype=wdtype, m=6, k=768, n=3072, nt=True, epilogue="bias_gelu", ln=True),
            dict(wdtype=wdtype, m=7, k=1024, n=1024, nt=True, epilogue="bias_residual"),
            # 4 rows per warp at 8 tokens (bf16, and the float32 LM head): N not a multiple of a block's rows
            dict(wdtype=wdtype, m=5, k=768, n=50257, nt=True, epilogue=None, ln=True),
            dict(wdtype=wdtype, m=7, k=104, n=37, nt=True, epilogue=None, ln=True),
            dict(wdtype=wdtype, m=6, k=200, n=101, nt=True, epilogue="bias_gelu"),
            # a row mean thousands of standard deviations from zero
            dict(wdtype=wdtype, m=1, k=768, n=2304, nt=True, epilogue="bias", ln=True, ln_mean=3000.0),
            dict(wdtype=wdtype, m=1, k=1600, n=50257, nt=True, epilogue=None, ln=True, ln_mean=-2000.0),
            dict(wdtype=wdtype, m=5, k=1280, n=5120, nt=True, epilogue="bias_gelu", ln=True, ln_mean=3000.0),
            # K split across warps with a partial last row group (wpr > 1, N not a multiple of the rows)
            dict(wdtype=wdtype, m=8, k=2048, n=100, nt=True, epilogue="bias_residual"),
            dict(wdtype=wdtype, m=1, k=2048, n=100, nt=True, epilogue="bias_residual"),
        ]
    return cases


def _planes_cases() -> list:
    """The wgmma GEMM (gemm_planes on prepare_planes' planes): every GPT-2 width, M from 2."""
    cases = []
    for variant in ("tf32x3", "tf32"):
        for d in (768, 1024, 1280, 1600):
            for k, n in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)):
                for m in ((9, 100, 1025) if d in (768, 1600) else (30,)):
                    cases.append(dict(variant=variant, m=m, k=k, n=n))
        cases += [
            dict(variant=variant, m=1023, k=768, n=3072, epilogue="bias_gelu"),
            dict(variant=variant, m=1025, k=3072, n=768, epilogue="bias_residual"),
            dict(variant=variant, m=100, k=3072, n=768, epilogue="bias_residual", inplace=True),
            dict(variant=variant, m=9, k=768, n=50257, nt=True),
            dict(variant=variant, m=1025, k=1600, n=50257, nt=True),
            dict(variant=variant, m=129, k=800, n=8195, nt=True),
            dict(variant=variant, m=2, k=4, n=1),
            dict(variant=variant, m=33, k=100, n=97),
            dict(variant=variant, m=130, k=68, n=1000, epilogue="bias_gelu"),
            dict(variant=variant, m=65, k=64, n=63, nt=True),
        ]
    return [dict(c, planes=True) for c in cases]


GEMM_CASES = _gemm_cases()
PLANES_CASES = _planes_cases()
GEMV_CASES = _gemv_cases()


@pytest.fixture(scope="module")
def checks(torch_cuda):
    return _load_checks()


@pytest.mark.parametrize("case", GEMM_CASES, ids=[_case_id(c) for c in GEMM_CASES])
def test_gemm_accuracy(checks, case):
    res = checks.gemm_case(seed=zlib.crc32(_case_id(case).encode()), **case)
    assert res.ok, res.line()


@pytest.fixture(scope="module")
def wgmma(checks):
    if not checks.L.wgmma_available():
        pytest.skip("the wgmma GEMM needs a compute capability 9.0 GPU")
    return checks.L


@pytest.mark.parametrize("case", PLANES_CASES, ids=[_case_id(c) for c in PLANES_CASES])
def test_gemm_planes_accuracy(checks, wgmma, case):
    res = checks.gemm_case(seed=zlib.crc32(_case_id(case).encode()), **case)
    assert res.ok, res.line()


@pytest.mark.parametrize("variant", ["tf32x3", "tf32"])
def test_gemm_planes_every_tile(checks, wgmma, variant):
    """Every wgmma tile of the variant (the engine picks some only at shapes the cases above lack)."""
    for i, tile in enumerate(wgmma.WG_TILES[variant]):
        for m, k, n, epi in ((130, 772, 1000, "bias_gelu"), (65, 64, 200, "bias_residual")):
            res = checks.gemm_case(variant, m, k, n, epilogue=epi, seed=100 * i + m, planes=True, tile=tile)
            assert res.ok, res.line()


def test_gemm_planes_split_k_is_deterministic_and_in_place_safe(wgmma):
    """The split-K tiles (a cluster's blocks add their partial tiles in rank order): the same bits on
    every run, K shares of unequal length (K = 100: 4 k tiles in 3 shares; K = 32: blocks with no k
    tile), M and N past whole tiles, and the residual read from the output it overwrites."""
    import cupy as cp
    import numpy as np

    seed = int(np.random.default_rng().integers(1 << 31))  # fresh data, reproducible from the message
    rng = np.random.default_rng(seed)
    split = [t for t in wgmma.WG_TILES["tf32"] if t.splitk > 1]
    assert split, "no split-K tile to test"
    for tile in split:
        for m, k, n in ((1025, 3072, 768), (130, 100, 200), (65, 32, 390)):
            where = f"{tile.label} M={m} K={k} N={n} seed {seed}"
            a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
            w = cp.asarray(rng.standard_normal((k, n), dtype=np.float32) * 0.02)
            bias = cp.asarray(rng.standard_normal(n, dtype=np.float32) * 0.02)
            r = cp.asarray(rng.standard_normal((m, n), dtype=np.float32))
            p = wgmma.prepare_planes(w, "tf32")
            outs = []
            for _ in range(2):
                o = cp.full((m, n), cp.nan, cp.float32)
                wgmma.gemm_planes(a, p, bias, o, epilogue="bias_residual", residual=r, tile=tile)
                outs.append(o)
            inplace = r.copy()
            wgmma.gemm_planes(a, p, bias, inplace, epilogue="bias_residual", residual=inplace, tile=tile)
            ref = a.astype(cp.float64) @ w.astype(cp.float64) + bias + r
            err = float(cp.abs(outs[0] - ref).max() / cp.abs(ref).max())
            assert err < 1e-3, f"{where}: error {err:.2e}"
            assert bool(cp.array_equal(outs[0], outs[1])), f"{where}: runs differ"
            assert bool(cp.array_equal(outs[0], inplace)), f"{where}: in place differs"
            # the other epilogues: bias alone, and none (the LM head's product)
            plain = cp.full((m, n), cp.nan, cp.float32)
            wgmma.gemm_planes(a, p, bias, plain, epilogue="bias", tile=tile)
            assert float(cp.abs(plain - (ref - r)).max() / cp.abs(ref - r).max()) < 1e-3, f"{where}: bias"
            wgmma.gemm_planes(a, p, None, plain, epilogue=None, tile=tile)
            assert float(cp.abs(plain - (ref - r - bias)).max() / cp.abs(ref - r - bias).max()) < 1e-3, f"{where}: none"


@pytest.mark.parametrize("variant", ["tf32x3", "tf32"])
@pytest.mark.parametrize("transposed", [False, True])
def test_prepare_planes_splits_exactly(wgmma, variant, transposed):
    """hi = W rounded to tf32 (13 low bits zero, nearest), lo = (W - hi) rounded likewise;
    [planes, N, KP]: KP = K rounded up to 32, each 32-wide k tile in the fragment order (position
    p = 8 kk + 4 e + t holds the tile's column 8 t + 2 kk + e), zeros past K."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng()
    w = (rng.standard_normal((68, 44)) * 0.02).astype(np.float32)  # [K, N], or [N, K] when transposed
    w[0, :3] = [1.0 + 2**-11, -(1.0 + 3 * 2**-11), 3.0e-3]  # ties (away from zero) and a plain value
    p = wgmma.prepare_planes(cp.asarray(w), variant, transposed=transposed).data.get()
    wt = w if transposed else w.T  # [N, K]

    def rna(x):
        return ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)

    hi = rna(wt)
    n, k = wt.shape
    kp = -(-k // 32) * 32  # 96: two whole tiles and one with 4 columns
    pos = np.arange(kp)
    col = (pos // 32) * 32 + 8 * (pos % 4) + 2 * ((pos % 32) // 8) + (pos // 4) % 2  # column at each position
    assert sorted(col) == list(range(kp))

    def order(x):  # [N, K] -> [N, KP] in the planes' order, zeros past K
        padded = np.zeros((n, kp), np.float32)
        padded[:, :k] = x
        return padded[:, col]

    assert p.shape == ((2 if variant == "tf32x3" else 1), n, kp)
    np.testing.assert_array_equal(p[0], order(hi))
    pos = (lambda i, j: (i, j)) if transposed else (lambda i, j: (j, i))  # w[i, j] in wt
    assert hi[pos(0, 0)] == np.float32(1.0 + 2**-10) and hi[pos(0, 1)] == np.float32(-(1.0 + 2**-9))
    if variant == "tf32x3":
        np.testing.assert_array_equal(p[1], order(rna(wt - hi)))
        assert np.abs(p[0].astype(np.float64) + p[1] - order(wt)).max() <= 2**-21 * np.abs(wt).max()


def test_gemm_planes_bad_arguments(wgmma):
    import cupy as cp

    L = wgmma
    a = cp.zeros((16, 8), cp.float32)
    p = L.prepare_planes(cp.zeros((8, 12), cp.float32), "tf32x3")
    bias, out = cp.zeros(12, cp.float32), cp.zeros((16, 12), cp.float32)
    with pytest.raises(ValueError, match="multiple of 4"):
        L.prepare_planes(cp.zeros((6, 12), cp.float32), "tf32x3")
    with pytest.raises(ValueError, match="variant must be one of"):
        L.prepare_planes(cp.zeros((8, 12), cp.float32), "fp16")
    with pytest.raises(ValueError, match="the planes hold K = 8, a has K = 12"):
        L.gemm_planes(cp.zeros((16, 12), cp.float32), p, bias, out)
    with pytest.raises(ValueError, match="a must be 16-byte aligned"):
        L.gemm_planes(cp.zeros(16 * 8 + 1, cp.float32)[1:].reshape(16, 8), p, bias, out)
    with pytest.raises(ValueError, match="p must be linear.Planes"):
        L.gemm_planes(a, p.data, bias, out)
    with pytest.raises(ValueError, match="out must have shape"):
        L.gemm_planes(a, p, bias, cp.zeros((16, 13), cp.float32))
    with pytest.raises(ValueError, match="bias and residual need an epilogue"):
        L.gemm_planes(a, p, bias, out, epilogue=None)
    with pytest.raises(ValueError, match="out overlaps planes"):
        L.gemm_planes(a, p, bias, p.data.reshape(-1)[: 16 * 12].reshape(16, 12))
    with pytest.raises(ValueError, match="prepared for variant 'tf32x3', not 'tf32'"):
        L.linear(a, cp.zeros((8, 12), cp.float32), bias, out, variant="tf32", planes=p)
    with pytest.raises(ValueError, match="must have 2 plane"):
        L.Planes(cp.zeros((1, 12, 32), cp.float32), "tf32x3", 8)
    with pytest.raises(ValueError, match="K % 4 == 0"):
        L.Planes(cp.zeros((1, 12, 32), cp.float32), "tf32", 6)
    with pytest.raises(ValueError, match="rows of plane_row"):
        L.Planes(cp.zeros((1, 12, 8), cp.float32), "tf32", 8)
    with pytest.raises(ValueError, match="out must be Planes of variant 'tf32x3' for N = 12, K = 8"):
        L.prepare_planes(cp.zeros((8, 12), cp.float32), "tf32x3", out=L.prepare_planes(
            cp.zeros((12, 12), cp.float32), "tf32x3"))
    with pytest.raises(ValueError, match="tile must be one of"):
        L.gemm_planes(a, p, bias, out, tile=L.WG_TILES["tf32"][0])  # 192 columns: tf32 only


@pytest.mark.parametrize("case", GEMV_CASES, ids=[_case_id(c) for c in GEMV_CASES])
def test_gemv_accuracy(checks, case):
    res = checks.gemv_case(seed=zlib.crc32(_case_id(case).encode()), **case)
    assert res.ok, res.line()


@pytest.mark.parametrize("variant", ["tf32x3", "tf32"])
def test_gemm_repeats_bit_for_bit(checks, variant):
    assert checks.gemm_repeat_case(variant)


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
def test_gemv_split_k_repeats_bit_for_bit(checks, wdtype):
    assert checks.gemv_repeat_case(wdtype)


def test_bad_arguments_name_the_argument(checks):
    import cupy as cp

    L = checks.L
    a = cp.zeros((4, 8), cp.float32)
    b = cp.zeros((8, 12), cp.float32)
    bias = cp.zeros(12, cp.float32)
    out = cp.zeros((4, 12), cp.float32)
    with pytest.raises(ValueError, match="b must have 8 rows"):
        L.gemm(a, cp.zeros((9, 12), cp.float32), bias, out)
    with pytest.raises(ValueError, match="bias must have shape"):
        L.gemm(a, b, cp.zeros(11, cp.float32), out)
    with pytest.raises(ValueError, match="out must be float32"):
        L.gemm(a, b, bias, out.astype(cp.float64))
    with pytest.raises(ValueError, match="a must be C-contiguous"):
        L.gemm(cp.zeros((8, 4), cp.float32).T, b, bias, out)
    with pytest.raises(ValueError, match="residual is required"):
        L.gemm(a, b, bias, out, epilogue="bias_residual")
    with pytest.raises(ValueError, match="variant must be one of"):
        L.gemm(a, b, bias, out, variant="fp16")
    with pytest.raises(ValueError, match="out overlaps a"):
        big = cp.zeros((4, 12), cp.float32)
        L.gemm(big.reshape(-1)[:32].reshape(4, 8), b, bias, big)
    with pytest.raises(ValueError, match="at most 8"):
        L.gemv(cp.zeros((9, 8), cp.float32), b, bias, cp.zeros((9, 12), cp.float32))
    with pytest.raises(ValueError, match="multiple of 8"):
        L.gemv(a, L.to_bf16_bits(b), bias, out)


def test_bf16_rounding_is_nearest_even(checks):
    import cupy as cp
    import numpy as np

    L = checks.L
    vals = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -2.5, 3.0e38, np.inf, np.nan],
                    dtype=np.float32)
    bits = cp.asnumpy(L.to_bf16_bits(cp.asarray(vals)))
    back = cp.asnumpy(L.from_bf16_bits(cp.asarray(bits)))
    # 1 + 2^-8 is a tie: rounds to the even 1.0; 1 + 3 * 2^-8 rounds up to 1 + 2^-6
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.0 + 2**-6
    assert back[3] == 1.0 + 2**-7 and back[4] == -2.5
    assert np.isfinite(back[5]) and abs(back[5] / 3.0e38 - 1) <= 2**-8
    assert np.isinf(back[6]) and np.isnan(back[7])


@pytest.mark.parametrize("m", [1, 8, 9])
def test_linear_sends_small_m_to_the_gemv(checks, m):
    """linear() runs the GEMV for M <= GEMV_MAX_M and the GEMM above: bit-equal to calling each."""
    import cupy as cp

    L = checks.L
    rng = cp.random.default_rng(m)
    a = rng.standard_normal((m, 768), dtype=cp.float32)
    b = rng.standard_normal((768, 2304), dtype=cp.float32) * 0.02
    bias = rng.standard_normal(2304, dtype=cp.float32) * 0.02
    got, want = (cp.full((m, 2304), cp.nan, cp.float32) for _ in range(2))
    L.linear(a, b, bias, got, variant="tf32x3")
    if m <= L.GEMV_MAX_M:
        L.gemv(a, b, bias, want)
    else:
        L.gemm(a, b, bias, want, variant="tf32x3")
    assert cp.array_equal(got.view(cp.uint32), want.view(cp.uint32))


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("m,d", [(1, 768), (3, 1024), (6, 768), (8, 1600)])
def test_gemv_nt_kv_store(checks, wdtype, m, d):
    """ln_1 + QKV with the K / V store (gemv_*_nt_ln_bias_kv): out bit-equal to the kernel
    without the store, and the cache rows bit-equal to out's K and V, at (seq, pos) of each row,
    nothing else of the (poisoned) cache touched."""
    import cupy as cp
    import numpy as np

    L = checks.L
    rng = cp.random.default_rng()
    n_ctx, batch = 40, 9
    x = rng.standard_normal((m, d), dtype=cp.float32)
    w = rng.standard_normal((3 * d, d), dtype=cp.float32) * 0.02
    if wdtype == "bf16":
        w = L.to_bf16_bits(w)
    bias = rng.standard_normal(3 * d, dtype=cp.float32) * 0.02
    g = rng.uniform(0.8, 1.2, d, dtype=cp.float32)
    b = rng.standard_normal(d, dtype=cp.float32) * 0.1
    kv = cp.full((batch, 2, n_ctx, d), cp.nan, cp.float32)  # [row, k|v, pos, D]
    stride = 2 * n_ctx * d
    seq = np.random.default_rng().permutation(batch)[:m].astype(np.int32)
    pos = np.random.default_rng().integers(0, n_ctx, m).astype(np.int32)
    got, want = (cp.full((m, 3 * d), cp.nan, cp.float32) for _ in range(2))
    L.gemv_nt(x, w, got, bias=bias, epilogue="bias", ln=(g, b, 1e-5),
              kv=(cp.asarray(seq), cp.asarray(pos), kv[0, 0], kv[0, 1], stride))
    L.gemv_nt(x, w, want, bias=bias, epilogue="bias", ln=(g, b, 1e-5))
    assert cp.array_equal(got.view(cp.uint32), want.view(cp.uint32))
    host = cp.asnumpy(kv)
    out = cp.asnumpy(got)
    for i in range(m):
        np.testing.assert_array_equal(host[seq[i], 0, pos[i]], out[i, d:2 * d])
        np.testing.assert_array_equal(host[seq[i], 1, pos[i]], out[i, 2 * d:])
        host[seq[i], :, pos[i]] = np.nan
    assert np.isnan(host).all(), "the kv store wrote outside its rows"


def test_gemv_nt_kv_bad_arguments(checks):
    import cupy as cp

    L = checks.L
    x = cp.zeros((2, 64), cp.float32)
    w = cp.zeros((192, 64), cp.float32)
    bias = cp.zeros(192, cp.float32)
    ln = (cp.ones(64, cp.float32), cp.zeros(64, cp.float32), 1e-5)
    out = cp.zeros((2, 192), cp.float32)
    cache = cp.zeros((2, 10, 64), cp.float32)
    seq = pos = cp.zeros(2, cp.int32)
    good = (seq, pos, cache[0], cache[1], 640)
    with pytest.raises(ValueError, match="needs ln"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", kv=good)
    with pytest.raises(ValueError, match="needs ln and epilogue 'bias'"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias_gelu", ln=ln, kv=good)
    with pytest.raises(ValueError, match="kv seq must be int32"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", ln=ln, kv=(seq.astype(cp.int64), pos, cache[0], cache[1], 640))
    with pytest.raises(ValueError, match="kv pos must have shape"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", ln=ln, kv=(seq, cp.zeros(3, cp.int32), cache[0], cache[1], 640))
    with pytest.raises(ValueError, match="k_cache must have rows of D = 64"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", ln=ln, kv=(seq, pos, cp.zeros((10, 32), cp.float32), cache[1], 640))
    with pytest.raises(ValueError, match="batch_stride = 3 must be at least k_cache rows x D = 640"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", ln=ln, kv=(seq, pos, cache[0], cache[1], 3))
    with pytest.raises(ValueError, match="batch_stride = -1"):
        L.gemv_nt(x[:1], w, out[:1], bias=bias, epilogue="bias", ln=ln,
                  kv=(seq[:1], pos[:1], cache[0], cache[1], -1))
    with pytest.raises(ValueError, match="k_cache overlaps v_cache"):
        L.gemv_nt(x, w, out, bias=bias, epilogue="bias", ln=ln, kv=(seq, pos, cache[0], cache[0, 5:], 640))
    with pytest.raises(ValueError, match="out overlaps k_cache"):
        L.gemv_nt(x, w, cache.reshape(-1)[:384].reshape(2, 192), bias=bias, epilogue="bias", ln=ln, kv=good)
    with pytest.raises(ValueError, match="N = 3 \\* D"):
        L.gemv_nt(x, w[:190], cp.zeros((2, 190), cp.float32), bias=bias[:190], epilogue="bias", ln=ln, kv=good)


@pytest.mark.parametrize("wdtype", ["f32", "bf16"])
@pytest.mark.parametrize("d,n,nan_row", [(768, 50257, False), (1600, 50257, False), (1024, 1000, False),
                                         (1280, 37, False), (104, 7, False), (768, 50257, True)])
def test_lm_head_argmax(checks, wdtype, d, n, nan_row):
    """ln_f + the one-token LM head with its own argmax (gemv_*_nt_ln_m1, argmax=): the id equals
    argmax_rows' over the logits it stored (which are bit-equal to the head without the argmax) and
    np.argmax's, with a tie for the largest logit (two equal weight rows along LN(x), rows 2 and
    N - 1: the first wins), a NaN logit (never wins), an all-NaN row (index 0), the step's ints moved
    on and mapped host memory written (both start at -1); twice, so the ticket went back to 0."""
    import cupy as cp
    import numpy as np

    from gpt2block.backends.cuda import ops as cuda_ops

    L = checks.L
    m = 1
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, d)) + 3.0).astype(np.float32)
    g = rng.uniform(0.8, 1.2, d).astype(np.float32)
    b = (rng.standard_normal(d) * 0.1).astype(np.float32)
    w = (rng.standard_normal((n, d)) * 0.02).astype(np.float32)
    xn = (x[0] - x[0].mean()) / x[0].std() * g + b  # LN(x), near enough to steer the winner
    w[2] = w[n - 1] = xn / np.linalg.norm(xn)  # the largest logit, |LN(x)|, twice: rows 2 and N - 1 tie
    w[n // 2, 0] = np.nan  # a NaN logit
    if nan_row:
        x[0, 0] = np.nan  # the row all NaN: its id is 0
    x, w, g, b = (cp.asarray(a) for a in (x, w, g, b))
    if wdtype == "bf16":
        w = L.to_bf16_bits(w)
    ln = (g, b, 1e-5)
    plain = cp.full((m, n), cp.nan, cp.float32)
    L.gemv_nt(x, w, plain, ln=ln)
    want = cp.full(m, -1, cp.int32)
    cuda_ops.argmax_rows(plain, want)
    host_logits = cp.asnumpy(plain)
    expect = np.where(np.isnan(host_logits), -np.inf, host_logits).argmax(-1)
    assert expect[0] == (0 if nan_row else 2), f"seed {seed}: the tie is not the largest logit"
    np.testing.assert_array_equal(cp.asnumpy(want), expect)
    step_host = np.stack([np.full(m, -1), np.arange(m) + 3, np.arange(m) * 7, np.arange(m) * 7 + 1]).astype(np.int32)
    for advance in (False, True):
        got = cp.full((m, n), cp.nan, cp.float32)
        ids = cp.full(m, -1, cp.int32)
        step = cp.asarray(step_host) if advance else None
        mapped = cuda_ops.MappedInts(m) if advance else None
        if advance:
            mapped.array[:] = -1
        L.gemv_nt(x, w, got, ln=ln, argmax=(ids, step, mapped))
        cp.cuda.get_current_stream().synchronize()
        assert cp.array_equal(got.view(cp.uint32), plain.view(cp.uint32))
        np.testing.assert_array_equal(cp.asnumpy(ids), expect, err_msg=f"seed {seed}")
        if advance:
            np.testing.assert_array_equal(mapped.array, expect)
            moved = np.stack([expect, step_host[1], step_host[2] + 1, step_host[3] + 1]).astype(np.int32)
            np.testing.assert_array_equal(cp.asnumpy(step), moved)


def test_lm_head_argmax_bad_arguments(checks):
    import cupy as cp

    L = checks.L
    x = cp.zeros((2, 64), cp.float32)
    w = cp.zeros((100, 64), cp.float32)
    out = cp.zeros((2, 100), cp.float32)
    ln = (cp.ones(64, cp.float32), cp.zeros(64, cp.float32), 1e-5)
    ids = cp.zeros(2, cp.int32)
    with pytest.raises(ValueError, match="argmax needs ln and no epilogue"):
        L.gemv_nt(x, w, out, argmax=(ids, None, None))
    with pytest.raises(ValueError, match="argmax needs ln and no epilogue"):
        L.gemv_nt(x, w, out, bias=cp.zeros(100, cp.float32), epilogue="bias", ln=ln, argmax=(ids, None, None))
    with pytest.raises(ValueError, match="one-token build only"):
        L.gemv_nt(x, w, out, ln=ln, argmax=(ids, None, None))
    x1, out1, ids1 = x[:1], out[:1], ids[:1]
    with pytest.raises(ValueError, match="argmax ids must be"):
        L.gemv_nt(x1, w, out1, ln=ln, argmax=(cp.zeros(3, cp.int32), None, None))
    with pytest.raises(ValueError, match="argmax advance must be"):
        L.gemv_nt(x1, w, out1, ln=ln, argmax=(ids1, cp.zeros((4, 3), cp.int32), None))
    with pytest.raises(ValueError, match="argmax host_out must be"):
        L.gemv_nt(x1, w, out1, ln=ln, argmax=(ids1, None, cp.zeros(1, cp.int32)))

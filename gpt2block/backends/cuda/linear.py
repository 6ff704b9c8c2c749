"""Launching the matrix kernels: GEMM for prefill and solve (kernels/gemm.cu on the weights as
stored; kernels/gemm_wgmma.cu on weight planes, compute capability 9.0 only), GEMV
(kernels/gemv.cu) for decode, and the choice between them (``linear``).

All arguments are CuPy arrays on the current device, C-contiguous (views are fine). Every
function checks shapes, dtypes, contiguity and aliasing and raises ValueError naming the
argument before anything is launched. Nothing here synchronizes the stream.

    gemm(a, b, bias, out)      out[M,N] = epi(a[M,K] @ b[K,N] + bias[N])     tensor cores
    gemm_nt(a, b, out)         out[M,N] = a[M,K] @ b[N,K]^T                  tied LM head
    prepare_planes(w, variant) W [K,N] (or W^T [N,K]) -> Planes: W^T as tf32 hi / lo parts
    gemm_planes(a, p, bias, out) the gemm / gemm_nt products on Planes with wgmma (sm_90a)
    gemv(x, w, bias, out)      the same as gemm for M <= GEMV_MAX_M; w float32 or bf16 bits
    gemv_nt(x, w, out, ...)    the same as gemm_nt for M <= GEMV_MAX_M, with optional bias / GELU /
                               residual epilogues and a fused input LayerNorm (the decode layout)
    linear / linear_nt         pick gemv or gemm from M and the weights' dtype (linear: gemm_planes
                               where given planes)

Variants of the GEMM arithmetic (VARIANTS): ``tf32x3`` (3-pass split TF32, fp32-level
accuracy: the fp32 precision mode), ``tf32`` (one TF32 pass). ``linear`` sends M <= GEMV_MAX_M
to the GEMV in every mode: at M = 1 a GEMM's long per-output sums are less accurate than the
GEMV's (and slower). GEMV always accumulates in float32 with FFMA, whatever the weights' storage.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np

from . import build
from .modules import kernel, launch, sm_count

VARIANTS = ("tf32x3", "tf32")
EPILOGUES = ("bias", "bias_gelu", "bias_residual")
GEMV_MAX_M = build.GEMV_MAX_M

# ---------------------------------------------------------------------------------------------
# GEMM tiles. The .cu reads these through its GEMM_* defines (build.gemm); smem_bytes is GEMM_SMEM_BYTES.


@dataclass(frozen=True)
class Tile:
    """A tensor-core block tile: bm x bn outputs, warps_m x warps_n warps."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    per_sm: int  # blocks resident per SM (from the kernels' registers and shared memory)
    speed: float  # relative throughput per SM (a bigger warp tile reuses operands more)

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32

    @property
    def smem_bytes(self) -> int:
        ldk, ldn = build.GEMM_BK + 4, self.bn + 8
        b = max(build.GEMM_BK * ldn, self.bn * ldk)
        return build.GEMM_STAGES * (self.bm * ldk + b) * 4


TILES = tuple(Tile(*t) for t in build.GEMM_TILES)  # (build.GEMM_TILES: registers, blocks per SM, speeds)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pick_tile(m: int, n: int, sms: int | None = None) -> Tile:
    """The tile with the least estimated time: whole waves of blocks, each wave's length
    proportional to the work an SM does in it."""
    sms = sm_count() if sms is None else sms

    def cost(t: Tile) -> float:
        blocks = -(-m // t.bm) * -(-n // t.bn)
        waves = -(-blocks // (sms * t.per_sm))
        return waves * t.bm * t.bn * t.per_sm / t.speed

    return min(TILES, key=cost)


# ---------------------------------------------------------------------------------------------
# Argument checks.

_NULL = np.uint64(0)  # a null pointer argument


def _check_array(arr, name: str, ndim: int, dtypes=(np.float32,)):
    if not isinstance(arr, cp.ndarray):
        raise ValueError(f"{name} must be a cupy.ndarray, got {type(arr).__name__}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.dtype not in [np.dtype(d) for d in dtypes]:
        want = " or ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"{name} must be {want}, got {arr.dtype}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (strides {arr.strides})")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    if arr.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} is on device {arr.device.id}, not the current device {cp.cuda.Device().id}")


def _check_shape(arr, name: str, shape: tuple):
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(arr.shape)}")


def _overlap(x, y) -> bool:
    xa, ya = x.data.ptr, y.data.ptr
    return xa < ya + y.nbytes and ya < xa + x.nbytes


def _check_out(out, name: str, inputs: dict, residual=None):
    """out may not overlap any input, except that it may be exactly ``residual``."""
    for n, arr in inputs.items():
        if arr is not None and _overlap(out, arr):
            raise ValueError(f"{name} overlaps {n}; the output must be a separate buffer")
    if residual is not None and _overlap(out, residual):
        if out.data.ptr != residual.data.ptr or out.shape != residual.shape:
            raise ValueError(f"{name} partially overlaps residual; it must be the same buffer or a separate one")


def _check_epilogue(epilogue: str, residual, shape: tuple):
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {', '.join(EPILOGUES)}, got {epilogue!r}")
    if epilogue == "bias_residual":
        if residual is None:
            raise ValueError("residual is required by epilogue 'bias_residual'")
        _check_array(residual, "residual", 2)
        _check_shape(residual, "residual", shape)
    elif residual is not None:
        raise ValueError(f"residual is only used by epilogue 'bias_residual', not {epilogue!r}")


def _check_variant(variant: str):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def _i32(v: int, name: str) -> np.int32:
    if not 0 < v < 2**31:
        raise ValueError(f"{name} = {v} is outside the kernels' int range")
    return np.int32(v)


# ---------------------------------------------------------------------------------------------
# GEMM.


# ---------------------------------------------------------------------------------------------
# GEMM on prepared weight planes: kernels/gemm_wgmma.cu (wgmma, sm_90a; H100 / H200 only).


@dataclass(frozen=True)
class WgTile:
    """A gemm_wgmma.cu block: wg consumer warpgroups (64 rows each) x bn columns, and the producer
    warpgroup."""

    wg: int
    bn: int
    speed: float  # relative throughput per SM
    splitk: int = 1  # blocks (a cluster) sharing one output tile, each 1/splitk of K (GW_SPLITK)

    @property
    def bm(self) -> int:
        return 64 * self.wg

    @property
    def threads(self) -> int:
        return 128 * (self.wg + 1)

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}" + (f"/{self.splitk}" if self.splitk > 1 else "")


# Per variant; speeds: TFLOP/s at the LM head's 1024 x 768 x 50257 (many waves) relative to 128 x 128
# (dev/check_gemm_wgmma.py, version 8; tf32x3: 95.1, 75.5, 69.2, 74.7, 62.5; tf32, one k tile at a
# time: 167.9, 156.1, 124.5, 99.9, 126.1, 96.6), tf32x3's one-consumer tiles marked down to what they
# gave at M = 1024's block shapes. 48 columns make 128 blocks of N = 768 (132 SMs): proj / mlp tf32x3
# 52 / 69 TFLOP/s, against 35 / 56 on 128 x 64. tf32x3 has no 192-column tile: its part registers
# spill there.
# Split K (version 19): 128 x 192 in clusters of 3 blocks (96 blocks at N = 768) for tf32's mlp
# (K = 3072): 128x48 118.7 -> 143.4 TFLOP/s (dev/check_gemm_wgmma.py), solve tf32 back to back 158.8 -> 148.2 us
# (dev/tune_split_k.py; docs/PERFORMANCE.md, version 19). Not at proj's K = 768 (each block 8 k tiles: solve
# slower), hence WG_SPLIT_MIN_K; clusters of 4 measured 99.9, 128 x 128 / 2 128.5, 64 x 192 / 2 130.4;
# tf32x3's 128 x 128 / 2 73.5 against 72.6 (not kept).
WG_TILES = {v: tuple(WgTile(wg, bn, speed, splitk) for wg, bn, speed, splitk in tiles)
            for v, tiles in build.WG_TILE_TABLE.items()}


def plane_row(k: int) -> int:
    """The planes' row length for K: K rounded up to whole 32-wide k tiles (kernels/gemm_wgmma.cu)."""
    return -(-k // 32) * 32


def planes_of(variant: str) -> int:
    """Weight planes a variant reads: tf32 hi and lo (tf32x3), or hi alone (tf32)."""
    return build.gw_planes(variant)


def wgmma_stages(variant: str, tile: WgTile) -> int:
    """The ring stages of the tile's build (build.gw_stages: the most that fit, at most 8)."""
    return build.gw_stages(variant, tile.wg, tile.bn)


def wgmma_smem_bytes(variant: str, tile: WgTile) -> int:
    """The dynamic shared memory of the tile's build (GW_SMEM_BYTES of kernels/gemm_wgmma.cu)."""
    return build.gw_smem_bytes(variant, tile.wg, tile.bn, wgmma_stages(variant, tile))


_wgmma_devices: dict[int, bool] = {}


def wgmma_available() -> bool:
    """Whether the wgmma kernels (gemm_wgmma.cu, attention_wgmma.cu) run on the current device
    (compute capability 9.0); cached per device (it is asked at every launch)."""
    dev = cp.cuda.runtime.getDevice()
    got = _wgmma_devices.get(dev)
    if got is None:
        got = _wgmma_devices[dev] = cp.cuda.Device(dev).compute_capability == "90"
    return got


class Planes:
    """A weight W [K, N] prepared for gemm_wgmma.cu: ``data`` [planes, N, plane_row(K)] float32, W^T
    rounded to tf32 (hi) and, for tf32x3, the tf32 rounding of what hi leaves (lo), each row's k tiles
    in the kernel's fragment order and zero past K (the GEMM multiplies that padding by A's zeros, so
    it must hold finite values). Made by prepare_planes."""

    def __init__(self, data, variant: str, k: int):
        _check_variant(variant)
        _check_array(data, "planes data", 3)
        want = planes_of(variant)
        if data.shape[0] != want:
            raise ValueError(f"planes data of variant {variant!r} must have {want} plane(s); got shape {data.shape}")
        if k % 4 or data.shape[2] != plane_row(k) or data.data.ptr % 16:
            raise ValueError(f"planes data for K = {k} must have K % 4 == 0, rows of plane_row(K) = "
                             f"{plane_row(k)} and be 16-byte aligned (shape {data.shape}, address {data.data.ptr:#x})")
        self.data, self.variant = data, variant
        self.n, self.k = int(data.shape[1]), int(k)


def prepare_planes(w, variant: str, *, transposed: bool = False, stream=None, out: Planes | None = None) -> Planes:
    """W [K, N] (or W^T [N, K] with transposed=True, e.g. wte for the LM head) -> Planes, on the GPU
    in one pass. K must be a multiple of 4 (the GEMM's 16-byte rows). ``out``: Planes of the same
    variant, N and K to write into (nothing is allocated: capturable in a CUDA graph)."""
    _check_variant(variant)
    _check_array(w, "w", 2)
    n, k = (w.shape[0], w.shape[1]) if transposed else (w.shape[1], w.shape[0])
    if k % 4:
        raise ValueError(f"w's K = {k} must be a multiple of 4 for the wgmma GEMM")
    planes = planes_of(variant)
    if out is None:
        out = Planes(cp.empty((planes, n, plane_row(k)), cp.float32), variant, k)
    elif not isinstance(out, Planes) or out.variant != variant or (out.n, out.k) != (n, k):
        raise ValueError(f"out must be Planes of variant {variant!r} for N = {n}, K = {k}")
    fn = kernel("gemm_wgmma", f"gemm_wg_split_planes_{'nk' if transposed else 'kn'}", build.gemm_wgmma_planes(variant))
    launch(fn, (_cdiv(n, 32 if transposed else build.GW_PLANES_N), _cdiv(k, 32), 1), (32, 8, 1),
           (w, out.data, _i32(k, "K"), _i32(n, "N"), np.int32(planes)), 0, stream)
    return out


WG_SPLIT_MIN_K = 1024  # split-K tiles only where each block still gets this much of K


def pick_wg_tile(variant: str, m: int, n: int, sms: int | None = None, *, k: int | None = None) -> WgTile:
    """The variant's wgmma tile with the least estimated time (one block per SM): whole waves of
    blocks, each bm x bn x K / splitk at the tile's speed. Split-K tiles are candidates only where K
    is given and K / splitk >= WG_SPLIT_MIN_K; their clusters must sit whole in one GPC, so a wave of
    them is counted as 7/8 of the SMs (a GPC's SM count need not be a multiple of the cluster's)."""
    sms = sm_count() if sms is None else sms
    tiles = [t for t in WG_TILES[variant] if t.splitk == 1 or (k is not None and k // t.splitk >= WG_SPLIT_MIN_K)]

    def cost(t: WgTile) -> float:
        wave = sms if t.splitk == 1 else sms - sms // 8
        return -(-(_cdiv(m, t.bm) * _cdiv(n, t.bn) * t.splitk) // wave) * t.bm * t.bn / t.splitk / t.speed

    return min(tiles, key=cost)


def gemm_planes(a, p: Planes, bias, out, *, epilogue="bias", residual=None, stream=None, tile=None):
    """out[M,N] = epi(a[M,K] @ W + bias[N]) on prepared planes (epilogue None: a @ W, no bias).
    ``tile`` (one of WG_TILES[variant]) overrides pick_wg_tile, for tuning."""
    if not isinstance(p, Planes):
        raise ValueError(f"p must be linear.Planes (see prepare_planes), got {type(p).__name__}")
    _check_array(a, "a", 2)
    m, k = a.shape
    if p.k != k:
        raise ValueError(f"the planes hold K = {p.k}, a has K = {k}")
    if a.data.ptr % 16:
        raise ValueError(f"a must be 16-byte aligned for the wgmma GEMM; got address {a.data.ptr:#x}")
    n = p.n
    _check_array(out, "out", 2)
    _check_shape(out, "out", (m, n))
    if epilogue is None:
        if bias is not None or residual is not None:
            raise ValueError("bias and residual need an epilogue ('bias', 'bias_gelu' or 'bias_residual')")
        suffix = "nt"
    else:
        _check_array(bias, "bias", 1)
        _check_shape(bias, "bias", (n,))
        _check_epilogue(epilogue, residual, (m, n))
        suffix = epilogue
    _check_out(out, "out", {"a": a, "planes": p.data, "bias": bias}, residual)
    if not wgmma_available():
        raise ValueError(f"the wgmma GEMM needs a compute capability 9.0 GPU; this one is "
                         f"{cp.cuda.Device().compute_capability}")
    if tile is None:
        tile = pick_wg_tile(p.variant, m, n, k=k)
    elif tile not in WG_TILES[p.variant]:
        raise ValueError(f"tile must be one of linear.WG_TILES[{p.variant!r}], got {tile!r}")
    fn = kernel("gemm_wgmma", f"gemm_wg_{p.variant}_{suffix}", build.gemm_wgmma(tile, p.variant))
    grid = (_cdiv(m, tile.bm), _cdiv(n, tile.bn), tile.splitk)
    if grid[1] > 65535:
        raise ValueError(f"N = {n} needs {grid[1]} column tiles, more than a grid's 65535")
    args = (a, p.data, _NULL if bias is None else bias, _NULL if residual is None else residual, out,
            _i32(m, "M"), _i32(n, "N"), _i32(k, "K"))
    launch(fn, grid, (tile.threads, 1, 1), args, wgmma_smem_bytes(p.variant, tile), stream)


def _launch_gemm(variant, suffix, a, b, bias, residual, out, m, n, k, stream, tile):
    args = (a, b, _NULL if bias is None else bias, _NULL if residual is None else residual, out,
            _i32(m, "M"), _i32(n, "N"), _i32(k, "K"))
    if tile is None:
        tile = pick_tile(m, n)
    elif tile not in TILES:
        raise ValueError(f"tile must be one of linear.TILES, got {tile!r}")
    fn = kernel("gemm", f"gemm_{variant}_{suffix}", build.gemm(tile, variant))
    grid = (-(-m // tile.bm), -(-n // tile.bn), 1)
    if grid[1] > 65535:
        raise ValueError(f"N = {n} needs {grid[1]} column tiles, more than a grid's 65535")
    launch(fn, grid, (tile.threads, 1, 1), args, tile.smem_bytes, stream)


def gemm(a, b, bias, out, *, epilogue="bias", residual=None, variant="tf32x3", stream=None, tile=None):
    """out[M,N] = epi(a[M,K] @ b[K,N] + bias[N]); epi: bias | bias_gelu | bias_residual
    (out = residual + a @ b + bias; residual may be ``out`` itself). ``tile`` (one of TILES)
    overrides pick_tile for the tensor-core variants, for tuning."""
    _check_variant(variant)
    _check_array(a, "a", 2)
    _check_array(b, "b", 2)
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"b must have {k} rows (a is {tuple(a.shape)}), got shape {tuple(b.shape)}")
    n = b.shape[1]
    _check_array(bias, "bias", 1)
    _check_shape(bias, "bias", (n,))
    _check_array(out, "out", 2)
    _check_shape(out, "out", (m, n))
    _check_epilogue(epilogue, residual, (m, n))
    _check_out(out, "out", {"a": a, "b": b, "bias": bias}, residual)
    _launch_gemm(variant, epilogue, a, b, bias, residual, out, m, n, k, stream, tile)


def gemm_nt(a, b, out, *, variant="tf32x3", stream=None, tile=None):
    """out[M,N] = a[M,K] @ b[N,K]^T (the tied LM head: b = wte [V, D]); ``tile`` as in gemm."""
    _check_variant(variant)
    _check_array(a, "a", 2)
    _check_array(b, "b", 2)
    m, k = a.shape
    if b.shape[1] != k:
        raise ValueError(f"b must have {k} columns (a is {tuple(a.shape)}), got shape {tuple(b.shape)}")
    n = b.shape[0]
    _check_array(out, "out", 2)
    _check_shape(out, "out", (m, n))
    _check_out(out, "out", {"a": a, "b": b})
    _launch_gemm(variant, "nt", a, b, None, None, out, m, n, k, stream, tile)


# ---------------------------------------------------------------------------------------------
# GEMV.

_GEMV_THREADS, _GEMV_RPP, _GEMV_UNROLL, _GEMV_TPR = build.GEMV_THREADS, build.GEMV_RPP, build.GEMV_UNROLL, build.GEMV_TPR
_GEMV_NT_THREADS = build.GEMV_NT_THREADS
_GEMV_BLOCKS_PER_SM = 4  # split-K target: about this many blocks per SM
_workspaces: dict = {}


def _cpt(w) -> int:
    """Weight columns per 16-byte load: 4 float32 or 8 bf16."""
    return 4 if w.dtype == np.float32 else 8


def _gemv_workspace(stream_ptr: int):
    """(ws, counters) for split-K GEMVs on one stream, allocated once at their largest size.
    With split > 1 only when strips < target, splits * N <= 2 * target * COLS (COLS <= 64)."""
    key = (cp.cuda.Device().id, stream_ptr)
    got = _workspaces.get(key)
    if got is None:
        target = _GEMV_BLOCKS_PER_SM * sm_count()
        ws = cp.empty(2 * target * 64 * GEMV_MAX_M, dtype=cp.float32)
        counters = cp.zeros(target, dtype=cp.uint32)
        got = _workspaces[key] = (ws, counters)
    return got


def gemv_plan(n: int, k: int, cols: int, sms: int | None = None) -> tuple[int, int, int]:
    """(strips, splits, k_per_split) for an N-wide, K-deep GEMV with ``cols`` columns per strip."""
    sms = sm_count() if sms is None else sms
    strips = -(-n // cols)
    target = _GEMV_BLOCKS_PER_SM * sms
    step = _GEMV_RPP * _GEMV_UNROLL  # rows one pass of a block loads
    want = 1 if strips >= target else min(_cdiv(target, strips), _cdiv(k, step))
    k_per_split = _cdiv(_cdiv(k, want), step) * step
    return strips, _cdiv(k, k_per_split), k_per_split


def _check_weights(w, name: str, shape_desc: str):
    _check_array(w, name, 2, (np.float32, np.uint16))
    if w.data.ptr % 16:
        raise ValueError(f"{name} must be 16-byte aligned ({shape_desc}); got address {w.data.ptr:#x}")


def _check_rows(x, name: str):
    _check_array(x, name, 2)
    if x.shape[0] > GEMV_MAX_M:
        raise ValueError(f"{name} has {x.shape[0]} rows; the GEMV kernels take at most {GEMV_MAX_M}")


def gemv(x, w, bias, out, *, epilogue="bias", residual=None, stream=None):
    """out[M,N] = epi(x[M,K] @ w[K,N] + bias[N]) for M <= GEMV_MAX_M; w float32, or uint16
    holding bf16 bits (see to_bf16_bits). N must be a multiple of 4 (float32) or 8 (bf16)."""
    _check_rows(x, "x")
    _check_weights(w, "w", "[K, N]")
    m, k = x.shape
    if w.shape[0] != k:
        raise ValueError(f"w must have {k} rows (x is {tuple(x.shape)}), got shape {tuple(w.shape)}")
    n = w.shape[1]
    cpt = _cpt(w)
    if n % cpt:
        raise ValueError(f"w's width N = {n} must be a multiple of {cpt} for {w.dtype} GEMV (16-byte rows)")
    _check_array(bias, "bias", 1)
    _check_shape(bias, "bias", (n,))
    _check_array(out, "out", 2)
    _check_shape(out, "out", (m, n))
    _check_epilogue(epilogue, residual, (m, n))
    _check_out(out, "out", {"x": x, "w": w, "bias": bias}, residual)

    strips, splits, k_per_split = gemv_plan(n, k, _GEMV_TPR * cpt)
    stream_obj = stream if stream is not None else cp.cuda.get_current_stream()
    ws, counters = _gemv_workspace(stream_obj.ptr)
    if splits > 1 and (splits * m * n > ws.size or strips > counters.size):
        raise AssertionError(f"GEMV workspace too small for N={n}, K={k}, splits={splits}")
    name = f"gemv_{'f32' if w.dtype == np.float32 else 'bf16'}_{epilogue}"
    args = (x, w, bias, _NULL if residual is None else residual, out, ws, counters,
            _i32(m, "M"), _i32(n, "N"), _i32(k, "K"), _i32(k_per_split, "k_per_split"))
    launch(kernel("gemv", name, build.gemv_kmajor()), (strips, splits, 1), (_GEMV_THREADS, 1, 1), args, 0,
           stream)  # the k-major kernels' build alone


def gemv_nt(x, w, out, *, bias=None, epilogue=None, residual=None, ln=None, kv=None, argmax=None, stream=None):
    """out[M,N] = epi(x'[M,K] @ w[N,K]^T (+ bias[N])) for M <= GEMV_MAX_M; w float32 or bf16 bits
    holding W transposed (one contiguous row per output); K a multiple of 4 (float32) or 8 (bf16).

    epilogue None (no bias), "bias", "bias_gelu" or "bias_residual" (out = residual + x w^T + bias;
    residual may be ``out``). ``ln = (g, b, eps)``: x' = LayerNorm(x; g, b, eps), computed by the
    kernel itself (any epilogue but bias_residual); else x' = x. These are the decode step's
    products: ln_1 + QKV, ln_2 + FC with GELU, the projections with the residual add, and
    ln_f + the tied LM head over wte.

    ``kv = (seq, pos, k_cache, v_cache, batch_stride)`` (with ln and epilogue "bias", N = 3D):
    also writes out[m, D:2D] to k_cache + seq[m] * batch_stride + pos[m] * D and out[m, 2D:3D]
    to v_cache at the same offset (seq, pos int32 [M] on the device, in range: the caller's
    contract, as kvcache_store's). The kernel takes part in programmatic dependent launch: it reads
    w, bias and the LayerNorm's g and b before the kernels ahead of it on the stream have finished,
    so those must not be written by any kernel that may still be running (they are weights); x,
    residual and kv are read after they finish.

    ``argmax = (ids, advance, host_out)`` (with ln, no epilogue and M = 1: ln_f + the LM head of a
    batch-1 decode step): also ids[0] = the first index of the largest output, as
    ops.argmax_rows gives it from out (ids int32 [1] on the device); ``advance`` (int32 [4, 1]:
    a decode step's ids, seq, pos, lengths; or None) moved on to the next greedy step, and
    ``host_out`` (ops.MappedInts of 1, or None) given the id too, as argmax_rows does."""
    _check_rows(x, "x")
    _check_weights(w, "w", "[N, K]")
    m, k = x.shape
    if w.shape[1] != k:
        raise ValueError(f"w must have {k} columns (x is {tuple(x.shape)}), got shape {tuple(w.shape)}")
    cpt = _cpt(w)
    if k % cpt:
        raise ValueError(f"K = {k} must be a multiple of {cpt} for {w.dtype} weights (16-byte rows)")
    if x.data.ptr % 16:
        raise ValueError(f"x must be 16-byte aligned; got address {x.data.ptr:#x}")
    n = w.shape[0]
    _check_array(out, "out", 2)
    _check_shape(out, "out", (m, n))
    if epilogue is None:
        if bias is not None or residual is not None:
            raise ValueError("bias and residual need an epilogue ('bias', 'bias_gelu' or 'bias_residual')")
    else:
        _check_epilogue(epilogue, residual, (m, n))
        _check_array(bias, "bias", 1)
        _check_shape(bias, "bias", (n,))
    g = b = None
    eps = 0.0
    if ln is not None:
        if epilogue == "bias_residual":
            raise ValueError("ln is not available with epilogue 'bias_residual'")
        g, b, eps = _check_ln(ln, k)
    caches = {}
    kv_args = ()
    if kv is not None:
        if ln is None or epilogue != "bias":
            raise ValueError("kv (the K / V cache store) needs ln and epilogue 'bias' (the ln_1 + QKV product)")
        if n % 3:
            raise ValueError(f"kv needs N = 3 * D; got N = {n}")
        seq, pos, k_cache, v_cache, batch_stride = kv
        for name, arr in (("kv seq", seq), ("kv pos", pos)):
            _check_array(arr, name, 1, (np.int32,))
            _check_shape(arr, name, (m,))
        for name, arr in (("k_cache", k_cache), ("v_cache", v_cache)):
            _check_array(arr, name, 2)
            if arr.shape[1] != n // 3:
                raise ValueError(f"{name} must have rows of D = {n // 3}; got shape {tuple(arr.shape)}")
        rows_d = k_cache.shape[0] * (n // 3)
        if not 0 <= batch_stride < 2**62 or (m > 1 and batch_stride < rows_d):
            raise ValueError(f"kv batch_stride = {batch_stride} must be at least k_cache rows x D = {rows_d}"
                             " (the sequences' caches may not overlap)")
        inputs = {"x": x, "w": w, "bias": bias, "ln gain": g, "ln bias": b}
        _check_out(k_cache, "k_cache", {**inputs, "v_cache": v_cache})  # the caches are outputs too
        _check_out(v_cache, "v_cache", inputs)
        caches = {"k_cache": k_cache, "v_cache": v_cache}
        kv_args = (seq, pos, k_cache, v_cache, np.int64(batch_stride))
    _check_out(out, "out", {"x": x, "w": w, "bias": bias, "ln gain": g, "ln bias": b, **caches}, residual)
    if argmax is not None and (ln is None or epilogue is not None):
        raise ValueError("argmax needs ln and no epilogue (ln_f + the LM head)")
    if argmax is not None and m != 1:
        raise ValueError(f"argmax is taken by the one-token build only (M = 1); got M = {m}")

    mp = _gemv_nt_tokens(m)  # the kernel build: 1, 2, 4 or 8 tokens
    name = (f"gemv_{'f32' if w.dtype == np.float32 else 'bf16'}_nt" + ("_ln" if ln is not None else "")
            + (f"_{epilogue}" if epilogue else "") + ("_kv" if kv is not None else "")
            + f"_m{mp}")
    bf16 = w.dtype != np.float32
    settings = build.gemv_nt_settings(n, k, mp, bf16, ln is not None)
    wpr, grid = gemv_nt_plan(n, k, cpt, mp, bf16, ln is not None and epilogue is None, settings=settings)
    args = (x, w, _NULL if bias is None else bias, _NULL if residual is None else residual, out,
            _NULL if g is None else g, _NULL if b is None else b,
            _i32(m, "M"), _i32(n, "N"), _i32(k, "K"), np.float32(eps), np.int32(wpr)) + kv_args
    if ln is not None and epilogue is None:  # the LM head's build: its argmax, or NULLs for none
        args += _gemv_argmax_args(argmax, m, grid, stream)
    # the normalized rows, then g and b (gemv_ln_rows)
    smem = (m + 2) * k * 4 if ln is not None else 0
    # the build of mp's kernels alone (GEMV_BUILD_MP: a first run compiles only the token counts it uses)
    launch(kernel("gemv", name, build.gemv_nt(n, k, mp, bf16, ln is not None)), (grid, 1, 1), (_GEMV_NT_THREADS, 1, 1), args,
           smem, stream, programmatic=True)


def _check_ln(ln, k: int) -> tuple:
    """(g, b, eps) of a fused LayerNorm's ``ln``, g and b float32 [k], contiguous, 16-byte aligned."""
    g, b, eps = ln
    for name, arr in (("ln gain", g), ("ln bias", b)):
        _check_array(arr, name, 1)
        _check_shape(arr, name, (k,))
        if arr.data.ptr % 16:
            raise ValueError(f"{name} must be 16-byte aligned; got address {arr.data.ptr:#x}")
    return g, b, eps


def _gemv_argmax_args(argmax, m: int, grid: int, stream) -> tuple:
    """The six GemvArgmax arguments of gemv_*_nt_ln (kernels/gemv.cu): NULLs without an argmax."""
    if argmax is None:
        return (_NULL,) * 6
    from .ops import argmax_workspace, check_argmax_outputs

    if not isinstance(argmax, tuple) or len(argmax) != 3:
        raise ValueError("argmax must be a tuple (ids, advance, host_out)")
    ids, advance, host_out = argmax
    check_argmax_outputs(ids, advance, host_out, m, names=("argmax ids", "argmax advance", "argmax host_out"))
    ws = argmax_workspace(m, grid, stream)  # partials [M, grid]; counters[0] the ticket (M = 1)
    return (ids, ws.part_v, ws.part_i, ws.counters, _NULL if advance is None else advance,
            np.uint64(0 if host_out is None else host_out.device_ptr))


def _gemv_nt_tokens(m: int) -> int:
    """The nt kernel build for m rows: its token count padded to 1, 2, 4 or 8 (kernels/gemv.cu)."""
    return 1 if m == 1 else 2 if m == 2 else 4 if m <= 4 else 8


def gemv_nt_plan(n: int, k: int, cpt: int, mp: int = 1, bf16: bool = False, lm_head: bool = False,
                 sms: int | None = None, settings: dict | None = None) -> tuple[int, int]:
    """(wpr, grid) of an nt GEMV build (mp tokens, bf16 weights or not, the LM head's or not; its
    settings, by default build.gemv_nt_settings'): the warps per row group (they split K) and the blocks.
    The fewest warps per row group that still give every SM two blocks, while each warp keeps at
    least one 16-byte chunk per lane of K; at one token, while the grid has fewer blocks than SMs, also
    where each warp keeps only half a chunk per lane (lanes 24-31 of gpt2's bf16 attention projection,
    768 x 768: 96 blocks, not 48, +3.7% at bf16 b1, docs/PERFORMANCE.md version 31). Blocks beyond what
    stays resident loop."""
    sms = sm_count() if sms is None else sms
    settings = build.gemv_nt_settings(n, k, mp, bf16) if settings is None else settings
    rows, per_sm = build.gemv_nt_build(mp, bf16, lm_head, settings)
    warps = _GEMV_NT_THREADS // 32

    def blocks(w: int) -> int:
        return -(-n // (rows * warps // w))

    wpr = 1
    while wpr < warps and blocks(wpr) < 2 * sms and (
            k // (2 * wpr) >= 32 * cpt or (mp == 1 and blocks(wpr) < sms and k // (2 * wpr) >= 16 * cpt)):
        wpr *= 2
    return wpr, min(blocks(wpr), per_sm * sms)


# ---------------------------------------------------------------------------------------------
# The choice.


def _gemv_fits(w) -> bool:
    return w.ndim == 2 and w.shape[1] % _cpt(w) == 0 and w.data.ptr % 16 == 0


def linear(a, b, bias, out, *, epilogue="bias", residual=None, variant="tf32x3", stream=None, planes=None):
    """out = epi(a @ b + bias): GEMV for M <= GEMV_MAX_M (and always for bf16 weights, in
    chunks of GEMV_MAX_M rows, each reading the weights once), GEMM otherwise: on ``planes``
    (b prepared by prepare_planes for this variant) where given and a is 16-byte aligned, else
    gemm.cu on b."""
    _check_variant(variant)
    _check_array(a, "a", 2)
    m = a.shape[0]
    if planes is not None and m > GEMV_MAX_M and a.data.ptr % 16 == 0:
        if planes.variant != variant:
            raise ValueError(f"planes were prepared for variant {planes.variant!r}, not {variant!r}")
        gemm_planes(a, planes, bias, out, epilogue=epilogue, residual=residual, stream=stream)
        return
    if isinstance(b, cp.ndarray) and b.dtype == np.uint16:
        for r0 in range(0, m, GEMV_MAX_M):
            r1 = min(m, r0 + GEMV_MAX_M)
            res = None if residual is None else residual[r0:r1]
            gemv(a[r0:r1], b, bias, out[r0:r1], epilogue=epilogue, residual=res, stream=stream)
        return
    if m <= GEMV_MAX_M and isinstance(b, cp.ndarray) and _gemv_fits(b):
        gemv(a, b, bias, out, epilogue=epilogue, residual=residual, stream=stream)
    else:
        gemm(a, b, bias, out, epilogue=epilogue, residual=residual, variant=variant, stream=stream)


def linear_nt(a, b, out, *, variant="tf32x3", stream=None):
    """out = a @ b^T (the LM head): GEMV for M <= GEMV_MAX_M (and always for bf16 b), else GEMM."""
    _check_variant(variant)
    _check_array(a, "a", 2)
    m = a.shape[0]
    if isinstance(b, cp.ndarray) and b.dtype == np.uint16:
        for r0 in range(0, m, GEMV_MAX_M):
            r1 = min(m, r0 + GEMV_MAX_M)
            gemv_nt(a[r0:r1], b, out[r0:r1], stream=stream)
        return
    fits = (isinstance(b, cp.ndarray) and b.ndim == 2 and b.shape[1] % 4 == 0 and b.data.ptr % 16 == 0
            and a.data.ptr % 16 == 0)
    if m <= GEMV_MAX_M and fits:
        gemv_nt(a, b, out, stream=stream)
    else:
        gemm_nt(a, b, out, variant=variant, stream=stream)


# ---------------------------------------------------------------------------------------------
# bf16 weight storage.


def to_bf16_bits(arr):
    """float32 -> uint16 bf16 bit patterns, rounding to nearest even (NaN stays NaN)."""
    a = cp.ascontiguousarray(cp.asarray(arr, dtype=cp.float32))
    u = a.view(cp.uint32)
    lsb = (u >> cp.uint32(16)) & cp.uint32(1)
    rounded = (u + cp.uint32(0x7FFF) + lsb) >> cp.uint32(16)
    nan = (u & cp.uint32(0x7FFFFFFF)) > cp.uint32(0x7F800000)
    quiet = (u >> cp.uint32(16)) | cp.uint32(0x0040)
    return cp.where(nan, quiet, rounded).astype(cp.uint16)


def from_bf16_bits(bits):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    b = cp.ascontiguousarray(bits)
    if b.dtype != np.uint16:
        raise ValueError(f"bits must be uint16, got {b.dtype}")
    return (b.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)

"""Launch wrappers of kernels/attention.cu: flash-style prefill and split-key decode over the KV cache.

Both take CuPy arrays whose ``.data.ptr`` is row 0 (key 0) of the operand plus an explicit
row stride in elements, so views into a fused QKV buffer or a KV cache pass without copies.
Every argument is checked (dtype, sizes, strides, alignment, the span the kernel will read
lying inside the array's allocation, no overlap of the output with an input) and a bad one
raises ValueError / TypeError naming it, before anything is launched.

    attention_prefill(q, k, v, out, n_head=, s_q=, s_kv=, causal=, q_start=, q_stride=, kv_stride=, variant=)
        out [s_q, D] = softmax(q k^T / 8 (+ causal mask)) v per head; variant "f32" (FFMA),
        "tf32x3f" (tensor cores, 3-pass split, each 8-wide tensor-core step summed from zero and
        added in fp32: fp32-level accuracy) or "tf32" (1 pass). The tensor-core variants split the
        keys of long query tiles across blocks where prefill_split_plan has it measured faster;
        the partials live in a per-stream scratch.
    attention_decode(q, k_cache, v_cache, lengths, out, n_head=, q_stride=, cache_batch_stride=, max_len=,
                     slots=, cache_rows=)
        out [B, D]: one query per row over lengths[b] cached keys (of cache row slots[b], or b); the keys
        are split across the blocks of a thread block cluster (sm_90), combined deterministically in its
        rank 0.
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np

from ...config import HEAD_DIM
from . import build
from .linear import wgmma_available
from .modules import kernel, launch, sm_count

TILE = 64  # query and key tile of the prefill kernels
LDS = build.ATTN_LDS  # shared row stride (floats) of a tile
# variant -> (kernel name, threads per block, dynamic shared memory in bytes)
PREFILL_VARIANTS = {
    "f32": ("attention_prefill_f32", 256, 3 * TILE * LDS * 4),
    "tf32x3f": ("attention_prefill_tf32x3f", 128, 4 * TILE * LDS * 4 + 4 * 8 * 2 * 32 * 16),
    "tf32": ("attention_prefill_tf32", 128, 4 * TILE * LDS * 4),
}
# split-key prefill (attention_prefill_split_*), the kernel of each variant
SPLIT_KERNELS = {"tf32x3f": "attention_prefill_split_tf32x3f", "tf32": "attention_prefill_split_tf32"}
DECODE_THREADS = build.ATTN_DEC_THREADS
DECODE_MAX_CLUSTER = build.ATTN_DEC_MAX_CLUSTER  # blocks (one cluster) per (row, head) on sm_90, at most
DECODE_BLOCKS_PER_SM = 3  # fewer blocks per (row, head) where B * H * 8 would exceed this many per multiprocessor
INT32_MAX = 2**31 - 1


# -- argument checks ------------------------------------------------------------------------

def _array(name: str, a, dtype=cp.float32) -> cp.ndarray:
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{name} must be a CuPy array; got {type(a).__name__}")
    if a.dtype != dtype:
        raise ValueError(f"{name} must be {np.dtype(dtype).name}; got {a.dtype}")
    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name} is on device {a.device.id}; the current device is {cp.cuda.Device().id}")
    return a


def _int(name: str, x, lo: int, hi: int = INT32_MAX) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int; got {type(x).__name__}")
    if not lo <= int(x) <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]; got {x}")
    return int(x)


def _width(n_head) -> int:
    """D = 64 * n_head."""
    return HEAD_DIM * _int("n_head", n_head, 1, 4096)


def _stride(name: str, stride, d: int) -> int:
    s = _int(name, stride, d)
    if s % 4:
        raise ValueError(f"{name} must be a multiple of 4 elements (16-byte rows); got {s}")
    return s


def _span(name: str, a: cp.ndarray, n_floats: int) -> tuple[int, int]:
    """Check that ``n_floats`` float32 from a.data.ptr lie inside a's allocation; -> (start, end) bytes."""
    ptr = a.data.ptr
    if ptr % 16:
        raise ValueError(f"{name} must be 16-byte aligned (its data pointer is {ptr:#x})")
    end = ptr + 4 * n_floats
    mem = a.data.mem
    # addressable: the allocation behind a, and in any case the bytes a's own shape and strides reach
    own = ptr + (a.itemsize + sum((n - 1) * st for n, st in zip(a.shape, a.strides) if st > 0) if a.size else 0)
    limit = max(mem.ptr + mem.size, own)
    if end > limit:
        raise ValueError(
            f"{name} is too small: the kernel reads {n_floats} floats from its first element, "
            f"its allocation holds {(limit - ptr) // 4}")
    return ptr, end


def _no_overlap(out_name: str, out_span, others) -> None:
    for name, span in others:
        if out_span[0] < span[1] and span[0] < out_span[1]:
            raise ValueError(f"{out_name} overlaps {name}: the output must be a separate buffer")


def _out(name: str, out, rows: int, d: int) -> tuple[int, int]:
    _array(name, out)
    if out.shape != (rows, d) or not out.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous float32 array of shape ({rows}, {d}); "
                         f"got shape {out.shape}{'' if out.flags.c_contiguous else ', not contiguous'}")
    return _span(name, out, rows * d)


# -- prefill ----------------------------------------------------------------------------------

def attention_prefill(q, k, v, out, *, n_head: int, s_q: int, s_kv: int, causal: bool, q_start: int = 0,
                      q_stride: int, kv_stride: int, variant: str = "f32", stream=None,
                      chunk: int | None = None, impl: str = "auto") -> None:
    """out [s_q, D] = multi-head attention of one sequence (D = 64 * n_head).

    q: row i (query at position q_start + i) at q.data.ptr + i * q_stride (floats); k, v: key j at
    ptr + j * kv_stride. causal: query i sees keys 0 .. q_start + i; otherwise all s_kv keys.
    chunk (tensor-core variants, for tuning): key tiles per block of the split-key kernel, 0 for
    the plain kernel; None: the plan's choice (prefill_split_plan, wg_split_plan).
    impl: "auto" runs the tensor-core variants on attention_wgmma.cu where the device has wgmma
    (compute capability 9.0), else on attention.cu's mma.sync kernels; "wgmma" / "mma" force one.
    """
    if variant not in PREFILL_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(PREFILL_VARIANTS)}; got {variant!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool; got {type(causal).__name__}")
    d = _width(n_head)
    s_q = _int("s_q", s_q, 1)
    s_kv = _int("s_kv", s_kv, 1)
    q_start = _int("q_start", q_start, 0, INT32_MAX - s_q)
    q_stride = _stride("q_stride", q_stride, d)
    kv_stride = _stride("kv_stride", kv_stride, d)
    spans = [
        ("q", _span("q", _array("q", q), (s_q - 1) * q_stride + d)),
        ("k", _span("k", _array("k", k), (s_kv - 1) * kv_stride + d)),
        ("v", _span("v", _array("v", v), (s_kv - 1) * kv_stride + d)),
    ]
    _no_overlap("out", _out("out", out, s_q, d), spans)

    if impl not in ("auto", "wgmma", "mma"):
        raise ValueError(f"impl must be 'auto', 'wgmma' or 'mma'; got {impl!r}")
    use_wg = variant in WG_KERNELS and impl != "mma" and wgmma_available()
    if impl == "wgmma" and not use_wg:
        raise ValueError(f"the wgmma attention needs variant 'tf32x3f' or 'tf32' on a compute capability 9.0 GPU; "
                         f"got variant {variant!r} on compute capability {cp.cuda.Device().compute_capability}")
    if use_wg:
        _prefill_wgmma(q, k, v, out, n_head, d, s_q, s_kv, causal, q_start, q_stride, kv_stride, variant, stream,
                       chunk)
        return

    name, threads, smem = PREFILL_VARIANTS[variant]
    args = (q, np.int32(q_stride), k, v, np.int32(kv_stride), out,
            np.int32(d), np.int32(s_q), np.int32(s_kv), np.int32(q_start), np.int32(bool(causal)))
    grid = (-(-s_q // TILE), n_head, 1)
    if variant not in SPLIT_KERNELS:
        if chunk:
            raise ValueError(f"variant {variant!r} has no split-key kernel (chunk must be None or 0)")
        chunk, splits = 0, 1
    elif chunk is None:
        chunk, splits = prefill_split_plan(s_q, s_kv, q_start, bool(causal), variant)
    else:
        chunk = _int("chunk", chunk, 0)
        splits = _splits(_tiles_needed(s_q, s_kv, q_start, bool(causal)), chunk) if chunk else 1
        if splits > 65535:
            raise ValueError(f"chunk = {chunk} gives {splits} splits, more than a grid's 65535")
    if chunk:
        name = SPLIT_KERNELS[variant]
        scratch = _split_scratch(grid[0] * n_head * splits, grid[0] * n_head, stream)
        args += (np.int32(chunk), scratch.part_o, scratch.part_ml, scratch.counters)
        grid = (grid[0], n_head, splits)
    launch(kernel("attention", name, build.attention()), grid, (threads,), args, shared_mem=smem, stream=stream)


def _tiles_needed(s_q: int, s_kv: int, q_start: int, causal: bool, rows: int = TILE) -> list[int]:
    """Key tiles each block of ``rows`` queries visits (attn_keys_needed in attention_split.cuh)."""
    out = []
    for q0 in range(0, s_q, rows):
        keys = min(s_kv, q_start + min(q0 + rows, s_q)) if causal else s_kv
        out.append(-(-keys // TILE))
    return out


def _splits(tiles: list[int], chunk: int) -> int:
    """The most splits of any query tile (grid.z) at ``chunk`` key tiles per block."""
    return max(-(-n // chunk) for n in tiles)


@functools.lru_cache(maxsize=256)
def prefill_split_plan(s_q: int, s_kv: int, q_start: int, causal: bool, variant: str) -> tuple[int, int]:
    """(chunk, splits) of the split-key prefill: at most ``chunk`` key tiles per block (a query tile
    of n key tiles in ceil(n / chunk) splits of balanced length), ``splits`` the most of any tile
    (grid.z); (0, 1): the plain kernel. The longest query tile in at most four splits of at least 4
    key tiles, where its key tiles number 8 to 32 (S = 512 .. 2048: what was measured; tf32 only for
    causal, its non-causal 2048 was slower split). dev/tune_attention_split.py at S = 1024,
    12 heads, tf32x3f: causal 139 -> 86 us, non-causal 140 -> 123 us."""
    tiles = _tiles_needed(s_q, s_kv, q_start, causal)
    longest = max(tiles)
    if not 8 <= longest <= 32 or (variant == "tf32" and not causal):
        return 0, 1
    chunk = max(4, -(-longest // 4))
    return chunk, _splits(tiles, chunk)


# -- prefill on wgmma (kernels/attention_wgmma.cu, sm_90a) -----------------------------------------

WG_KERNELS = {"tf32x3f": ("attention_wg_tf32x3", 3), "tf32": ("attention_wg_tf32", 1)}
WG_THREADS = build.ATTN_WG_THREADS  # two consumer warpgroups and the producer warp
WG_ROWS = 128  # queries per block
WG_TILE_FLOATS = build.ATTN_WG_TILE_FLOATS  # one key tile's K / V^T planes


def wg_smem_bytes(passes: int) -> int:
    """ATTN_WG_SMEM_BYTES of attention_wgmma.cu: Q planes of both warpgroups and the ring of stages."""
    planes = 2 if passes == 3 else 1
    stages = 2 if planes == 2 else 4
    block = 8192
    return 1024 + 2 * planes * 2 * block + stages * planes * 4 * block + 16 * stages


@functools.lru_cache(maxsize=256)
def wg_split_plan(s_q: int, s_kv: int, q_start: int, causal: bool, n_head: int, n_sm: int) -> tuple[int, int]:
    """(chunk, splits) of the wgmma prefill: the chunk (key tiles per block) whose blocks, handed in
    launch order to whichever SM frees first (one block per SM), finish soonest; a block costs its
    key tiles plus one tile's worth for its start and, when split, one for its partial and combine.
    (0, 1): no split."""
    tiles = _tiles_needed(s_q, s_kv, q_start, causal, WG_ROWS)
    best = None
    for chunk in sorted({0, *range(1, max(tiles) + 1)}):
        splits = _splits(tiles, chunk) if chunk else 1
        blocks = []  # launch order: x (heavy blocks first) fastest, then heads, then splits
        for z in range(splits):
            for _ in range(n_head):
                for n in reversed(tiles):
                    ns = -(-n // chunk) if chunk else 1
                    if z < ns:
                        blocks.append((z + 1) * n // ns - z * n // ns + 1 + (ns > 1))
        free = [0.0] * min(n_sm, len(blocks))
        for cost in blocks:
            i = min(range(len(free)), key=free.__getitem__)
            free[i] += cost
        span = max(free)
        if best is None or span < best[0] - 1e-9:
            best = (span, chunk, splits)
    return best[1], best[2]


class _PlanesScratch:
    def __init__(self, floats: int):
        self.floats = floats
        self.data = cp.empty(floats, cp.float32)


_planes_scratches: dict[tuple, _PlanesScratch] = {}


def _planes_scratch(floats: int, stream=None) -> cp.ndarray:
    """attention_wg_kv_planes' output for launches on one stream (grown, never freed: a captured
    CUDA graph may still use an outgrown one)."""
    s = stream if stream is not None else cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, s.ptr)
    got = _planes_scratches.get(key)
    if got is None or got.floats < floats:
        if got is not None:
            _retired.append(got)
        with s:
            got = _planes_scratches[key] = _PlanesScratch(floats)
    return got.data


def _prefill_wgmma(q, k, v, out, n_head, d, s_q, s_kv, causal, q_start, q_stride, kv_stride, variant, stream,
                   chunk) -> None:
    name, passes = WG_KERNELS[variant]
    kt = -(-s_kv // TILE)
    planes = _planes_scratch(n_head * kt * WG_TILE_FLOATS, stream)
    launch(kernel("attention_wgmma", "attention_wg_kv_planes", build.attention_wgmma()), (kt, n_head), (256,),
           (k, v, np.int32(kv_stride), planes, np.int32(s_kv), np.int32(passes)), stream=stream)
    blocks_x = -(-s_q // WG_ROWS)
    if chunk is None:
        chunk, splits = wg_split_plan(s_q, s_kv, q_start, bool(causal), n_head, sm_count())
    else:
        chunk = _int("chunk", chunk, 0)
        splits = _splits(_tiles_needed(s_q, s_kv, q_start, bool(causal), WG_ROWS), chunk) if chunk else 1
        if splits > 65535:
            raise ValueError(f"chunk = {chunk} gives {splits} splits, more than a grid's 65535")
    scratch = _split_scratch(2 * blocks_x * n_head * splits, 2 * blocks_x * n_head, stream) if chunk else None
    args = (q, np.int32(q_stride), planes, out, np.int32(d), np.int32(s_q), np.int32(s_kv), np.int32(q_start),
            np.int32(bool(causal)), np.int32(chunk),
            *((scratch.part_o, scratch.part_ml, scratch.counters) if scratch else (planes, planes, planes)))
    launch(kernel("attention_wgmma", name, build.attention_wgmma()), (blocks_x, n_head, splits), (WG_THREADS,), args,
           shared_mem=wg_smem_bytes(passes), stream=stream)


class _SplitScratch:
    def __init__(self, slots: int, tiles: int):
        self.slots, self.tiles = slots, tiles
        self.part_o = cp.empty(slots * TILE * HEAD_DIM, cp.float32)
        self.part_ml = cp.empty(slots * TILE * 2, cp.float32)
        self.counters = cp.zeros(tiles, cp.int32)  # the kernels leave them zero


_split_scratches: dict[tuple, _SplitScratch] = {}
_retired: list = []  # outgrown scratch stays allocated: a captured CUDA graph may still use it


def _split_scratch(slots: int, tiles: int, stream=None) -> _SplitScratch:
    """The split-key prefill's partials and tickets for launches on one stream (grown, never freed)."""
    s = stream if stream is not None else cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, s.ptr)
    got = _split_scratches.get(key)
    if got is None or got.slots < slots or got.tiles < tiles:
        if got is not None:
            _retired.append(got)
        with s:  # the tickets are zeroed on the stream the kernels run on
            got = _split_scratches[key] = _SplitScratch(max(slots, got.slots if got else 0),
                                                        max(tiles, got.tiles if got else 0))
    return got


# -- packed prefill of several cache rows (attention_prefill_varlen_*) -----------------------------

VARLEN_KERNELS = {"tf32x3f": "attention_prefill_varlen_tf32x3f", "tf32": "attention_prefill_varlen_tf32"}
VARLEN_FIELDS = build.ATTN_VARLEN_FIELDS  # ints per entry of the tile table (packing.varlen_tiles builds it)


def attention_prefill_varlen(q, k_cache, v_cache, out, tiles, *, n_head: int, q_stride: int,
                             cache_batch_stride: int, cache_rows: int, max_keys: int, variant: str = "tf32x3f",
                             stream=None) -> None:
    """out [T, D] = causal attention of packed segments over their cache rows (D = 64 * n_head).

    q: packed row i at q.data.ptr + i * q_stride (floats), T = the segments' tokens together; k_cache,
    v_cache: key p of cache row r at ptr + r * cache_batch_stride + p * D, the segments' own keys
    already stored; tiles: int32 [entries, VARLEN_FIELDS] on the device, packing.varlen_tiles(..., TILE) (read by
    the kernel as given: the host checks it when it builds it); cache_rows, max_keys: the cache's
    rows and the most keys of any segment (past + len), bounds on what the table may address.
    variant: "tf32x3f" (fp32-level accuracy) or "tf32"."""
    if variant not in VARLEN_KERNELS:
        raise ValueError(f"variant must be one of {', '.join(VARLEN_KERNELS)}; got {variant!r}")
    d = _width(n_head)
    _array("out", out)
    if out.ndim != 2 or out.shape[0] < 1:
        raise ValueError(f"out must be [T, {d}] with T >= 1; got shape {out.shape}")
    t = out.shape[0]
    out_span = _out("out", out, t, d)
    q_stride = _stride("q_stride", q_stride, d)
    cache_rows = _int("cache_rows", cache_rows, 1)
    max_keys = _int("max_keys", max_keys, 1)
    cbs = _int("cache_batch_stride", cache_batch_stride, 0, 2**62)
    if cbs % 4:
        raise ValueError(f"cache_batch_stride must be a multiple of 4 elements; got {cbs}")
    if cache_rows > 1 and cbs < max_keys * d:
        raise ValueError(f"cache_batch_stride {cbs} is smaller than max_keys * D = {max_keys * d}: rows would overlap")
    _array("tiles", tiles, cp.int32)
    if tiles.ndim != 2 or tiles.shape[1] != VARLEN_FIELDS or tiles.shape[0] < 1 or not tiles.flags.c_contiguous:
        raise ValueError(f"tiles must be a contiguous int32 array [entries >= 1, {VARLEN_FIELDS}]; got {tiles.shape}")
    if tiles.shape[0] > INT32_MAX:
        raise ValueError(f"tiles has {tiles.shape[0]} entries, more than a grid's x dimension")
    cache_floats = (cache_rows - 1) * cbs + max_keys * d
    spans = [
        ("q", _span("q", _array("q", q), (t - 1) * q_stride + d)),
        ("k_cache", _span("k_cache", _array("k_cache", k_cache), cache_floats)),
        ("v_cache", _span("v_cache", _array("v_cache", v_cache), cache_floats)),
    ]
    _no_overlap("out", out_span, spans)
    _, threads, smem = PREFILL_VARIANTS[variant]
    args = (q, np.int32(q_stride), k_cache, v_cache, np.int64(cbs), out, np.int32(d), tiles)
    launch(kernel("attention", VARLEN_KERNELS[variant], build.attention()), (tiles.shape[0], n_head, 1), (threads,),
           args, shared_mem=smem, stream=stream)


# -- decode -----------------------------------------------------------------------------------

def decode_ranks(batch: int, n_head: int) -> int:
    """Blocks per (row, head) of attention_decode_f32 (its cluster size, compiled in): 8, 4, 2 or 1,
    the most whose batch * n_head * ranks stays within DECODE_BLOCKS_PER_SM blocks per
    multiprocessor (measured, version 16: gpt2 batch 1 at 8, batch 8 at 4); one block on
    devices before sm_90, which have no clusters (every chunk then a round of that block)."""
    if int(cp.cuda.Device().compute_capability) < 90:
        return 1
    ranks = DECODE_MAX_CLUSTER
    while ranks > 1 and batch * n_head * ranks > DECODE_BLOCKS_PER_SM * sm_count():
        ranks //= 2
    return ranks


def attention_decode(q, k_cache, v_cache, lengths, out, *, n_head: int, q_stride: int, cache_batch_stride: int,
                     max_len: int, slots=None, cache_rows: int | None = None, stream=None) -> None:
    """out [B, D]: row b's query (at q.data.ptr + b * q_stride) over keys 0 .. lengths[b] - 1 of its cache
    row s (key t at k_cache.data.ptr + s * cache_batch_stride + t * D; v_cache likewise): s = b, or
    slots[b] where ``slots`` is given (int32 [B] on the device, each in 0 .. cache_rows - 1, which the
    caller keeps so: a decode step over some rows of a cache of ``cache_rows`` rows).

    lengths: int32 [B] on the device, each in 1 .. max_len (a row outside that range gets NaN);
    max_len: a host bound on lengths (the cache span checked; the launch does not depend on it,
    so one captured graph serves every step). The keys go in chunks of 64 to decode_ranks(B, H)
    blocks per (row, head), a cluster on sm_90 combined through distributed shared memory.
    Launched programmatically (inside modules.programmatic_launches), the kernel reads lengths
    and the keys / values at positions below lengths[b] - 1 before its pdl_wait: no kernel that may
    still be running may write those (in a decode step, only the step's own position is written).
    """
    d = _width(n_head)
    _array("out", out)
    if out.ndim != 2:
        raise ValueError(f"out must be [B, {d}]; got shape {out.shape}")
    b = out.shape[0]
    if b < 1:
        raise ValueError("out must have at least one row")
    out_span = _out("out", out, b, d)
    q_stride = _stride("q_stride", q_stride, d)
    max_len = _int("max_len", max_len, 1)
    cbs = _int("cache_batch_stride", cache_batch_stride, 0, 2**62)
    if cbs % 4:
        raise ValueError(f"cache_batch_stride must be a multiple of 4 elements; got {cbs}")
    rows = b
    if slots is not None:
        _array("slots", slots, cp.int32)
        if slots.shape != (b,) or not slots.flags.c_contiguous:
            raise ValueError(f"slots must be a contiguous int32 array of shape ({b},); got shape {slots.shape}")
        rows = _int("cache_rows", cache_rows, 1)
    elif cache_rows is not None:
        raise ValueError("cache_rows goes with slots (the rows' cache rows)")
    if rows > 1 and cbs < max_len * d:
        raise ValueError(f"cache_batch_stride {cbs} is smaller than max_len * D = {max_len * d}: rows would overlap")
    _array("lengths", lengths, cp.int32)
    if lengths.shape != (b,) or not lengths.flags.c_contiguous:
        raise ValueError(f"lengths must be a contiguous int32 array of shape ({b},); got shape {lengths.shape}")
    cache_floats = (rows - 1) * cbs + max_len * d
    spans = [
        ("q", _span("q", _array("q", q), (b - 1) * q_stride + d)),
        ("k_cache", _span("k_cache", _array("k_cache", k_cache), cache_floats)),
        ("v_cache", _span("v_cache", _array("v_cache", v_cache), cache_floats)),
    ]
    _no_overlap("out", out_span, spans)

    if b > 65535:
        raise ValueError(f"attention_decode takes at most 65535 rows; got {b}")
    args = (q, np.int32(q_stride), k_cache, v_cache, np.int64(cbs), lengths, out, np.int32(d), np.int32(max_len),
            slots if slots is not None else np.uint64(0))  # NULL: row b's cache row is b
    ranks = decode_ranks(b, n_head)
    launch(kernel("attention", "attention_decode_f32", build.attention(ranks)), (ranks, n_head, b),
           (DECODE_THREADS,), args,
           stream=stream, programmatic=True)

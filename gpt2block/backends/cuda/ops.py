"""Launch wrappers of the small kernels: layernorm.cu, embedding.cu, kvcache.cu, sampling.cu.

Each takes CuPy arrays, checks what the kernel assumes (dtype, contiguity, sizes)
and raises ValueError naming the argument; then launches on the current stream.
"""

from __future__ import annotations

import ctypes
import weakref

import cupy as cp
import numpy as np

from . import build
from .modules import kernel, launch, sm_count

LN_WARPS = build.LN_WARPS
LN_BLOCKS_PER_SM = 4  # layernorm's grid at most this many blocks per SM (each warp then takes
# several rows, loading the next while it stores the current); tuned on the H200 (docs/PERFORMANCE.md)
LN_MAX_D = build.LN_MAX_D
ARGMAX_THREADS = build.ARGMAX_THREADS
ARGMAX_CHUNK = build.ARGMAX_CHUNK  # logits per block: ARGMAX_UNROLL loads per thread (sampling.cu)


class MappedInts:
    """int32 [n] in page-locked host memory mapped into the device's address space: kernels
    write it through ``device_ptr`` (argmax_rows' host_out), the host reads ``array`` once an
    event after the writing kernel has completed. Freed when the object is."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"MappedInts needs at least one element; got {n}")
        rt = cp.cuda.runtime
        ptr = rt.hostAlloc(4 * n, rt.hostAllocMapped | rt.hostAllocPortable)
        weakref.finalize(self, rt.freeHost, ptr)
        self.array = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(ptr))
        self.array[:] = 0
        self.device_ptr = int(rt.pointerGetAttributes(ptr).devicePointer)
        if not self.device_ptr:
            raise RuntimeError("page-locked host memory could not be mapped into the device's address space")


def _f32(name, a, ndim=None):
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{name} must be a CuPy array; got {type(a).__name__}")
    if a.dtype != cp.float32:
        raise ValueError(f"{name} must be float32; got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D; got shape {a.shape}")
    if a.data.ptr % 16:
        raise ValueError(f"{name} must be 16-byte aligned")
    return a


def _rows(name, a):
    """(rows, D, row stride in elements) of a 2-D array whose rows are contiguous."""
    _f32(name, a, 2)
    if a.strides[1] != 4 or a.strides[0] % 16:
        raise ValueError(f"{name} must have contiguous, 16-byte aligned rows; strides {a.strides}")
    return a.shape[0], a.shape[1], a.strides[0] // 4


def layernorm(x, g, b, y, eps: float, blocks: int | None = None) -> None:
    """y = LayerNorm(x; g, b): x, y [rows, D] (row-strided views allowed), g, b [D].
    ``blocks``: the grid (default LN_BLOCKS_PER_SM per SM, fewer for few rows)."""
    rows, d, xs = _rows("x", x)
    yrows, yd, ys = _rows("y", y)
    if (yrows, yd) != (rows, d):
        raise ValueError(f"y has shape {y.shape}; x has {x.shape}")
    if d % 4 or d > LN_MAX_D:
        raise ValueError(f"layernorm runs D % 4 == 0 and D <= {LN_MAX_D}; got D = {d}")
    for n, a in (("g", g), ("b", b)):
        if _f32(n, a, 1).shape[0] != d:
            raise ValueError(f"{n} must have shape ({d},); got {a.shape}")
    vec = -(-d // 128)
    most = -(-rows // LN_WARPS)  # one row per warp
    if blocks is None:
        blocks = min(most, LN_BLOCKS_PER_SM * sm_count())
    elif not 1 <= blocks <= most:
        raise ValueError(f"layernorm of {rows} rows takes 1 to {most} blocks; got {blocks}")
    # two rows loaded ahead where some warp takes three or more and the width allows (layernorm.cu)
    depth = 3 if vec in build.LN_DEPTH3_VEC and rows > 2 * LN_WARPS * blocks else 2
    k = kernel("layernorm", "layernorm_f32", build.layernorm(d, depth))
    # programmatic: inside programmatic_launches() it starts as the kernel ahead finishes (layernorm.cu)
    launch(k, (blocks,), (32 * LN_WARPS,),
           (x, g, b, y, cp.int32(rows), cp.int32(d), cp.int32(xs), cp.int32(ys), cp.float32(eps)), programmatic=True)


def embedding(ids, pos, wte, wpe, x) -> None:
    """x[t] = wte[ids[t]] + wpe[pos[t]]: ids, pos int32 [T] on the device, x [T, D]."""
    t, d = _f32("x", x, 2).shape
    if ids.dtype != cp.int32 or pos.dtype != cp.int32 or ids.shape != (t,) or pos.shape != (t,):
        raise ValueError(f"ids and pos must be int32 of shape ({t},)")
    k = kernel("embedding", "embedding_f32")
    # A plain launch, never programmatic: a decode step starts with it, so every earlier step has
    # finished when its later kernels start; attention_decode_f32 relies on that to read the
    # lengths and the older keys before its pdl_wait (kernels/attention.cu).
    launch(k, (t,), (128,), (ids, pos, wte, wpe, x, cp.int32(d)))


def kvcache_store(qkv, seq, pos, k_cache, v_cache, batch_stride: int) -> None:
    """Write the K and V of qkv [T, 3D] to (seq[t], pos[t]) of this layer's cache views."""
    t, d3 = _f32("qkv", qkv, 2).shape
    if seq.dtype != cp.int32 or pos.dtype != cp.int32 or seq.shape != (t,) or pos.shape != (t,):
        raise ValueError(f"seq and pos must be int32 of shape ({t},)")
    k = kernel("kvcache", "kvcache_store_f32")
    launch(k, (t,), (128,), (qkv, seq, pos, k_cache, v_cache, cp.int64(batch_stride), cp.int32(d3 // 3)))


class ArgmaxWorkspace:
    """Partials [rows, chunks] and per-row tickets (zero; the kernels leave them zero) of an argmax
    kernel (argmax_rows_f32, whose chunks are its blocks per row; the one-token LM head's, whose
    chunks are its grid) on one stream for one shape, allocated outside a capture (the eager first
    decode step of a cache does it)."""

    def __init__(self, rows: int, chunks: int):
        self.part_v = cp.empty(rows * chunks, cp.float32)
        self.part_i = cp.empty(rows * chunks, cp.int32)
        self.counters = cp.zeros(rows, cp.int32)


_argmax_ws: dict = {}


def argmax_workspace(rows: int, chunks: int, stream=None) -> ArgmaxWorkspace:
    """The ArgmaxWorkspace of (device, stream (default: the current one), rows, chunks), made once and
    never replaced: a captured graph keeps using its own."""
    s = stream if stream is not None else cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, s.ptr, rows, chunks)
    ws = _argmax_ws.get(key)
    if ws is None:
        ws = _argmax_ws[key] = ArgmaxWorkspace(rows, chunks)
    return ws


def check_argmax_outputs(out, advance, host_out, rows: int, names=("out", "advance", "host_out")) -> None:
    """The outputs of an argmax kernel (argmax_rows_f32, and the LM head's in linear.gemv_nt):
    out int32 [rows], advance (a decode step's ints) int32 [4, rows] or None, host_out MappedInts of
    rows or None, each contiguous; ``names`` of the three in the errors."""
    if not isinstance(out, cp.ndarray) or out.dtype != cp.int32 or out.shape != (rows,) or not out.flags.c_contiguous:
        raise ValueError(f"{names[0]} must be a contiguous int32 CuPy array of shape ({rows},)")
    if advance is not None and (not isinstance(advance, cp.ndarray) or advance.dtype != cp.int32
                                or advance.shape != (4, rows) or not advance.flags.c_contiguous):
        raise ValueError(f"{names[1]} must be a contiguous int32 CuPy array of shape (4, {rows})")
    if host_out is not None and (not isinstance(host_out, MappedInts) or host_out.array.shape != (rows,)):
        raise ValueError(f"{names[2]} must be MappedInts of {rows} elements")


def argmax_rows(logits, out, advance=None, host_out: MappedInts | None = None) -> None:
    """out[r] = argmax(logits[r]) (first index of the maximum): logits [rows, V], out int32 [rows].
    Each row is read by ceil(V / ARGMAX_CHUNK) blocks, reduced in the kernel (sampling.cu).
    ``advance``: a decode step's ints, int32 [4, rows] (ids, seq, pos, lengths) on the device,
    moved on to the next greedy step in the kernel: ids = out, pos + 1, lengths + 1.
    ``host_out``: MappedInts of rows elements that get out's values too (no copy afterwards)."""
    if not isinstance(logits, cp.ndarray) or logits.dtype != cp.float32 or logits.ndim != 2 or logits.strides[1] != 4:
        raise ValueError("logits must be a float32 CuPy array [rows, V] with contiguous rows")
    rows, v = logits.shape
    if rows < 1 or v < 1:
        raise ValueError(f"logits must not be empty; got shape {logits.shape}")
    if rows > 65535:
        raise ValueError(f"argmax_rows takes at most 65535 rows; got {rows}")
    ld = logits.strides[0] // 4
    check_argmax_outputs(out, advance, host_out, rows)
    if ld >= 2**31:
        raise ValueError(f"logits row stride {ld} is beyond the kernel's int indexing")
    chunks = -(-v // ARGMAX_CHUNK)
    ws = argmax_workspace(rows, chunks)
    k = kernel("sampling", "argmax_rows_f32", build.sampling())
    launch(k, (chunks, rows), (ARGMAX_THREADS,),
           (logits, out, cp.int32(v), cp.int32(ld), cp.int32(ARGMAX_CHUNK), ws.part_v, ws.part_i, ws.counters,
            advance if advance is not None else np.uint64(0),  # NULL: no advance
            np.uint64(0 if host_out is None else host_out.device_ptr)),
           programmatic=True)

"""The greedy LM head through its int8 screen (kernels/lm_screen.cu, gpt2block/screen.py): at one token,
ln_f + the tied LM head's argmax, the full head's winner bit for bit, without forming its logits.

    screen_table(w)                        w [N, K] -> ScreenTable: q int8 [N, K], rowp float32 [N, 4]
                                           (gpt2block.screen.table's values, made on the GPU)
    screen_prepare(w)                      build the kernels and workspaces before a graph capture
    lm_head_screened(x, t, w, ln, argmax)  x [1, K]: ids[0] = argmax(LN(x) @ w^T), as linear.gemv_nt's
                                           argmax gives it: an int8 pass over the table bounds every
                                           logit, and only the rows that may win are formed exactly

One build a model (cuda.build.lm_screen: the full head's one-token build and J = ceil(K / 256)). The
decode-path table (decode_paths) says when a step takes this head.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import cupy as cp
import numpy as np

from . import build
from .linear import (_GEMV_NT_THREADS, _check_array, _check_ln, _check_shape, _check_weights, _cpt, _gemv_argmax_args,
                     _i32, gemv_nt_plan)
from .modules import kernel, launch, module, sm_count

SCREEN_MAX_K = build.LM_SCREEN_MAX_K  # lm_screen's builds: K <= 256 LM_SCREEN_J, J up to 8
_screen_ws: dict = {}


@dataclass
class ScreenTable:
    """The int8 screen of an LM head w [N, K]: q int8 [N, K], rowp float32 [N, 4] (screen.table), made from
    w as it was then: remake it (screen_table) after w's values change."""

    q: object
    rowp: object
    w_ptr: int  # the head it was made from (a check that it is used with that head)
    j: int  # LM_SCREEN_J of its build (build.lm_screen): the table, screen and rescore share it


def screen_fits(n: int, k: int) -> bool:
    """Whether lm_head_screened takes a head of N rows of width K."""
    return build.lm_screen_fits(n, k)


def _screen_unfit(shape) -> str:
    return (f"the LM head screen takes K a multiple of 8 up to {SCREEN_MAX_K} and N K below 2^31; got w of shape"
            f" {tuple(shape)}")


def screen_table(w, stream=None, j: int | None = None) -> ScreenTable:
    """The screen of the LM head w [N, K] (float32, or bf16 bits as uint16), made on the GPU by
    lm_screen_table_* on ``stream``: gpt2block.screen.table's values, bit for bit. ``j``: the build's
    LM_SCREEN_J (default ceil(K / 256); a wider one is correct, slower)."""
    _check_weights(w, "w", "[N, K]")
    n, k = w.shape
    if not screen_fits(n, k):
        raise ValueError(_screen_unfit(w.shape))
    bf16 = w.dtype != np.float32
    j = build.lm_screen_j(k) if j is None else j
    defines = build.lm_screen(n, k, bf16, j)
    with stream if stream is not None else contextlib.nullcontext():  # allocated for the stream that writes them
        q, rowp = cp.empty((n, k), cp.int8), cp.empty((n, 4), cp.float32)
    launch(kernel("lm_screen", f"lm_screen_table_{'bf16' if bf16 else 'f32'}", defines),
           (-(-n // (_GEMV_NT_THREADS // 32)), 1, 1), (_GEMV_NT_THREADS, 1, 1),
           (w, _i32(n, "N"), _i32(k, "K"), q, rowp), 0, stream)
    return ScreenTable(q, rowp, w.data.ptr, j)


def _screen_workspace(n: int, k: int, g1: int, stream):
    """(ub [N], lb_part [g1], h [K]) float32 for one (device, stream, N, K, g1), made once and kept
    (a captured graph keeps using its own)."""
    s = stream if stream is not None else cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, s.ptr, n, k, g1)
    got = _screen_ws.get(key)
    if got is None:
        got = _screen_ws[key] = (cp.empty(n, cp.float32), cp.empty(g1, cp.float32), cp.empty(k, cp.float32))
    return got


def _screen_grids(n: int, k: int, j: int | None = None) -> tuple[int, int]:
    """(G1, G2): the screen's blocks (LM_SCREEN_MIN_BLOCKS a SM, at most one per 8 warps' rows: R a
    warp by the build's J, build.lm_screen_rows) and the rescore's (one a SM)."""
    rows = build.lm_screen_rows(build.lm_screen_j(k) if j is None else j)
    sms = sm_count()
    return min(build.LM_SCREEN_MIN_BLOCKS * sms, -(-n // (rows * _GEMV_NT_THREADS // 32))), min(sms, n)


def screen_prepare(w, stream=None) -> None:
    """Make lm_head_screened's workspaces for heads of w's shape on ``stream``, and build its kernels, now
    (before a capture: nothing is allocated or compiled while a graph is being captured)."""
    from .ops import argmax_workspace

    n, k = w.shape
    module("lm_screen", build.lm_screen(n, k, w.dtype != np.float32))
    g1, g2 = _screen_grids(n, k)
    _screen_workspace(n, k, g1, stream)
    argmax_workspace(1, g2, stream)


def lm_head_screened(x, table: ScreenTable, w, ln, argmax, *, stream=None) -> None:
    """ids[0] = the argmax of LN(x; g, b, eps) @ w^T for one token, as gemv_nt(x, w, out, ln=ln,
    argmax=argmax) gives it (the same winner, bit for bit), without its logits: an int8 pass over
    ``table`` (screen_table(w)) bounds every logit, and only the rows that may win are formed
    exactly (kernels/lm_screen.cu). x float32 [1, K]; w [N, K] float32 or bf16 bits; ln = (g, b, eps);
    argmax = (ids, advance, host_out) as gemv_nt's. Two launches, both programmatic."""
    _check_array(x, "x", 2)
    if x.shape[0] != 1:
        raise ValueError(f"the screened LM head takes one token; x has {x.shape[0]} rows")
    _check_weights(w, "w", "[N, K]")
    n, k = w.shape
    if x.shape[1] != k:
        raise ValueError(f"w must have {x.shape[1]} columns (x is {tuple(x.shape)}), got shape {tuple(w.shape)}")
    if not screen_fits(n, k):
        raise ValueError(_screen_unfit(w.shape))
    if not isinstance(table, ScreenTable) or table.w_ptr != w.data.ptr:
        raise ValueError("table must be screen_table(w) of this w")
    _check_array(table.q, "table.q", 2, (np.int8,))
    _check_shape(table.q, "table.q", (n, k))
    _check_array(table.rowp, "table.rowp", 2)
    _check_shape(table.rowp, "table.rowp", (n, 4))
    if x.data.ptr % 16:
        raise ValueError(f"x must be 16-byte aligned; got address {x.data.ptr:#x}")
    g, b, eps = _check_ln(ln, k)
    if argmax is None:
        raise ValueError("the screened LM head gives only the argmax: argmax = (ids, advance, host_out) is required")
    bf16 = w.dtype != np.float32
    defines = build.lm_screen(n, k, bf16, table.j)  # checks that the table's J takes K
    g1, g2 = _screen_grids(n, k, table.j)
    ub, lb_part, h = _screen_workspace(n, k, g1, stream)
    head = build.gemv_nt_settings(n, k, 1, bf16, ln=True)
    wpr, _ = gemv_nt_plan(n, k, _cpt(w), 1, bf16, True, settings=head)  # the full head's split of K
    launch(kernel("lm_screen", "lm_screen", defines), (g1, 1, 1), (_GEMV_NT_THREADS, 1, 1),
           (x, table.q, table.rowp, g, b, np.float32(eps), _i32(n, "N"), _i32(k, "K"), ub, lb_part, h),
           3 * k * 4 + 2 * k, stream, programmatic=True)
    args = (w, h, ub, lb_part, _i32(g1, "G1"), _i32(n, "N"), _i32(k, "K"), np.int32(wpr))
    args += _gemv_argmax_args(argmax, 1, g2, stream)
    launch(kernel("lm_screen", f"lm_rescore_{'bf16' if bf16 else 'f32'}", defines), (g2, 1, 1),
           (_GEMV_NT_THREADS, 1, 1), args, k * 4, stream, programmatic=True)

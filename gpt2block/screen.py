"""The greedy LM head's int8 screen: its table, and a float64 model of its bounds.

At batch 1 a greedy decode step needs only the argmax of the logits. The CUDA backend takes it in
two passes (kernels/lm_screen.cu): an int8 copy of the head gives every row an interval [lb, ub]
that surely holds its logit, and only the rows whose ub reaches the largest lb (the candidates) are
then formed exactly, as the full head forms them. The winner is the full head's, bit for bit; the
head's bytes read drop to about a half (bf16 weights) or a quarter (float32) plus the candidates.

``table(w)`` makes the int8 copy from the exact head (the decode copy: float32, or bf16 bits as
uint16); given a NumPy array it is the reference that the CUDA backend's kernel (lm_screen_table_*)
matches bit for bit. ``bounds(h, q, rowp)`` is the kernel's interval in NumPy, for tests and for
reading. Both also take CuPy arrays (``xp`` is the module of the input), but CuPy's elementwise
kernels are built with -ftz, so there a subnormal weight may be flushed (a row of 2^-130 gets s = 1,
d = 0, m = 0): only NumPy input is the reference.
"""

from __future__ import annotations

import numpy as np

QMAX = 127  # q in [-QMAX, QMAX]
H_SLACK = 0.51  # |h - t p| <= H_SLACK t: round to nearest, plus the float32 rounding of h / t
H_MIN = 2.0**-100  # max|h| below this (or h not finite): no bound, every row a candidate
F32_MIN = 2.0**-126  # the least normal float32: the table's s and d are never below (0 aside)
FTZ = 2.0**-120  # the widening for flushed subnormals: FTZ (K (m + 1) + |h|_1 + 8)
ROWP_FIELDS = ("scale", "err_max", "q_abs_sum", "w_abs_max")  # rowp's columns


def _xp(a):
    return np if isinstance(a, np.ndarray) else __import__("cupy").get_array_module(a)


def _as_f64(w, xp):
    """The exact head's values as float64 (bf16 bits: the upper half of a float32)."""
    if w.dtype == np.uint16:
        return (w.astype(xp.uint32) << xp.uint32(16)).view(xp.float32).astype(xp.float64)
    if w.dtype != np.float32:
        raise ValueError(f"the LM head must be float32 or bf16 bits (uint16); got {w.dtype}")
    return w.astype(xp.float64)


def table(w, rows_per_chunk: int = 8192):
    """(q int8 [N, K], rowp float32 [N, 4]) of the exact head w [N, K] (float32, or bf16 bits as
    uint16). Row n: scale s = max|w_n| / 127 rounded to a float32 and at least 2^-126 (1 for a row of
    zeros), q = round(w_n / s), and rowp[n] = (s, d, sum_k |q_nk|, max_k |w_nk|), d = max_k |w_nk - s q_nk|
    rounded up to a float32 and at least 2^-126 unless 0. s and d are normal floats, so that a kernel
    built with -ftz reads them whole. A row with a non-finite weight gets q = 0 and an infinite error
    (it is then always a candidate)."""
    xp = _xp(w)
    if w.ndim != 2:
        raise ValueError(f"the LM head must be 2-D [N, K]; got shape {tuple(w.shape)}")
    n, k = w.shape
    q = xp.empty((n, k), xp.int8)
    rowp = xp.empty((n, 4), xp.float32)
    for r0 in range(0, n, rows_per_chunk):
        r1 = min(n, r0 + rows_per_chunk)
        wf = _as_f64(w[r0:r1], xp)
        finite = xp.isfinite(wf).all(axis=1)
        wf = xp.where(finite[:, None], wf, 0.0)
        wmax = xp.abs(wf).max(axis=1)
        s = xp.maximum((wmax / QMAX).astype(xp.float32), xp.float32(F32_MIN))
        s = xp.where(wmax > 0, s, xp.float32(1.0))
        s64 = s.astype(xp.float64)[:, None]
        qq = xp.clip(xp.rint(wf / s64), -QMAX, QMAX)
        err = xp.abs(wf - s64 * qq).max(axis=1)  # exact: s q has at most 31 significant bits
        err = xp.where(finite, err, np.inf)
        q[r0:r1] = qq.astype(xp.int8)
        rowp[r0:r1, 0] = s
        d = xp.where((err > 0) & (err < F32_MIN), F32_MIN, err)
        rowp[r0:r1, 1] = _round_up_f32(d, xp)
        rowp[r0:r1, 2] = xp.abs(qq).sum(axis=1).astype(xp.float32)  # at most 127 K: exact
        rowp[r0:r1, 3] = wmax.astype(xp.float32)  # a float32 value already
    return q, rowp


def h_steps(k: int) -> int:
    """P: h is quantized to integers in [-P, P], the most that keeps 127 P K within an int32."""
    return min(32767, (2**31 - 1) // (QMAX * k))


def bounds(h, q, rowp):
    """(ub, lb) float32 [N] of the kernel for h [K] (float32, ln_f's output): float64 arithmetic, ub
    rounded up and lb down; (+inf, -inf) where h or the row is not finite or could overflow, and
    everywhere when max|h| < H_MIN."""
    xp = _xp(h)
    h = h.astype(xp.float32)
    k = h.shape[0]
    p_max = h_steps(k)
    n = q.shape[0]
    # inf or NaN (or next to overflow), or all of h tiny: no bound
    if not bool((xp.abs(h) <= 3.0e38).all()) or not float(xp.abs(h).max()) >= H_MIN:
        return xp.full(n, np.inf, xp.float32), xp.full(n, -np.inf, xp.float32)
    l1 = float(xp.abs(h.astype(xp.float64)).sum())
    mx = float(xp.abs(h).max())
    inv = np.float32(np.float32(p_max) / np.float32(mx))
    p = xp.clip(xp.rint(h * inv), -p_max, p_max).astype(xp.int64)
    t = mx / p_max
    acc = q.astype(xp.int64) @ p
    s, d, a, m = (rowp[:, i].astype(xp.float64) for i in range(4))
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    big = acc.astype(xp.float64) * (s * t)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 in rows that ok (below) leaves unbounded
        b = ((d * l1 + H_SLACK * s * t * a + gamma * m * l1 + FTZ * (k * (m + 1) + l1 + 8)) * (1 + 2.0**-30)
             + 2.0**-40 * xp.abs(big))
    ok = xp.isfinite(d) & (m * l1 <= 1e37)
    ub = xp.where(ok, _round_up_f32(big + b, xp), np.float32(np.inf)).astype(xp.float32)
    lb = xp.where(ok, -_round_up_f32(b - big, xp), np.float32(-np.inf)).astype(xp.float32)
    return ub, lb


def _round_up_f32(v, xp):
    """float64 -> the least float32 >= v (+inf stays +inf)."""
    f = v.astype(xp.float32)
    return xp.where(f.astype(xp.float64) < v, xp.nextafter(f, xp.float32(np.inf)), f)


def candidates(ub, lb):
    """The rows the exact pass forms: ub >= max(lb)."""
    xp = _xp(ub)
    return xp.nonzero(ub >= lb.max())[0]

"""The accuracy checks of the matrix kernels (kernels/gemm.cu, kernels/gemm_wgmma.cu, kernels/gemv.cu
through gpt2block.backends.cuda.linear), shared by tests/gpu/test_linear.py and dev/check_linear.py.

Fresh random data per case (a ~ N(0,1) like a LayerNorm output, weights and bias ~ N(0, 0.02),
residual ~ N(0,1)), outputs poisoned with NaN before the run, compared with a float64 reference
(torch float64 on the GPU). Per case: max |error| and max |error| / max |ref|, and the ratio to torch
float32's error (TF32 off) against the same reference. Limits:
  tf32x3 GEMM; f32 and bf16 GEMV:       error <= 2 x torch fp32's + one fp32 ulp of max |ref|
                                        (bf16: against the bf16-rounded weights)
  tf32 GEMM:                            max |ours - ref| <= 1e-3 x max |ref|
Import it only where CuPy, torch and a GPU are present.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cupy as cp
import numpy as np
import torch

from gpt2block.backends.cuda import linear as L

EPS32 = float(np.finfo(np.float32).eps)


# ---------------------------------------------------------------------------------------------
# Data and references.


def _upload(arr: np.ndarray, offset: int = 0) -> cp.ndarray:
    """arr on the GPU; offset > 0 places it ``offset`` floats into a larger buffer (misaligned view)."""
    if offset == 0:
        return cp.asarray(arr)
    flat = cp.empty(arr.size + offset, dtype=arr.dtype)
    view = flat[offset:offset + arr.size].reshape(arr.shape)
    view[...] = cp.asarray(arr)
    return view


def _gelu(z):
    return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z * z * z)))


def torch_linear(a, b, bias, epilogue, r, nt=False):
    """The product in torch, in a's dtype: epi(a @ b + bias) or a @ b.T."""
    if nt:
        return a @ b.T
    z = torch.addmm(bias, a, b)
    if epilogue == "bias_gelu":
        z = _gelu(z)
    elif epilogue == "bias_residual":
        z = z + r
    return z


@dataclass
class Result:
    name: str
    err: float
    rel: float
    peer: float
    limit: float
    ok: bool

    def line(self) -> str:
        ratio = self.err / self.peer if self.peer > 0 else float("inf")
        tag = "ok  " if self.ok else "FAIL"
        return (f"{tag} {self.name:58s} err {self.err:9.3e}  rel {self.rel:9.3e}  "
                f"torch32 {self.peer:9.3e}  ratio {ratio:5.2f}  limit {self.limit:9.3e}")


def judge(name: str, ours: torch.Tensor, ref64: torch.Tensor, peer32: torch.Tensor | None, mode: str) -> Result:
    """mode 'fp32': err <= 2 x torch fp32 err + one ulp of max |ref|; mode 'tf32': err <= 1e-3 max |ref|."""
    ours64 = ours.double()
    diff = (ours64 - ref64).abs()
    finite = bool(torch.isfinite(ours64).all())
    err = diff.max().item() if finite else float("nan")
    scale = ref64.abs().max().item()
    rel = err / scale if scale > 0 else err
    peer = (peer32.double() - ref64).abs().max().item() if peer32 is not None else float("nan")
    if mode == "fp32":
        limit = 2.0 * peer + EPS32 * scale
        ok = finite and err <= limit
    else:
        limit = 1e-3 * scale
        ok = finite and err <= limit
    return Result(name, err, rel, peer, limit, ok)


# ---------------------------------------------------------------------------------------------
# One case each.


def gemm_case(variant: str, m: int, k: int, n: int, epilogue: str = "bias", nt: bool = False,
              offset: int = 0, inplace: bool = False, seed: int = 0, planes: bool = False, tile=None) -> Result:
    """Run gemm / gemm_nt once on fresh data and judge it; planes: the wgmma GEMM (gemm_planes)
    on weight planes made here by prepare_planes, on ``tile`` (one of L.WG_TILES[variant]) if given."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = (rng.standard_normal((n, k) if nt else (k, n), dtype=np.float32) * 0.02).astype(np.float32)
    bias = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
    r = rng.standard_normal((m, n), dtype=np.float32) if epilogue == "bias_residual" else None

    a_d, b_d, bias_d = _upload(a, offset), _upload(b, offset), _upload(bias, offset)
    r_d = None if r is None else _upload(r, offset)
    if inplace:
        out_d = r_d
    else:
        out_d = _upload(np.full((m, n), np.nan, dtype=np.float32), offset)
    if planes:
        p = L.prepare_planes(b_d, variant, transposed=nt)
        L.gemm_planes(a_d, p, None if nt else bias_d, out_d, epilogue=None if nt else epilogue, residual=r_d,
                      tile=tile)
    elif nt:
        L.gemm_nt(a_d, b_d, out_d, variant=variant)
    else:
        L.gemm(a_d, b_d, bias_d, out_d, epilogue=epilogue, residual=r_d, variant=variant)
    ours = torch.as_tensor(cp.asnumpy(out_d)).cuda()

    t = {key: torch.from_numpy(v).cuda() if v is not None else None
         for key, v in (("a", a), ("b", b), ("bias", bias), ("r", r))}
    ref64 = torch_linear(t["a"].double(), t["b"].double(), t["bias"].double(), epilogue,
                         None if r is None else t["r"].double(), nt)
    peer = torch_linear(t["a"], t["b"], t["bias"], epilogue, t["r"], nt)
    mode = "tf32" if variant == "tf32" else "fp32"
    what = "nt" if nt else epilogue
    extra = ((f" off{offset}" if offset else "") + (" inplace" if inplace else "") + (" planes" if planes else "")
             + (f" {tile.label}" if tile is not None else ""))
    return judge(f"gemm {variant:6s} {what:13s} M={m} K={k} N={n}{extra}", ours, ref64, peer, mode)


def _layer_norm(x, g, b, eps=1e-5):
    """torch LayerNorm in x's dtype (float64 for the reference, float32 for the peer)."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), g.to(x.dtype), b.to(x.dtype), eps)


def gemv_case(wdtype: str, m: int, k: int, n: int, epilogue: str | None = "bias", nt: bool = False,
              inplace: bool = False, ln: bool = False, ln_mean: float = 5.0, seed: int = 0) -> Result:
    """Run gemv / gemv_nt once; the reference uses the weights as stored (bf16-rounded).
    nt: w is [N, K] (the decode layout), epilogue None = no bias; ln: the input LayerNorm fused
    (x with a row mean far from zero, ln_mean, and a few large columns, as a residual stream has)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=np.float32)
    if ln:
        x[:, :3] *= 30.0
        x += np.float32(ln_mean)
    w = (rng.standard_normal((n, k) if nt else (k, n), dtype=np.float32) * 0.02).astype(np.float32)
    bias = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
    g = rng.uniform(0.8, 1.2, k).astype(np.float32)
    lb = (rng.standard_normal(k, dtype=np.float32) * 0.1).astype(np.float32)
    r = rng.standard_normal((m, n), dtype=np.float32) if epilogue == "bias_residual" else None

    x_d, bias_d = cp.asarray(x), cp.asarray(bias)
    w_d = cp.asarray(w)
    if wdtype == "bf16":
        w_d = L.to_bf16_bits(w_d)
        w = cp.asnumpy(L.from_bf16_bits(w_d))  # the weights as the kernel sees them
    r_d = None if r is None else cp.asarray(r)
    out_d = r_d if inplace else cp.full((m, n), cp.nan, dtype=cp.float32)
    if nt:
        L.gemv_nt(x_d, w_d, out_d, bias=None if epilogue is None else bias_d, epilogue=epilogue,
                  residual=r_d, ln=(cp.asarray(g), cp.asarray(lb), 1e-5) if ln else None)
    else:
        L.gemv(x_d, w_d, bias_d, out_d, epilogue=epilogue, residual=r_d)
    ours = torch.as_tensor(cp.asnumpy(out_d)).cuda()

    t = {key: torch.from_numpy(v).cuda() if v is not None else None
         for key, v in (("x", x), ("w", w), ("bias", bias), ("r", r), ("g", g), ("lb", lb))}
    x64, x32 = t["x"].double(), t["x"]
    if ln:
        x64, x32 = _layer_norm(x64, t["g"], t["lb"]), _layer_norm(x32, t["g"], t["lb"])
    r64 = None if r is None else t["r"].double()
    if nt and epilogue is None:
        ref64, peer = x64 @ t["w"].double().T, x32 @ t["w"].T
    elif nt:
        ref64 = torch_linear(x64, t["w"].double().T, t["bias"].double(), epilogue, r64)
        peer = torch_linear(x32, t["w"].T, t["bias"], epilogue, t["r"])
    else:
        ref64 = torch_linear(x64, t["w"].double(), t["bias"].double(), epilogue, r64)
        peer = torch_linear(x32, t["w"], t["bias"], epilogue, t["r"])
    what = ("nt" + (f"+ln(mean {ln_mean:g})" if ln else "") + (f" {epilogue}" if epilogue else "")) if nt else epilogue
    return judge(f"gemv {wdtype:6s} {what:20s} M={m} K={k} N={n}" + (" inplace" if inplace else ""),
                 ours, ref64, peer, "fp32")


def repeat_bitwise(fn_make) -> bool:
    """fn_make() -> cupy output of one fresh run on fixed inputs; True when two runs agree bit for bit."""
    first = fn_make().view(cp.uint32).copy()
    second = fn_make().view(cp.uint32)
    return bool(cp.array_equal(first, second))


def gemm_repeat_case(variant: str = "tf32x3", m: int = 1025, k: int = 768, n: int = 2304) -> bool:
    rng = np.random.default_rng(7)
    a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray((rng.standard_normal((k, n), dtype=np.float32) * 0.02).astype(np.float32))
    bias = cp.zeros(n, dtype=cp.float32)
    out = cp.empty((m, n), dtype=cp.float32)

    def run():
        out.fill(cp.nan)
        L.gemm(a, b, bias, out, variant=variant)
        return out

    return repeat_bitwise(run)


def gemv_repeat_case(wdtype: str = "f32", m: int = 8, k: int = 3072, n: int = 768) -> bool:
    rng = np.random.default_rng(8)
    x = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    w = cp.asarray((rng.standard_normal((k, n), dtype=np.float32) * 0.02).astype(np.float32))
    if wdtype == "bf16":
        w = L.to_bf16_bits(w)
    bias = cp.zeros(n, dtype=cp.float32)
    out = cp.empty((m, n), dtype=cp.float32)

    def run():
        out.fill(cp.nan)
        L.gemv(x, w, bias, out)
        return out

    return repeat_bitwise(run)

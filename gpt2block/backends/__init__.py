"""Backends behind one interface (base.Runner): ``numpy`` (the reference) and ``cuda`` (our kernels)."""

from __future__ import annotations

from ..weights import ModelWeights
from .base import PRECISIONS, Cache, ContextFull, Runner

BACKENDS = ("auto", "numpy", "cuda")


class BackendError(RuntimeError):
    """A backend that was asked for cannot run here; the message says why."""


def cuda_status() -> tuple[bool, str]:
    """(available, why): whether CuPy imports and sees a GPU."""
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a CuPy that fails to find its CUDA libraries
        return False, f"CuPy is not importable ({type(e).__name__}: {e}); install gpt2block[cuda12] or [cuda13]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"CuPy found no usable CUDA device ({type(e).__name__}: {e})"
    if n == 0:
        return False, "CuPy found no CUDA device"
    return True, f"{n} CUDA device(s)"


def resolve_backend(name: str) -> str:
    """'auto' -> 'cuda' where a GPU is usable, else 'numpy'. 'cuda' without a GPU is an error."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "numpy":
        return name
    ok, why = cuda_status()
    if name == "cuda" and not ok:
        raise BackendError(f"--backend cuda needs a GPU: {why}")
    return "cuda" if ok else "numpy"


def make_runner(weights: ModelWeights, backend: str = "auto", precision: str = "fp32") -> Runner:
    """Upload ``weights`` to the chosen backend and return its Runner."""
    if precision not in PRECISIONS and precision != "fp64":
        raise BackendError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    name = resolve_backend(backend)
    if name == "numpy":
        import numpy as np

        from .numpy_ref import NumpyRunner

        if precision in ("tf32", "bf16"):
            raise BackendError(f"precision {precision} is a CUDA mode; the numpy backend runs fp32 (or fp64)")
        return NumpyRunner(weights, np.float64 if precision == "fp64" else np.float32)
    if precision == "fp64":
        raise BackendError("precision fp64 is the numpy reference's judge mode; the cuda backend runs fp32, tf32, bf16")
    from .cuda import CudaRunner

    return CudaRunner(weights, precision)


__all__ = ["BACKENDS", "PRECISIONS", "BackendError", "Cache", "ContextFull", "Runner", "cuda_status",
           "make_runner", "resolve_backend"]

"""solve(x, output, weights, seq_len): one GPT-2 block, the LeetGPU challenge's entry point.

x and output: float32 [seq_len, 768] (or flat [seq_len * 768]); weights: one block in the
flat layout (layout.py), 7,087,872 float32. No causal mask. ``output`` is written in place.
Device arrays (CuPy, or anything with __cuda_array_interface__, such as torch CUDA
tensors) run our CUDA kernels on their device, on the caller's current stream; NumPy arrays
run the NumPy reference. Every argument is checked before anything is written. Calls from
several threads at once are safe (backends/cuda/solve.py says how).
"""

from __future__ import annotations

import sys

import numpy as np

from .backends.base import PRECISIONS
from .layout import block_numel

D_SOLVE = 768


def _is_torch(a) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _is_cupy(a) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(a, cupy.ndarray)


def _kind(name, a):
    if isinstance(a, np.ndarray):
        return "host"
    if _is_torch(a):  # (asked before hasattr, which would build torch's __cuda_array_interface__)
        if a.is_cuda and a.layout == sys.modules["torch"].strided:
            if a.requires_grad:
                raise ValueError(f"{name} requires grad: pass {name}.detach() (solve writes output in place)")
            return "device"
    elif _is_cupy(a) or hasattr(a, "__cuda_array_interface__"):
        return "device"
    raise TypeError(
        f"{name} must be a NumPy array or a CUDA array (CuPy, dense torch CUDA tensor); got {type(a).__name__}"
    )


def _torch_facts(a):
    """(dtype, shape, address, contiguous) of a torch tensor from its own accessors: torch builds
    __cuda_array_interface__ anew at each access, about 10 us (most of a repeated solve() call's host
    time)."""
    torch = sys.modules["torch"]
    dtype = np.dtype(np.float32) if a.dtype == torch.float32 else str(a.dtype).removeprefix("torch.")
    return dtype, tuple(a.shape), a.data_ptr(), a.is_contiguous()


def _span(name, a, kind):
    """(shape, start, end): a's shape and byte addresses, after checking dtype and contiguity."""
    if kind == "device" and _is_torch(a):
        dtype, shape, ptr, contiguous = _torch_facts(a)
    elif kind == "device" and _is_cupy(a):
        dtype, shape, ptr, contiguous = a.dtype, a.shape, a.data.ptr, a.flags.c_contiguous
    elif kind == "host":
        dtype, shape, ptr = a.dtype, tuple(a.shape), a.__array_interface__["data"][0]
        contiguous = a.flags.c_contiguous
    else:
        cai = a.__cuda_array_interface__
        dtype, shape, ptr = np.dtype(cai["typestr"]), tuple(cai["shape"]), cai["data"][0]
        strides = cai.get("strides")
        contiguous = strides is None or strides == tuple(
            int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape))
        )
    if dtype != np.float32:
        raise TypeError(f"{name} must be float32; got {dtype}")
    if not contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    n = 1
    for s in shape:
        n *= int(s)
    return shape, ptr, ptr + n * 4


def _check_writable(name, a, kind):
    """``a`` can be written (solve writes ``output`` in place): a NumPy array's WRITEABLE flag, the
    read-only flag of __cuda_array_interface__ (CuPy arrays and torch CUDA tensors are writable)."""
    if kind == "host":
        writable = a.flags.writeable
    elif _is_torch(a) or _is_cupy(a):
        writable = True
    else:
        writable = not a.__cuda_array_interface__["data"][1]
    if not writable:
        raise ValueError(f"{name} is read-only; solve writes its result into {name} in place")


def _check_shape(name, shape, seq_len, d):
    if shape not in ((seq_len, d), (seq_len * d,)):
        raise ValueError(f"{name} must have shape ({seq_len}, {d}) (or ({seq_len * d},)); got {shape}")


def _device_of(a) -> int | None:
    """The CUDA device of a torch tensor or CuPy array; None for other CUDA arrays (their pointer
    alone does not say without a driver call: they run on CuPy's current device)."""
    if _is_torch(a):
        return a.get_device()
    if _is_cupy(a):
        return a.device.id
    return None


class _StreamHandle:
    """A CUDA stream's handle as ``.ptr`` (what solve_device and CuPy's Graph.launch read)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


def _torch_stream(dev: int) -> _StreamHandle:
    """torch's current stream on device dev: torch._C._cuda_getCurrentRawStream where torch has it
    (the raw handle, as torch's compiled kernels take it), else torch.cuda.current_stream, which
    builds a Stream object each call."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return _StreamHandle(raw(dev) if raw is not None else torch.cuda.current_stream(dev).cuda_stream)


def _solve_on_device(x, output, weights, seq_len, precision, ptrs, dev) -> None:
    """The CUDA path on device dev (the current one), on the caller's current stream there."""
    import cupy as cp

    from .backends.cuda.solve import solve_device

    stream = _torch_stream(dev) if _is_torch(x) else cp.cuda.get_current_stream()
    solve_device(x, output, weights, seq_len, precision, ptrs=ptrs, stream=stream, dev=dev)


def solve(x, output, weights, seq_len: int, precision: str = "fp32") -> None:
    """Run one non-causal GPT-2 block (D = 768) on x, writing the result into output.

    Device arrays: the block runs on their device, on the caller's current stream there (torch's
    current stream when x is a torch tensor, else CuPy's): its work comes after the work queued on that
    stream before the call and before the work queued on it after, as if it were one more kernel there;
    solve() does not wait for it (read output on the same stream, or synchronize). Several threads may
    call at once (their own buffers, or the same weights): each call gives the bits it gives alone."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
        raise TypeError(f"seq_len must be an int; got {type(seq_len).__name__}")
    seq_len = int(seq_len)
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive; got {seq_len}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    kinds = {n: _kind(n, a) for n, a in (("x", x), ("output", output), ("weights", weights))}
    if len(set(kinds.values())) != 1:
        raise TypeError(f"x, output and weights must all be host (NumPy) or all device arrays; got {kinds}")
    kind = kinds["x"]
    _check_writable("output", output, kind)
    xs, x0, x1 = _span("x", x, kind)
    os_, o0, o1 = _span("output", output, kind)
    ws, w0, w1 = _span("weights", weights, kind)
    _check_shape("x", xs, seq_len, D_SOLVE)
    _check_shape("output", os_, seq_len, D_SOLVE)
    if ws != (block_numel(D_SOLVE),):
        raise ValueError(f"weights must have shape ({block_numel(D_SOLVE)},) (one block, layout.py); got {ws}")
    if o0 < x1 and x0 < o1:
        raise ValueError("output must not overlap x (solve does not run in place)")
    if o0 < w1 and w0 < o1:
        raise ValueError("output must not overlap weights")

    if kind == "host":
        from .backends.numpy_ref import block_flat

        if precision != "fp32":
            raise ValueError(f"precision {precision} needs device arrays; NumPy arrays run the fp32 reference")
        out = block_flat(x.reshape(seq_len, D_SOLVE), weights, causal=False)
        output.reshape(seq_len, D_SOLVE)[...] = out
        return

    devs = (_device_of(x), _device_of(output), _device_of(weights))
    dev = devs[0]
    if not devs[0] == devs[1] == devs[2]:
        known = {v for v in devs if v is not None}
        if len(known) > 1:
            raise ValueError(f"x, output and weights must be on one CUDA device; got devices "
                             f"{dict(zip(('x', 'output', 'weights'), devs))}")
        dev = known.pop() if known else None

    import cupy as cp

    current = cp.cuda.runtime.getDevice()
    if dev is None or dev == current:
        _solve_on_device(x, output, weights, seq_len, precision, (x0, o0, w0), current)
        return
    with cp.cuda.Device(dev):
        _solve_on_device(x, output, weights, seq_len, precision, (x0, o0, w0), dev)

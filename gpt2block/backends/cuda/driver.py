"""Programmatic dependent launch (PDL) through the CUDA driver's cuLaunchKernelEx.

CuPy launches with cuLaunchKernel, which takes no launch attributes. A kernel launched here
carries CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: it may begin while the kernel
before it in the stream is still running, as soon as every block of that kernel has executed
``griddepcontrol.launch_dependents`` (kernels/common.cuh, pdl_trigger), and it must call
``griddepcontrol.wait`` (pdl_wait) before it reads anything a kernel that may still be running
writes (common.cuh states what may be read before the wait). Captured
into a CUDA graph the relation becomes a programmatic edge, so a decode step's kernels overlap
their launch and their weight reads with the tail of the kernel before.

Only the driver library is needed (ctypes, no CuPy import here): the structures below follow
cuda.h (CUlaunchConfig, CUlaunchAttribute) and are checked by size in the CPU tests.
"""

from __future__ import annotations

import ctypes

import numpy as np

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID in cuda.h


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, 4 bytes of padding and a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_ubyte * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


_SCALARS = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float,
}


def pack_args(args) -> tuple[list, ctypes.Array]:
    """(the ctypes values, the void* array pointing at them) for cuLaunchKernelEx's kernelParams.
    Device arrays (anything with ``.data.ptr``) pass their address; scalars must be NumPy
    int32 / int64 / uint32 / uint64 / float32, as the kernels' parameters are declared."""
    values = []
    for i, a in enumerate(args):
        ptr = getattr(getattr(a, "data", None), "ptr", None)
        if isinstance(ptr, int):
            values.append(ctypes.c_void_p(ptr))
        elif isinstance(a, np.generic) and a.dtype in _SCALARS:
            values.append(_SCALARS[a.dtype](a.item()))
        else:
            raise TypeError(f"kernel argument {i}: {type(a).__name__} is neither a device array nor a "
                            f"NumPy int32/int64/uint32/uint64/float32 scalar")
    params = (ctypes.c_void_p * max(1, len(values)))()
    for i, v in enumerate(values):
        params[i] = ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
    return values, params


_driver = None


def _lib():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuGetErrorName.restype = ctypes.c_int
        _driver = lib
    return _driver


def launch_programmatic(func_ptr: int, name: str, grid, block, args, shared_mem: int, stream_ptr: int) -> None:
    """cuLaunchKernelEx of the CUfunction ``func_ptr`` with programmatic stream serialization."""
    values, params = pack_args(args)
    attr = LaunchAttribute()
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value[0] = 1  # programmaticStreamSerializationAllowed = 1 (an int, little-endian)
    cfg = LaunchConfig(*_dims(grid, block), int(shared_mem), ctypes.c_void_p(stream_ptr), ctypes.pointer(attr), 1)
    lib = _lib()
    # params points into values, alive until this function returns; the launch copies them
    rc = lib.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(func_ptr), params, None)
    _check(rc, f"{name}: cuLaunchKernelEx")


def _dims(grid, block) -> list:
    """gridDimX..Z, blockDimX..Z of LaunchConfig: grid and block padded with 1s to three dimensions."""
    return [int(v) for v in grid] + [1] * (3 - len(grid)) + [int(v) for v in block] + [1] * (3 - len(block))


def _check(rc: int, what: str) -> None:
    """Raise with the driver's name of the error code rc (0: success)."""
    if rc != 0:
        msg = ctypes.c_char_p()
        _lib().cuGetErrorName(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what} failed with {(msg.value or b'?').decode()} ({rc})")


def max_active_clusters(func_ptr: int, grid, block, shared_mem: int) -> int:
    """cuOccupancyMaxActiveClusters: how many clusters of the CUfunction ``func_ptr`` (its cluster
    shape compiled in, __cluster_dims__) can be resident at once with this block and dynamic shared
    memory (the function's opt-in shared-memory attribute must already allow it)."""
    lib = _lib()
    fn = lib.cuOccupancyMaxActiveClusters  # (CUDA 11.8 and later drivers)
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(LaunchConfig)]
    fn.restype = ctypes.c_int
    cfg = LaunchConfig(*_dims(grid, block), int(shared_mem), None, None, 0)
    n = ctypes.c_int(0)
    _check(fn(ctypes.byref(n), ctypes.c_void_p(func_ptr), ctypes.byref(cfg)), "cuOccupancyMaxActiveClusters")
    return int(n.value)

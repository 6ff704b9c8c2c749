"""Building kernels/*.cu with CuPy (NVRTC) once per process, and launching them checked.

``kernel("gemm", "gemm_tf32x3_bias")`` compiles kernels/gemm.cu (its local includes
inlined by kernel_source.read_source) the first time any of its kernels is asked
for, keeps the module for the life of the process and relies on CuPy's on-disk
compile cache across processes. A compile error names the file and carries NVRTC's log.
"""

from __future__ import annotations

import contextlib
import os
import time

import cupy as cp

from ...kernel_source import ARCH_SPECIFIC, BuildMarks, compile_progress, read_source
from . import driver

NVRTC_OPTIONS = ("--std=c++17",)

_modules: dict[tuple, cp.RawModule] = {}
_kernels: dict[tuple, cp.RawKernel] = {}


_sm_counts: dict[int, int] = {}


def sm_count() -> int:
    """Multiprocessors of the current device (cached: Device.attributes reads them all)."""
    dev = cp.cuda.Device().id
    n = _sm_counts.get(dev)
    if n is None:
        n = _sm_counts[dev] = int(cp.cuda.Device(dev).attributes["MultiProcessorCount"])
    return n


def _arch_options(name: str) -> tuple:
    arch = ARCH_SPECIFIC.get(name)
    return () if arch is None else (f"-arch={arch}",)


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message names the file and holds the log."""


def _cache_folder() -> str:
    """CuPy's on-disk kernel cache (CUPY_CACHE_DIR, else its default)."""
    get = getattr(cp.cuda.compiler, "get_cache_dir", None)
    return get() if get is not None else os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))


def module(name: str, defines: tuple[tuple[str, object], ...] = ()) -> cp.RawModule:
    """The compiled module of kernels/<name>.cu, with ``#define K V`` lines prepended."""
    key = (name, defines)
    mod = _modules.get(key)
    if mod is None:
        head = "".join(f"#define {k} {v}\n" for k, v in defines)
        src = head + read_source(f"{name}.cu")
        options = NVRTC_OPTIONS + _arch_options(name)
        mod = cp.RawModule(code=src, options=options)
        marks, mark_key = None, ""
        progress = compile_progress()  # kernel_source.set_compile_progress's
        if progress is not None:
            dev = cp.cuda.Device()
            mark_key = "\0".join((src, *options, str(dev.compute_capability), cp.__version__,
                                   str(cp.cuda.runtime.runtimeGetVersion())))
            marks = BuildMarks(_cache_folder())
            if marks.seen(mark_key):
                marks = None
            else:
                progress(f"[gpt2block] compiling kernels/{name}.cu for this GPU (first run only; cached after) ...")
        t0 = time.perf_counter()
        try:
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            raise KernelCompileError(f"kernels/{name}.cu failed to compile with NVRTC:\n{e}") from None
        if marks is not None:
            marks.mark(mark_key)
            progress(f"[gpt2block] compiled kernels/{name}.cu in {time.perf_counter() - t0:.1f} s")
        _modules[key] = mod
    return mod


def kernel(name: str, fn: str, defines: tuple[tuple[str, object], ...] = ()) -> cp.RawKernel:
    """The ``extern "C"`` kernel ``fn`` of kernels/<name>.cu."""
    key = (name, fn, defines)
    k = _kernels.get(key)
    if k is None:
        try:
            k = module(name, defines).get_function(fn)
        except cp.cuda.driver.CUDADriverError as e:
            raise KernelCompileError(f"kernels/{name}.cu has no kernel {fn!r} ({e})") from None
        _kernels[key] = k
    return k


_programmatic = False  # set by programmatic_launches()


@contextlib.contextmanager
def programmatic_launches(enabled: bool = True):
    """Within: launches marked ``programmatic=True`` use programmatic dependent launch
    (driver) on devices of compute capability 9.0 and up; everything else as usual."""
    global _programmatic
    before = _programmatic
    _programmatic = bool(enabled) and int(cp.cuda.Device().compute_capability) >= 90
    try:
        yield
    finally:
        _programmatic = before


_static_smem_bytes: dict = {}  # function handle -> its static shared memory (asked of the driver once)


def _static_smem(k: cp.RawKernel) -> int:
    ptr = k.kernel.ptr
    if ptr not in _static_smem_bytes:
        _static_smem_bytes[ptr] = k.shared_size_bytes
    return _static_smem_bytes[ptr]


def launch(k: cp.RawKernel, grid, block, args, shared_mem: int = 0, stream=None, programmatic: bool = False) -> None:
    """Launch ``k``; launch errors raise at once (CuPy checks cuLaunchKernel's return).
    ``programmatic``: ``k`` calls pdl_wait() before reading what the kernels ahead of it write
    (kernels/common.cuh: what it reads earlier is weights, or data finished before the last plain
    launch), so inside programmatic_launches() it may start before the kernel ahead has finished."""
    grid = tuple(int(g) for g in grid)
    if min(grid) <= 0:
        raise ValueError(f"{k.name}: empty grid {grid}")
    # past 48 KB of static and dynamic shared memory together a block needs the opt-in attribute
    if shared_mem and shared_mem + _static_smem(k) > 48 * 1024 and k.max_dynamic_shared_size_bytes < shared_mem:
        k.max_dynamic_shared_size_bytes = shared_mem
    block = tuple(int(b) for b in block)
    if programmatic and _programmatic:
        s = stream if stream is not None else cp.cuda.get_current_stream()
        driver.launch_programmatic(k.kernel.ptr, k.name, grid, block, args, shared_mem, s.ptr)
    else:
        k(grid, block, args, shared_mem=shared_mem, stream=stream)

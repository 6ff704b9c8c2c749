"""The CUDA backend: the model on the GPU through our kernels (kernels/*.cu built with CuPy's NVRTC).

    runner.py        CudaRunner, CudaCache, BlockWorkspace, run_block: prefill, the decode step, greedy steps
    decode_paths.py  decode_path: the table choosing a decode step's path; the cluster path (DecodeClusters)
    linear.py        GEMM tiles (mma.sync and wgmma), weight planes, GEMV plans
    lm_head.py       the LM head's int8 screen
    attention.py     prefill (one sequence, or packed segments of several rows) and decode attention
    packing.py       a packed prefill pass's int tables: token ids / rows / positions, attention tiles (plain NumPy)
    ops.py           layernorm, embedding, KV-cache store, argmax
    sampler.py       the device sampler (kernels/sampler.cu): DeviceSampler's upload, launch and results
    sampler_params.py  its parameter words and history rows (plain NumPy)
    solve.py         solve()'s graphs, workspaces and weight planes, in states taken per call
    state_pool.py    StatePool: at most N states, each held by one caller at a time (threads)
    modules.py       building (NVRTC), caching and launching modules
    driver.py        ctypes driver calls: programmatic launch, cluster occupancy
    build.py         every kernel build parameter (-D NAME=VALUE): the one owner

CudaRunner is imported on first use, so that the modules without CuPy (build, decode_paths, driver,
packing, sampler_params, state_pool) import on a machine without it (the CPU tests).
"""

from __future__ import annotations


def __getattr__(name: str):
    if name == "CudaRunner":
        from .runner import CudaRunner

        return CudaRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""A machine's first build of a kernel module is reported (kernel_source.set_compile_progress, which the
CLI points at stderr; backends/cuda_modules.module reports); a later build of the same module, from
CuPy's cache, says nothing."""

import numpy as np


def test_first_build_is_reported_once(tmp_path, monkeypatch):
    from gpt2block import kernel_source
    from gpt2block.backends.cuda import modules as cuda_modules

    seen = []
    monkeypatch.setattr(cuda_modules, "_cache_folder", lambda: str(tmp_path))
    tag = (("GPT2BLOCK_PROGRESS_TEST", int(np.random.default_rng().integers(1, 2**31))),)  # a module of its own
    kernel_source.set_compile_progress(seen.append)
    try:
        cuda_modules.module("embedding", tag)
        assert len(seen) == 2, seen
        assert "compiling kernels/embedding.cu" in seen[0] and "first run" in seen[0]
        assert seen[1].startswith("[gpt2block] compiled kernels/embedding.cu in ")
        cuda_modules._modules.pop(("embedding", tag))
        cuda_modules.module("embedding", tag)  # built again in this process: CuPy's cache, no message
        assert len(seen) == 2, seen
    finally:
        kernel_source.set_compile_progress(None)
        cuda_modules._modules.pop(("embedding", tag), None)

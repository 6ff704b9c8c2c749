"""GPU tests: every test under tests/gpu carries the ``gpu`` marker and is skipped,
with the reason, where CuPy or a CUDA device is missing (CI has neither)."""

import pytest

from gpt2block.backends import cuda_status

_OK, _WHY = cuda_status()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not _OK:
                item.add_marker(pytest.mark.skip(reason=f"no GPU: {_WHY}"))


@pytest.fixture(scope="session")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="session")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch

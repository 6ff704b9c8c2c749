"""The one-file export (gpt2block export-cuda) built with nvcc, loaded with ctypes and run on
device pointers under the challenge's conditions."""

import ctypes
import shutil
import subprocess

import pytest
from torch_ref import challenge_weights, torch_block

from gpt2block.export import export_cuda


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    d = tmp_path_factory.mktemp("export")
    src = export_cuda(d / "solution.cu")
    so = d / "solution.so"
    r = subprocess.run([nvcc, "-std=c++17", "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-o", str(so),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(so))
    lib.solve.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.solve.restype = None
    return lib


@pytest.mark.parametrize("seq_len", [1, 2, 4, 16, 30, 64, 100, 128, 256, 1024, 1025, 8192])
@pytest.mark.parametrize("biases", [False, True], ids=["zero-bias", "bias"])
def test_export_matches_challenge(solution, torch_cuda, seq_len, biases):
    torch = torch_cuda
    gen = torch.Generator().manual_seed(seq_len * 2 + biases)
    x = (torch.rand(seq_len, 768, generator=gen) * 2 - 1).cuda()
    w = challenge_weights(torch, biases=biases, gen=gen)
    out = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    solution.solve(x.data_ptr(), out.data_ptr(), w.data_ptr(), seq_len)
    torch.cuda.synchronize()
    ref32 = torch_block(x, w)
    torch.testing.assert_close(out, ref32, atol=1e-3, rtol=1e-3)
    ref64 = torch_block(x.double(), w.double())
    ours = (out.double() - ref64).abs().max().item()
    peer = (ref32.double() - ref64).abs().max().item()
    assert ours <= 2 * peer + 5e-7, f"error vs float64 {ours:.3g} > 2 x torch fp32's {peer:.3g}"


def test_export_zero_input(solution, torch_cuda):
    torch = torch_cuda
    x = torch.zeros(4, 768, device="cuda")
    w = challenge_weights(torch, biases=True, gen=torch.Generator().manual_seed(1))
    out = torch.full_like(x, float("nan"))
    solution.solve(x.data_ptr(), out.data_ptr(), w.data_ptr(), 4)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch_block(x, w), atol=1e-3, rtol=1e-3)

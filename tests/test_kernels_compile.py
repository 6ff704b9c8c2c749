"""CI has no GPU but has nvcc: every kernels/*.cu must compile for sm_80 with its build parameters
(backends/cuda/build.py; every build of each for sm_90a in test_build_params), and the one-file export
of `gpt2block export-cuda` must compile with nvcc alone."""

import shutil
import subprocess

import pytest

from gpt2block.kernel_source import kernels_dir

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
SOURCES = sorted(p.name for p in kernels_dir().glob("*.cu"))


def _nvcc(args, cwd):
    r = subprocess.run([NVCC, "-std=c++17", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"nvcc {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_kernel_sources_present():
    for must in ("common.cuh", "layout.cuh", "layernorm.cu", "gemm.cu", "gemv.cu", "attention.cu", "solve.cu"):
        assert (kernels_dir() / must).is_file(), must


def test_layout_header_is_generated_from_layout_py():
    from gpt2block.layout import cuda_header

    assert (kernels_dir() / "layout.cuh").read_text() == cuda_header(), (
        "kernels/layout.cuh is stale: python -m gpt2block.layout > kernels/layout.cuh"
    )


def _defines(name: str) -> list:
    """The first of the product's builds of kernels/<name> (backends/cuda/build.py: MODULES; test_build_params builds
    every one of them for sm_90a)."""
    from gpt2block.backends.cuda.build import MODULES, nvcc_define

    return [nvcc_define(k, v) for k, v in MODULES[name.removesuffix(".cu")][0]]


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80"])  # sm_90a: every build, test_build_params
@pytest.mark.parametrize("name", SOURCES)
def test_kernel_compiles(name, arch, tmp_path):
    out = _nvcc([f"-arch={arch}", f"-I{kernels_dir()}", "-cubin", *_defines(name), "-o", str(tmp_path / "k.cubin"),
                 str(kernels_dir() / name)], tmp_path)
    assert "error" not in out.lower()


@needs_nvcc
def test_export_compiles_for_every_arch(tmp_path):
    """The one-file export, in both precisions, compiles with nvcc alone for every GPU it names (export.ARCHS:
    the T4's sm_75 to sm_100): the device code of each as -cubin, all at
    once, and one whole participant's build (-shared, host code included) of the quickest."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from gpt2block.export import ARCHS, NVCC_FLAGS, PRECISIONS, arch_flag, export_cuda

    srcs = {p: export_cuda(tmp_path / f"solution-{p}.cu", p) for p in PRECISIONS}
    for src in srcs.values():
        text = src.read_text()
        assert '#include "' not in text, "the export still includes project files"
        assert 'extern "C" void solve(const float* x, float* output, const float* weights, int seq_len)' in text
        assert f"nvcc {NVCC_FLAGS} -arch=sm_XX" in text, "the header names the flags the file was tested with"
    jobs = [(p, a) for p in PRECISIONS for a in ARCHS]

    def cubin(job):
        p, a = job
        return _nvcc(["-O3", arch_flag(a), "-cubin", "-o", str(tmp_path / f"{p}-{a}.cubin"), str(srcs[p])], tmp_path)

    def whole():
        return _nvcc([*NVCC_FLAGS.split(), arch_flag("sm_75"), "-o", str(tmp_path / "solution.so"), str(srcs["fp32"])],
                     tmp_path)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        done = [pool.submit(whole)] + [pool.submit(cubin, j) for j in jobs]
        for f in done:
            f.result()
    assert (tmp_path / "solution.so").stat().st_size > 0
    for p, a in jobs:
        assert (tmp_path / f"{p}-{a}.cubin").stat().st_size > 0, (p, a)


@pytest.mark.parametrize("name", SOURCES)
def test_read_source_leaves_no_local_include(name):
    """NVRTC gets one text: every local #include must have been inlined (a left one fails there)."""
    import re

    from gpt2block.kernel_source import read_source

    text = read_source(name)
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M)


def test_build_marks(tmp_path):
    """kernel_source.BuildMarks: a build is unseen until marked; a folder that cannot be written
    costs nothing but the mark."""
    from gpt2block.kernel_source import BuildMarks

    marks = BuildMarks(tmp_path / "cache")
    assert not marks.seen("source A")
    marks.mark("source A")
    assert marks.seen("source A") and not marks.seen("source B")
    blocker = tmp_path / "file"
    blocker.write_text("")
    stuck = BuildMarks(blocker / "below")  # a folder under a file: mkdir fails
    stuck.mark("source A")
    assert not stuck.seen("source A")

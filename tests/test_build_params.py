"""cuda.build owns every kernel build parameter: a kernel refuses to build without each one it needs
(``#ifndef NAME`` / ``#error``), never defines one itself, and every module builds (nvcc, where on PATH)
with exactly the defines cuda.build gives it. Read as text and plain Python: CI has no CuPy."""

import re
import shutil
import subprocess

import pytest

from gpt2block.backends.cuda import build
from gpt2block.kernel_source import ARCH_SPECIFIC, kernels_dir

NVCC = shutil.which("nvcc")
KERNEL_FILES = sorted(p.name for p in kernels_dir().iterdir() if p.suffix in (".cu", ".cuh"))
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_REQUIRED = re.compile(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*error\b", re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)


def _text(name: str) -> str:
    return (kernels_dir() / name).read_text()


def _closure(name: str, seen=None) -> list:
    """kernels/<name> and every project file it includes, each once."""
    seen = [] if seen is None else seen
    if name in seen or not (kernels_dir() / name).is_file():
        return seen
    seen.append(name)
    for inc in _INCLUDE.findall(_text(name)):
        _closure(inc, seen)
    return seen


def _required(name: str) -> set:
    return {n for f in _closure(name) for n in _REQUIRED.findall(_text(f))}


def _owned() -> set:
    return {k for builds in build.MODULES.values() for b in builds for k, _ in b}


def test_every_module_has_builds():
    sources = {p.stem for p in kernels_dir().glob("*.cu")}
    assert sources == set(build.MODULES), "cuda.build.MODULES must list every kernels/*.cu"
    for name, builds in build.MODULES.items():
        assert builds, name


def test_the_kernels_require_what_build_owns():
    """Every #ifndef NAME / #error of a module's files is a parameter build.py gives every build of it."""
    for name, builds in build.MODULES.items():
        need = _required(f"{name}.cu")
        for b in builds:
            names = [k for k, _ in b]
            assert len(names) == len(set(names)), f"{name}: a define given twice in {b}"
            missing = need - set(names)
            assert not missing, f"kernels/{name}.cu needs {sorted(missing)}; cuda.build gives {names}"


def test_build_gives_only_what_the_kernels_require():
    """And nothing else: a define a kernel does not require would be a default on the kernel's side."""
    for name, builds in build.MODULES.items():
        need = _required(f"{name}.cu")
        for b in builds:
            extra = {k for k, _ in b} - need
            assert not extra, f"cuda.build gives kernels/{name}.cu {sorted(extra)}, which it does not require"


def test_no_kernel_defines_an_owned_parameter():
    owned = _owned()
    for f in KERNEL_FILES:
        clash = set(_DEFINE.findall(_text(f))) & owned
        assert not clash, f"kernels/{f} #defines {sorted(clash)}, which cuda.build owns"


def test_required_names_are_owned():
    owned = _owned()
    for f in KERNEL_FILES:
        stray = set(_REQUIRED.findall(_text(f))) - owned
        assert not stray, f"kernels/{f} requires {sorted(stray)}, which no cuda.build module gives"


def test_no_switch_defaults_left():
    """A kernel keeps no `#ifndef NAME / #define NAME default` pair: either a constant or a parameter."""
    pair = re.compile(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*define\s+\1\b", re.M)
    for f in KERNEL_FILES:
        got = [n for n in pair.findall(_text(f)) if not n.endswith("_CUH")]
        assert not got, f"kernels/{f} keeps defaults for {got}"


def test_host_constants_are_read_from_build():
    """No host module but build.py states a kernel constant as a number of its own: a line such as
    ``GEMV_MAX_M = 8  # = GEMV_MAX_M in kernels/gemv.cu`` is what build.py replaces."""
    from pathlib import Path

    kernel_names = _owned() | {n for f in KERNEL_FILES for n in _DEFINE.findall(_text(f))}
    folder = Path(build.__file__).parent
    assign = re.compile(r"^\s*(_?[A-Z][A-Z0-9_]*)(?:\s*,\s*_?[A-Z][A-Z0-9_]*)*\s*=\s*[\d(]", re.M)
    for py in sorted(folder.glob("*.py")):
        if py.name == "build.py":
            continue
        for line in py.read_text().splitlines():
            if not assign.match(line):
                continue
            names = set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", line)) & kernel_names
            assert not names, f"{py.name}: {line.strip()!r} restates {sorted(names)}; read it from build.py"


def test_derived_values():
    assert build.GEMV_RPP == build.GEMV_THREADS // build.GEMV_TPR
    assert build.ARGMAX_CHUNK == build.ARGMAX_UNROLL * build.ARGMAX_THREADS
    assert build.LM_SCREEN_MAX_K == 256 * build.LM_SCREEN_MAX_J
    assert build.DC_D % build.DC_THREADS == 0
    # the one-token builds' settings by width keep one build a model for its decode products
    for d in (768, 1024, 1280, 1600):
        for bf16 in (False, True):
            got = {build.gemv_nt(n, k, 1, bf16, ln) for n, k, ln in
                   ((3 * d, d, True), (d, d, False), (4 * d, d, True), (d, 4 * d, False), (50257, d, True))}
            assert len(got) == 1, (d, bf16)


def test_refusals():
    with pytest.raises(ValueError, match="GEMM variant"):
        build.gemm_wgmma_planes("fp16")
    with pytest.raises(ValueError, match="1 to 8 blocks"):
        build.attention(9)
    with pytest.raises(ValueError, match="LM_SCREEN_J = 2 takes K up to 512"):
        build.lm_screen(5000, 768, True, 2)
    with pytest.raises(ValueError, match="takes K up to 2048"):
        build.lm_screen_j(2056)
    with pytest.raises(ValueError, match="tokens"):
        build.gemv_nt(768, 768, 3, False)


_BUILDS = [(name, i) for name, builds in build.MODULES.items() for i in range(len(builds))]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("name,i", _BUILDS, ids=[f"{n}-{i}" for n, i in _BUILDS])
def test_each_build_compiles_for_sm_90a(name, i, tmp_path):
    """Exactly build.py's defines, nothing else: the kernels' #errors catch a missing one."""
    defines = [build.nvcc_define(k, v) for k, v in build.MODULES[name][i]]
    arch = ARCH_SPECIFIC.get(name, "sm_90a")
    r = subprocess.run([NVCC, "-std=c++17", f"-gencode=arch=compute_{arch[3:]},code={arch}", f"-I{kernels_dir()}",
                        "-cubin", *defines, "-o", str(tmp_path / "k.cubin"), str(kernels_dir() / f"{name}.cu")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{name} with {defines}:\n{r.stderr[-4000:]}"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_a_missing_parameter_is_refused(tmp_path):
    defines = [build.nvcc_define(k, v) for k, v in build.sampling() if k != "ARGMAX_UNROLL"]
    r = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", f"-I{kernels_dir()}", "-cubin", *defines,
                        "-o", str(tmp_path / "k.cubin"), str(kernels_dir() / "sampling.cu")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "ARGMAX_UNROLL is set by gpt2block/backends/cuda/build.py" in r.stderr


def test_nvcc_flags_give_a_modules_build():
    from gpt2block.backends.cuda.build import MODULES, nvcc_flags

    assert nvcc_flags("layernorm") == " ".join(f"-D{k}={v}" for k, v in MODULES["layernorm"][0])
    assert "\\," in nvcc_flags("solve") and " " not in nvcc_flags("solve").replace(" -D", "")
    assert "-DLN_WARPS=" in nvcc_flags("layernorm") and "-DLN_MAX_VEC=13" in nvcc_flags("layernorm", 1)
    with pytest.raises(ValueError, match="no kernels/nothing.cu module"):
        nvcc_flags("nothing")

"""The decode kernels' loads that should go out before pdl_wait() really do, in the SASS.

ptxas moves read-only loads (ld.global.nc, __ldg) past griddepcontrol.wait (ACQBULK in the
SASS), even from a volatile asm; the weight loads of the projection GEMVs did so until version 17
(docs/PERFORMANCE.md) and waited for the kernel before them to finish. ld_pre_wait4 (common.cuh)
keeps them ahead. Needs nvcc and cuobjdump (skipped where either is missing)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpt2block.kernel_source import kernels_dir

NVCC = shutil.which("nvcc")


def _cuobjdump():
    found = shutil.which("cuobjdump")
    if found is None and NVCC is not None:
        found = str(Path(NVCC).resolve().parent / "cuobjdump")
    return found if found and os.access(found, os.X_OK) else None


CUOBJDUMP = _cuobjdump()
pytestmark = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")

CASES = [  # (source, kernel, -D flags)
    ("gemv.cu", "gemv_f32_nt_bias_residual_m1", ()),
    ("gemv.cu", "gemv_f32_nt_bias_residual_m8", ()),
    ("gemv.cu", "gemv_bf16_nt_bias_residual_m1", ()),
    ("gemv.cu", "gemv_bf16_nt_bias_residual_m1", ("-DGEMV_NT_ROWS_M1_BF16=4",)),  # gpt2's width
    ("gemv.cu", "gemv_f32_nt_bias_residual_m1", ("-DGEMV_NT_MIN_BLOCKS_M1_F32=4",)),  # medium's, xl's
    ("gemv.cu", "gemv_f32_nt_ln_bias_gelu_m1", ("-DGEMV_NT_MIN_BLOCKS_M1_F32=4",)),
    ("gemv.cu", "gemv_bf16_nt_bias_residual_m1", ("-DGEMV_NT_MIN_BLOCKS_M1_BF16=4",)),  # medium's
    ("gemv.cu", "gemv_f32_nt_ln_bias_kv_m1", ()),
    ("gemv.cu", "gemv_f32_nt_ln_bias_gelu_m1", ()),
    ("attention.cu", "attention_decode_f32", ("-DATTN_DEC_CLUSTER=8",)),
    ("attention.cu", "attention_decode_f32", ("-DATTN_DEC_CLUSTER=4",)),
]


@pytest.fixture(scope="module")
def sass(tmp_path_factory):
    cache = {}

    def get(source, fn, defines):
        key = (source, defines)
        if key not in cache:
            out = tmp_path_factory.mktemp("sass") / "k.cubin"
            cmd = [NVCC, "-std=c++17", "-gencode=arch=compute_90,code=sm_90", f"-I{kernels_dir()}",
                   *defines, "-cubin", "-o", str(out), str(kernels_dir() / source)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
            cache[key] = out
        cmd = [CUOBJDUMP, "-sass", "-fun", fn, str(cache[key])]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
        return r.stdout

    return get


@pytest.mark.parametrize("source,fn,defines", CASES)
def test_wide_loads_issued_before_the_wait(sass, source, fn, defines):
    lines = sass(source, fn, defines).splitlines()
    wait = [i for i, s in enumerate(lines) if "ACQBULK" in s]
    loads = [i for i, s in enumerate(lines) if "LDG.E.128" in s]
    assert wait and loads, f"{fn}: no griddepcontrol.wait or no 16-byte load in the SASS"
    before = sum(1 for i in loads if i < wait[0])
    assert before >= 4, f"{fn}: {before} 16-byte loads before the wait (weights / old keys should be)"

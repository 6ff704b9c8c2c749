"""Where the CUDA sources live and how they become one translation unit.

kernels/*.cu sit at the top of the repository and ship inside the package as
``gpt2block.kernels``. A source's ``#include "x.cuh"`` / ``#include "x.cu"`` lines
of files in that folder are inlined here (each file once, like #pragma once), so:

- NVRTC compiles one self-contained string per module, and CuPy's compile cache,
  which keys on the source text, sees every header change;
- ``gpt2block export-cuda`` writes kernels/solve.cu with everything it includes
  inlined: one file that nvcc compiles alone.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# Sources that use one architecture's own instructions (wgmma), and that architecture: they are
# compiled for it alone, and used only on devices of it.
ARCH_SPECIFIC = {"gemm_wgmma": "sm_90a", "attention_wgmma": "sm_90a", "decode_cluster": "sm_90a"}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*(//.*)?$')  # a trailing // comment is allowed
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")


def kernels_dir() -> Path:
    """The folder holding the .cu sources: the installed package's, else the repository's."""
    here = Path(__file__).resolve().parent
    for cand in (here / "kernels", here.parent / "kernels"):
        if (cand / "common.cuh").is_file():
            return cand
    raise FileNotFoundError(
        f"gpt2block's CUDA sources (kernels/*.cu) were not found next to {here}; the installation is incomplete"
    )


def read_source(name: str, _seen: set | None = None) -> str:
    """The text of kernels/<name> with its local includes inlined, each file once."""
    seen = set() if _seen is None else _seen
    if name in seen:
        return ""
    seen.add(name)
    path = kernels_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {path} does not exist")
    out = [f"// ---- {name} ----"]
    for line in path.read_text().splitlines():
        m = _INCLUDE.match(line)
        if m and (kernels_dir() / m.group(1)).is_file():
            out.append(read_source(m.group(1), seen))
        elif _PRAGMA_ONCE.match(line):
            continue
        else:
            out.append(line)
    return "\n".join(out) + "\n"


_compile_progress = None  # set_compile_progress's callable


def set_compile_progress(report) -> None:
    """``report(message)`` is told of each kernel module this machine compiles for the first time
    (backends/cuda/modules.py: a line before and one after, with the seconds it took), so that a first
    run's start-up is not silent; None: no messages. Later builds of the same module come from CuPy's
    on-disk cache and say nothing. (Here, not in cuda/modules.py, so that the CLI sets it without CuPy.)"""
    global _compile_progress
    _compile_progress = report


def compile_progress():
    """The callable set by set_compile_progress, or None."""
    return _compile_progress


class BuildMarks:
    """Which module builds this machine has made before: one empty file per build, named by a hash of
    everything the compiled code depends on (source text with its defines, options, target, compiler),
    in ``folder`` (CuPy's kernel cache folder, so that clearing that cache clears them too). The CLI
    uses it to say, on a machine's first run only, that kernels are being compiled and how long it took."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def _path(self, key_text: str) -> Path:
        return self.folder / f"gpt2block-built-{hashlib.sha256(key_text.encode()).hexdigest()[:32]}"

    def seen(self, key_text: str) -> bool:
        return self._path(key_text).is_file()

    def mark(self, key_text: str) -> None:
        """Record a build; a folder that cannot be written only costs the message next time."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._path(key_text).touch()
        except OSError:
            pass

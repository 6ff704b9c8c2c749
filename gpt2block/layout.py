"""The flat block layout: the one owner of where each tensor of a block lives.

One GPT-2 block is one contiguous float32 buffer. The order is the reference
table's (REFERENCE.md), for any width D:

    ln_1 (g1, b1) | W_qkv [D, 3D] | b_qkv [3D] | W_attn [D, D] | b_attn [D]
    | ln_2 (g2, b2) | W_fc [D, 4D] | b_fc [4D] | W_proj [4D, D] | b_proj [D]

Matrices are row-major [in, out], the orientation of Hugging Face's Conv1D
weights, so packing copies them without a transpose. Every other module
(packer, both backends, solve, the CUDA export, tests) imports offsets from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

# (field, Hugging Face suffix inside h.N., shape as a function of D)
FIELDS: tuple[tuple[str, str, object], ...] = (
    ("ln1_g", "ln_1.weight", lambda d: (d,)),
    ("ln1_b", "ln_1.bias", lambda d: (d,)),
    ("w_qkv", "attn.c_attn.weight", lambda d: (d, 3 * d)),
    ("b_qkv", "attn.c_attn.bias", lambda d: (3 * d,)),
    ("w_attn", "attn.c_proj.weight", lambda d: (d, d)),
    ("b_attn", "attn.c_proj.bias", lambda d: (d,)),
    ("ln2_g", "ln_2.weight", lambda d: (d,)),
    ("ln2_b", "ln_2.bias", lambda d: (d,)),
    ("w_fc", "mlp.c_fc.weight", lambda d: (d, 4 * d)),
    ("b_fc", "mlp.c_fc.bias", lambda d: (4 * d,)),
    ("w_proj", "mlp.c_proj.weight", lambda d: (4 * d, d)),
    ("b_proj", "mlp.c_proj.bias", lambda d: (d,)),
)

FIELD_NAMES = tuple(f[0] for f in FIELDS)
HF_SUFFIXES = {f[0]: f[1] for f in FIELDS}


@dataclass(frozen=True)
class Slot:
    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class BlockLayout:
    """Offsets (in float32 elements) of every tensor in one block of width d."""

    d: int
    slots: tuple[Slot, ...]
    numel: int

    def __getitem__(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(f"no tensor {name!r} in the block layout")

    def offset(self, name: str) -> int:
        return self[name].offset

    def views(self, flat):
        """Named views into one flat block buffer (NumPy or CuPy): name -> array of its shape."""
        if flat.ndim != 1 or flat.shape[0] != self.numel:
            raise ValueError(f"a block of width {self.d} has {self.numel} elements; got shape {tuple(flat.shape)}")
        return {s.name: flat[s.offset:s.end].reshape(s.shape) for s in self.slots}


@lru_cache(maxsize=None)
def block_layout(d: int) -> BlockLayout:
    """The layout of one block of width ``d`` (d must be a positive multiple of 64)."""
    if d <= 0 or d % 64:
        raise ValueError(f"block width must be a positive multiple of 64 (head dim 64); got {d}")
    slots, off = [], 0
    for name, _, shape_fn in FIELDS:
        slot = Slot(name, off, tuple(shape_fn(d)))
        slots.append(slot)
        off = slot.end
    return BlockLayout(d, tuple(slots), off)


def block_numel(d: int) -> int:
    """Floats in one block: 12 D^2 + 13 D (7,087,872 for D = 768)."""
    return block_layout(d).numel


def cuda_header(d: int = 768) -> str:
    """kernels/layout.cuh: the block offsets for width d as C macros, generated from this module.

    The header is committed so that kernels/solve.cu compiles alone; a test checks that it
    equals this function's output, so layout.py stays the one owner of the offsets.
    Regenerate with: python -m gpt2block.layout > kernels/layout.cuh
    """
    lay = block_layout(d)
    lines = [
        "// layout.cuh: offsets (in floats) of one GPT-2 block in its flat buffer, for the solve() export.",
        "// GENERATED from gpt2block/layout.py (python -m gpt2block.layout > kernels/layout.cuh); do not edit.",
        "#pragma once",
        "",
        f"#define BLOCK_D {d}",
    ]
    for s in lay.slots:
        lines.append(f"#define O_{s.name.upper()} {s.offset}  // {' x '.join(map(str, s.shape))}")
    lines.append(f"#define BLOCK_NUMEL {lay.numel}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(cuda_header(), end="")

"""The packed model: config, the stacked flat blocks, embeddings and ln_f, in host memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import GPT2Config
from .layout import block_layout, block_numel


@dataclass
class ModelWeights:
    config: GPT2Config
    blocks: np.ndarray  # [n_layer, block_numel(D)] float32, one flat block per row (layout.py)
    wte: np.ndarray  # [vocab, D] token embeddings; also the tied LM head
    wpe: np.ndarray  # [n_positions, D] position embeddings
    ln_f_g: np.ndarray  # [D]
    ln_f_b: np.ndarray  # [D]

    def __post_init__(self):
        c = self.config
        want = {
            "blocks": (c.n_layer, block_numel(c.n_embd)),
            "wte": (c.vocab_size, c.n_embd),
            "wpe": (c.n_positions, c.n_embd),
            "ln_f_g": (c.n_embd,),
            "ln_f_b": (c.n_embd,),
        }
        for name, shape in want.items():
            arr = getattr(self, name)
            if tuple(arr.shape) != shape:
                raise ValueError(f"packed weights: {name} has shape {tuple(arr.shape)}, expected {shape}")
            if arr.dtype != np.float32:
                raise ValueError(f"packed weights: {name} has dtype {arr.dtype}, expected float32")

    def block(self, i: int) -> dict[str, np.ndarray]:
        """Named views of block ``i`` (see layout.FIELDS)."""
        return block_layout(self.config.n_embd).views(self.blocks[i])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.blocks, self.wte, self.wpe, self.ln_f_g, self.ln_f_b))

    @classmethod
    def random(cls, config: GPT2Config, seed: int = 0, std: float = 0.02) -> "ModelWeights":
        """Random weights in GPT-2's initialisation ranges (tests and benchmarks)."""
        rng = np.random.default_rng(seed)
        lay = block_layout(config.n_embd)
        blocks = np.empty((config.n_layer, lay.numel), np.float32)
        for i in range(config.n_layer):
            v = lay.views(blocks[i])
            for name, arr in v.items():
                if name.startswith("ln") and name.endswith("_g"):
                    arr[...] = rng.uniform(0.8, 1.2, arr.shape)
                elif arr.ndim == 1:
                    arr[...] = rng.normal(0.0, std, arr.shape)
                else:
                    arr[...] = rng.normal(0.0, std, arr.shape)
        f32 = lambda *s: rng.normal(0.0, std, s).astype(np.float32)  # noqa: E731
        return cls(
            config,
            blocks,
            f32(config.vocab_size, config.n_embd),
            f32(config.n_positions, config.n_embd) * 0.5,
            rng.uniform(0.8, 1.2, config.n_embd).astype(np.float32),
            f32(config.n_embd),
        )


def randomize_hf_model(model, seed: int) -> None:
    """Fresh values for every parameter of a transformers GPT-2 model (torch), so that no weight is
    a trivial 1 or 0: matrices, embeddings and biases N(0, 0.02), LayerNorm gains 1 + N(0, 0.1)
    and LayerNorm biases N(0, 0.05). Used to write random checkpoints in Hugging Face's format."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if ".ln_" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif ".ln_" in name:
                p.copy_(0.05 * noise)
            else:
                p.copy_(0.02 * noise)

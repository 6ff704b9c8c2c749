"""The one-token decode step in thread block clusters: every transformer block of a batch-1 step
with bf16 weights in one persistent kernel, one cluster of CLUSTER blocks per head
(kernels/decode_cluster.cu, which says why and how).

``DecodeClusters(block_views, dec_mats, config)`` owns the kernel's scratch (the projections' partials,
the grid counter). ``fits()`` says whether this device and model can run it: bf16 weights, n_embd ==
WIDTH, compute capability 9.0 (the sm_90a build), the kernel's shared memory, and every cluster resident
at once (the driver's count of co-resident clusters); where it does, and only then, it packs the model's
decode matrices into the kernel's order (each block's share of a layer one contiguous stretch:
``pack_matrices``, which the CPU tests check against the kernel's description; 170 MB at gpt2). The
runner asks before it captures a step (the packing allocates and launches). ``launch`` runs the step's
layers on x in place.
"""

from __future__ import annotations

import numpy as np

from ..config import HEAD_DIM, GPT2Config
from . import cuda_build as build
from . import cuda_launch

CLUSTER = build.DC_C  # blocks per cluster (one cluster per head)
WIDTH = build.DC_D  # the width the kernel is built for (gpt2)
THREADS = build.DC_THREADS
PART = build.DC_PART  # floats of an attention partial
GROUPS = THREADS // 16  # DC_GROUPS: 16-lane attention groups of a block
VECTORS = ("ln1_g", "ln1_b", "b_attn", "ln2_g", "ln2_b", "b_proj")  # a layer's vector slot, in order


def smem_bytes(d: int = WIDTH) -> int:
    """DC_SMEM: the kernel's dynamic shared memory (decode_cluster.cu lists the pieces)."""
    e = block_share(d)
    floats = 2 * 6 * d + 2 * d + 3 * HEAD_DIM + (GROUPS + CLUSTER) * PART + HEAD_DIM + 4 * HEAD_DIM
    return 2 * e + 4 * floats + 8 * 2 * (THREADS // 32) + 8 * 6


def block_share(d: int) -> int:
    """DC_E: bf16 elements of one block's share of a layer (QKV, W_attn, W_fc, W_proj)."""
    qr, o_rows, f_rows = HEAD_DIM // CLUSTER, d // CLUSTER, 4 * HEAD_DIM // CLUSTER
    return 3 * qr * d + o_rows * HEAD_DIM + f_rows * d + o_rows * 4 * HEAD_DIM


def pack_matrices(xp, w_qkv, w_attn, w_fc, w_proj):
    """One layer's decode matrices ([N, K], as the runner keeps them) in the kernel's order:
    [H, CLUSTER, DC_E], block (c, r)'s share contiguous: q, k, v rows 64c + 8r + j of w_qkv [3][8][D];
    rows 96r + i, columns 64c + j of w_attn [96][64]; rows 256c + 32r + i of w_fc [32][D]; rows 96r + i,
    columns 256c + j of w_proj [96][256] (at D = 768). ``xp``: numpy or cupy."""
    d = w_attn.shape[0]
    h, c = d // HEAD_DIM, CLUSTER
    qr, o_rows, f_rows, f_cols = HEAD_DIM // c, d // c, 4 * HEAD_DIM // c, 4 * HEAD_DIM
    q = w_qkv.reshape(3, h, c, qr, d).transpose(1, 2, 0, 3, 4).reshape(h, c, -1)
    o = w_attn.reshape(c, o_rows, h, HEAD_DIM).transpose(2, 0, 1, 3).reshape(h, c, -1)
    f = w_fc.reshape(h, c, f_rows * d)
    p = w_proj.reshape(c, o_rows, h, f_cols).transpose(2, 0, 1, 3).reshape(h, c, -1)
    return xp.concatenate([q, o, f, p], axis=2)


class DecodeClusters:
    """The cluster decode kernel of one model (its weights) on the current device."""

    def __init__(self, block_views, dec_mats, config: GPT2Config):
        import cupy as cp

        self.config = c = config
        d = c.n_embd
        self.ok_shape = d == WIDTH and c.n_layer >= 1 and dec_mats[0]["w_qkv"].dtype == np.uint16
        self.kernel = None
        self._fits = None
        self._model = (block_views, dec_mats)  # packed by fits() where the kernel runs
        if not self.ok_shape:
            return
        h = d // HEAD_DIM
        self.part1 = cp.empty((h, d), cp.float32)  # the projections' partials, one row a cluster
        self.part2 = cp.empty((h, d), cp.float32)
        self.sync = cp.zeros(2, cp.uint32)  # the grid counter and the blocks out: zero between launches
        self.grid = h * CLUSTER
        self.smem = smem_bytes(d)

    def fits(self) -> bool:
        """Whether this model runs on this device in clusters (worked out once; packs the weights where
        it does)."""
        if self._fits is None:
            self._fits = self._check()
            if self._fits:
                self._pack()
            self._model = None
        return self._fits

    def _pack(self) -> None:
        import cupy as cp

        block_views, dec_mats = self._model
        self.wpk = cp.stack([pack_matrices(cp, m["w_qkv"], m["w_attn"], m["w_fc"], m["w_proj"]) for m in dec_mats])
        self.vecs = cp.stack([cp.stack([w[k] for k in VECTORS]) for w in block_views])  # [L, 6, D]
        self.bqf = cp.stack([cp.concatenate([w["b_qkv"], w["b_fc"]]) for w in block_views])  # [L, 7D]

    def _check(self) -> bool:
        import cupy as cp

        if not self.ok_shape or cp.cuda.Device().compute_capability != "90":
            return False
        if cp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] < self.smem:
            return False
        from .cuda_modules import kernel  # (CuPy: imported where the GPU is used, so the packing runs without it)

        self.kernel = kernel("decode_cluster", "decode_cluster_bf16", build.decode_cluster())
        self.kernel.max_dynamic_shared_size_bytes = self.smem
        n = cuda_launch.max_active_clusters(self.kernel.kernel.ptr, (self.grid, 1, 1), (THREADS, 1, 1), self.smem)
        return n >= self.grid // CLUSTER

    def launch(self, x, kv, seq, pos, lengths, stream=None) -> None:
        """Every block on x [1, D] in place; kv: the cache [B, n_layer, 2, n_ctx, D]; seq, pos,
        lengths: int32 [1] (cache row, position, keys to attend to)."""
        if not self.fits():
            raise ValueError("decode_cluster does not run this model on this device (DecodeClusters.fits)")
        c = self.config
        d = c.n_embd
        if tuple(x.shape) != (1, d) or x.dtype != np.float32 or not x.flags.c_contiguous:
            raise ValueError(f"x must be C-contiguous float32 (1, {d}); got {x.dtype} {x.shape}")
        if kv.shape[1:] != (c.n_layer, 2, c.n_positions, d) or kv.dtype != np.float32 or not kv.flags.c_contiguous:
            raise ValueError(f"kv must be C-contiguous float32 [B, {c.n_layer}, 2, {c.n_positions}, {d}]; "
                             f"got {kv.dtype} {kv.shape}")
        for name, arr in (("seq", seq), ("pos", pos), ("lengths", lengths)):
            if arr.dtype != np.int32 or arr.shape != (1,):
                raise ValueError(f"{name} must be int32 [1]; got {arr.dtype} {arr.shape}")
        layer_stride = 2 * c.n_positions * d
        args = (self.wpk, self.vecs, self.bqf, np.int32(c.n_layer), np.float32(c.layer_norm_epsilon), x, kv,
                np.int64(c.n_layer * layer_stride), np.int64(layer_stride), np.int32(c.n_positions), seq, pos,
                lengths, self.part1, self.part2, self.sync)
        from .cuda_modules import launch

        launch(self.kernel, (self.grid, 1, 1), (THREADS, 1, 1), args, self.smem, stream, programmatic=True)

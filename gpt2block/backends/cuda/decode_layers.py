"""The fused decode step: every transformer block of a decode step in one persistent kernel
(kernels/decode_layers.cu), for batches of up to DL_MAX_M (8) tokens.

``DecodeLayers(block_views, dec_mats, config)`` packs each block's device pointers once (the
kernel's DecodeLayer table) and owns the kernel's scratch (attention partials, tickets, the grid
barrier's counter), so one instance serves one stream at a time: the runner's. ``plan(m)`` says
whether a batch of m fits (the activations [m, 4D] and at least two weight stages in one SM's
shared memory) and ``launch`` runs the step's layers on x in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp
import numpy as np

from ...config import HEAD_DIM, GPT2Config
from . import build
from .modules import kernel, launch, sm_count

THREADS = build.DL_THREADS  # the compute threads; the block has a producer warp besides
ROWS = THREADS // 32  # DL_ROWS: weight rows per stage, one per warp
PAD = build.DL_PAD  # elements after each stage row and activation row
MAX_STAGES = build.DL_MAX_STAGES
RING_STAGES = 4  # the ring's depth where more would fit: 4 stages ran faster than 3, 6, 8 or all that fit
# (gpt2 fp32 / bf16 b1 +1.6% / +1.9%, bf16 b8 +1.7%, fp32 b8 and gpt2-xl b1 unchanged; docs/PERFORMANCE.md
# version 13): a deeper ring keeps more weight copies queued ahead of the phases' own memory accesses
KEYS = build.DL_KEYS  # keys per attention task
MAX_LAYERS = build.DL_MAX_LAYERS
MAX_M = build.DL_MAX_M
PHASE_MATRICES = ("w_qkv", "w_attn", "w_fc", "w_proj")  # the kernel's phases 0..3
PHASE_BIASES = ("b_qkv", "b_attn", "b_fc", "b_proj")
LN_FIELDS = ("ln1_g", "ln1_b", "ln2_g", "ln2_b")
_SMEM_SPARE = 1024  # bytes of an SM's shared memory the driver keeps per block


@dataclass(frozen=True)
class Plan:
    stages: int  # weight stages in the ring
    smem: int  # dynamic shared memory bytes
    grid: int  # blocks (one per SM)


def _smem_limit() -> int:
    dev = cp.cuda.Device()
    return dev.attributes["MaxSharedMemoryPerBlockOptin"]


class DecodeLayers:
    """The fused decode kernel of one model (its weights) on the current device."""

    def __init__(self, block_views, dec_mats, config: GPT2Config):
        self.config = c = config
        if c.n_layer > MAX_LAYERS:
            raise ValueError(f"decode_layers runs at most {MAX_LAYERS} layers; got {c.n_layer}")
        self.bf16 = dec_mats[0]["w_qkv"].dtype == np.uint16
        table = np.zeros((c.n_layer, 12), np.uint64)
        for i, (w, mats) in enumerate(zip(block_views, dec_mats)):
            ptrs = ([mats[k].data.ptr for k in PHASE_MATRICES] + [w[k].data.ptr for k in PHASE_BIASES]
                    + [w[k].data.ptr for k in LN_FIELDS])
            for p in ptrs[:4] + ptrs[8:]:
                if p % 16:
                    raise ValueError("decode_layers needs 16-byte aligned matrices and LayerNorm vectors")
            table[i] = ptrs
        self._keep = (block_views, dec_mats)  # the table points into these
        self.table = cp.asarray(table)
        h = c.n_embd // HEAD_DIM
        splits = -(-c.n_positions // KEYS)
        self.part_acc = cp.empty(MAX_M * h * splits * HEAD_DIM, cp.float32)
        self.part_ml = cp.empty(MAX_M * h * splits * 2, cp.float32)
        self.tickets = cp.zeros(MAX_M * h, cp.int32)
        self.barrier = cp.zeros(1, cp.uint32)
        self._plans: dict = {}
        self.kernel = kernel("decode_layers", "decode_layers_bf16" if self.bf16 else "decode_layers_f32",
                             build.decode_layers())

    def plan(self, m: int) -> Plan | None:
        """The ring depth and shared memory for a batch of m, or None where it does not fit
        (worked out once per m: the device's attributes are slow to read)."""
        if m not in self._plans:
            self._plans[m] = self._plan(m)
        return self._plans[m]

    def _plan(self, m: int) -> Plan | None:
        d = self.config.n_embd
        grid = sm_count()
        rmax = -(-4 * d // grid)  # rows of a phase per block, at most
        if not 1 <= m <= MAX_M or d % HEAD_DIM or d > 8 * THREADS or rmax > THREADS:
            return None
        if int(cp.cuda.Device().compute_capability) < 90:  # bulk copies, mbarrier byte counts
            return None
        r4 = lambda n: -(-n // 4) * 4  # noqa: E731
        fixed = 4 * (m * (4 * d + PAD) + r4(m * rmax) + r4(rmax) + 2 * d)
        stage = ROWS * (d + PAD) * (2 if self.bf16 else 4)
        room = _smem_limit() - self.kernel.shared_size_bytes - _SMEM_SPARE - fixed
        stages = min(RING_STAGES, MAX_STAGES, room // stage)
        if stages < 2:
            return None
        return Plan(stages, fixed + stages * stage, grid)

    def launch(self, x, qkv, att, hid, kv, seq, pos, lengths, stream=None) -> None:
        """Every block on x [m, D] in place (qkv, att, hid: scratch rows [m, 3D], [m, D],
        [m, 4D]); kv: the cache [B, n_layer, 2, n_ctx, D]; seq, pos, lengths: int32 [m]."""
        c = self.config
        m, d = x.shape
        plan = self.plan(m)
        if plan is None:
            raise ValueError(f"decode_layers does not fit a batch of {m} at n_embd {d}")
        for name, arr, shape in (("qkv", qkv, (m, 3 * d)), ("att", att, (m, d)), ("hid", hid, (m, 4 * d))):
            if tuple(arr.shape) != shape or not arr.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous {shape}; got {arr.shape}")
        if kv.shape[1:] != (c.n_layer, 2, c.n_positions, d):
            raise ValueError(f"kv must be [B, {c.n_layer}, 2, {c.n_positions}, {d}]; got {kv.shape}")
        for name, arr in (("seq", seq), ("pos", pos), ("lengths", lengths)):
            if arr.dtype != np.int32 or arr.shape != (m,):
                raise ValueError(f"{name} must be int32 [{m}]; got {arr.dtype} {arr.shape}")
        layer_stride = 2 * c.n_positions * d
        args = (self.table, np.int32(c.n_layer), np.int32(m), np.int32(d), np.float32(c.layer_norm_epsilon),
                x, qkv, att, hid, kv, np.int64(c.n_layer * layer_stride), np.int64(layer_stride),
                np.int32(c.n_positions), seq, pos, lengths, self.part_acc, self.part_ml, self.tickets,
                self.barrier, np.int32(plan.stages))
        launch(self.kernel, (plan.grid, 1, 1), (THREADS + 32, 1, 1), args, plan.smem, stream, programmatic=True)

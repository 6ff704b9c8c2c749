"""The one choice of a decode step's path: how its blocks run and how its LM head takes the argmax.

``decode_path(batch, n_embd, precision, compute_capability, ...)`` walks two tables, BLOCKS and HEADS,
and returns the first row of each whose condition holds (and whose kernel can run here: ``runs``, the
runner's check of the device's shared memory and co-resident clusters), as a DecodePath. Each row cites
the measurement that put it there (docs/PERFORMANCE.md versions, H200, tok/s). Plain Python: the CPU
tests check every row and boundary.

    blocks      the step's transformer blocks
      cluster   decode_cluster_bf16: every block in one persistent kernel, one thread block cluster per
                head (kernels/decode_cluster.cu; DecodeClusters, below)
      gemv      five kernels a block: the QKV GEMV (ln_1, bias, K / V store fused), attention_decode_f32,
                the projection GEMV (+ residual), the FC GEMV (ln_2, GELU), the MLP projection GEMV
      gemm      the prefill's kernels (LayerNorm, GEMMs, kvcache_store, attention_decode_f32)
    head        ln_f, the tied LM head and the argmax (which moves the step's ints on)
      screen       lm_screen + lm_rescore: the argmax without logits, through the head's int8 screen
      gemv_argmax  the one-token LM head GEMV (ln_f fused) takes the argmax itself
      plain        the LM head (GEMV up to GEMV_MAX_M rows, else the GEMM) into logits, then argmax_rows_f32

The runner's flag overrides the table here and nowhere else: ``cluster=False`` never takes the cluster
row. One persistent kernel for every block of a step with grid barriers between its phases (decode_layers)
measured slower than the five kernels at every size, gpt2-xl included (bf16 b1 586 against 621 tok/s, fp32
441 against 522; docs/PERFORMANCE.md, version 37): there is no such row.

The cluster path (the first row), below the tables: every transformer block of a batch-1 step with bf16
weights in one persistent kernel, one cluster of CLUSTER blocks per head (kernels/decode_cluster.cu,
which says why and how).

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

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...config import HEAD_DIM, GPT2Config
from . import build, driver

BLOCKS_KINDS = ("cluster", "gemv", "gemm")
HEAD_KINDS = ("screen", "gemv_argmax", "plain")


@dataclass(frozen=True)
class Step:
    """What the choice depends on: the step's rows, the model's width and vocabulary, the weights'
    precision, the GPU's compute capability (90 for 9.0) and whether the step must leave logits."""

    batch: int
    n_embd: int
    precision: str
    cc: int
    logits: bool = True
    vocab: int = 50257


@dataclass(frozen=True)
class Row:
    kind: str
    when: Callable[[Step], bool]
    condition: str  # ``when`` in words
    measured: str  # the measurement that chose it


@dataclass(frozen=True)
class DecodePath:
    blocks: str  # one of BLOCKS_KINDS
    head: str  # one of HEAD_KINDS


BLOCKS = (
    Row("cluster", lambda s: s.batch == 1 and s.precision == "bf16" and s.n_embd == build.DC_D and s.cc == 90,
        "batch 1, bf16 weights, n_embd == DC_D (768, gpt2), compute capability 9.0 (sm_90a), every cluster "
        "resident at once",
        "version 35: gpt2 bf16 b1 6,977-7,044 tok/s against the five kernels' 6,631-6,700 (+4 to +6%), each "
        "pair in one process; version 36: 7,540-7,562"),
    Row("gemv", lambda s: s.batch <= build.GEMV_MAX_M,
        "batch up to GEMV_MAX_M (8)",
        "versions 14-15: the nt GEMVs read each weight once for every token (gpt2 b8 14,058 -> 18,464 -> "
        "20,708 tok/s); at one token a GEMM's long sums are also less accurate"),
    Row("gemm", lambda s: True,
        "larger batches",
        "the GEMMs' tensor cores: a GEMV reads the weights once per GEMV_MAX_M rows"),
)

HEADS = (
    Row("screen", lambda s: s.batch == 1 and not s.logits and build.lm_screen_fits(s.vocab, s.n_embd),
        "batch 1, no logits needed (greedy_steps' chained steps), a head the screen takes (K a multiple of 8 "
        "up to 2048)",
        "version 28: decode b1 bf16 6,200 -> 6,473, fp32 4,810 -> 5,410 tok/s in the benchmark (the same "
        "token, bit for bit)"),
    Row("gemv_argmax", lambda s: s.batch == 1,
        "batch 1",
        "version 21: bf16 b1 5,421-5,435 -> 5,462-5,471 tok/s (+0.7%), fp32 b1 4,387-4,390 -> 4,428-4,430 "
        "(+0.9%), one process; at 8 tokens it lost (fp32 b8 23,720 -> 23,507), so one token only"),
    Row("plain", lambda s: True,
        "otherwise",
        "logits for every row, then argmax_rows_f32 (ceil(V / ARGMAX_CHUNK) blocks a row)"),
)


def decode_path(batch: int, n_embd: int, precision: str, cc: int, *, logits: bool = True, vocab: int = 50257,
                cluster: bool = True, runs: Callable[[str], bool] | None = None) -> DecodePath:
    """The path of a decode step of ``batch`` rows (see the module's tables). ``runs(kind)``: whether the
    kernel of the "cluster" row can run this model and batch on this device (default: yes); asked only
    when the table (and the flag) would take it."""
    if batch < 1:
        raise ValueError(f"a decode step has at least one row; got batch {batch}")
    if precision not in ("fp32", "tf32", "bf16"):
        raise ValueError(f"precision must be fp32, tf32 or bf16; got {precision!r}")
    if cluster not in (True, False):
        raise ValueError(f"cluster must be True or False; got {cluster!r}")
    s = Step(batch, n_embd, precision, int(cc), bool(logits), vocab)
    runs = runs if runs is not None else (lambda kind: True)
    blocks = None
    for row in BLOCKS:
        if row.kind == "cluster" and not cluster:
            continue
        if row.when(s) and (row.kind != "cluster" or runs(row.kind)):
            blocks = row.kind
            break
    head = next(row.kind for row in HEADS if row.when(s))
    return DecodePath(blocks, head)


# -- the cluster path: decode_cluster_bf16 -------------------------------------------------------------

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
        from .modules import kernel  # (CuPy: imported where the GPU is used, so the packing runs without it)

        self.kernel = kernel("decode_cluster", "decode_cluster_bf16", build.decode_cluster())
        self.kernel.max_dynamic_shared_size_bytes = self.smem
        n = driver.max_active_clusters(self.kernel.kernel.ptr, (self.grid, 1, 1), (THREADS, 1, 1), self.smem)
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
        from .modules import launch

        launch(self.kernel, (self.grid, 1, 1), (THREADS, 1, 1), args, self.smem, stream, programmatic=True)

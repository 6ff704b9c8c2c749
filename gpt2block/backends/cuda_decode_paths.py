"""The one choice of a decode step's path: how its blocks run and how its LM head takes the argmax.

``decode_path(batch, n_embd, precision, compute_capability, ...)`` walks two tables, BLOCKS and HEADS,
and returns the first row of each whose condition holds (and whose kernel can run here: ``runs``, the
runner's check of the device's shared memory and co-resident clusters), as a DecodePath. Each row cites
the measurement that put it there (docs/PERFORMANCE.md versions, H200, tok/s). Plain Python: the CPU
tests check every row and boundary.

    blocks      the step's transformer blocks
      cluster   decode_cluster_bf16: every block in one persistent kernel, one thread block cluster per
                head (kernels/decode_cluster.cu, cuda_cluster)
      layers    decode_layers_*: every block in one persistent kernel, phases between grid barriers
                (kernels/decode_layers.cu, cuda_decode)
      gemv      five kernels a block: the QKV GEMV (ln_1, bias, K / V store fused), attention_decode_f32,
                the projection GEMV (+ residual), the FC GEMV (ln_2, GELU), the MLP projection GEMV
      gemm      the prefill's kernels (LayerNorm, GEMMs, kvcache_store, attention_decode_f32)
    head        ln_f, the tied LM head and the argmax (which moves the step's ints on)
      screen       lm_screen + lm_rescore: the argmax without logits, through the head's int8 screen
      gemv_argmax  the one-token LM head GEMV (ln_f fused) takes the argmax itself
      plain        the LM head (GEMV up to GEMV_MAX_M rows, else the GEMM) into logits, then argmax_rows_f32

The runner's A/B flags override the table here and nowhere else: ``cluster=False`` never takes the
cluster row; ``layers`` True takes the layers row wherever the kernel runs, False never, "auto" as the
table says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import cuda_build as build

BLOCKS_KINDS = ("cluster", "layers", "gemv", "gemm")
HEAD_KINDS = ("screen", "gemv_argmax", "plain")
LAYERS_MIN_D = 1600  # the layers row: gpt2-xl's width


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
    Row("layers", lambda s: (1 <= s.batch <= build.GEMV_MAX_M and s.precision == "bf16" and s.n_embd >= LAYERS_MIN_D
                             and s.cc >= 90),
        "batch 1 to GEMV_MAX_M, bf16 weights, n_embd >= 1600 (gpt2-xl), compute capability 9.0 and up, the "
        "batch's activations and two weight stages in one SM's shared memory (not batch 8 at 1600)",
        "version 17: gpt2-xl bf16 b1 595 tok/s against the five kernels' 569 (fp32 437 against 469); slower "
        "everywhere else (versions 15 and 17: gpt2 bf16 b1 3,639 against 4,123, b8 16,456 against 21,135; "
        "gpt2-medium fp32 b1 1,453 against 1,505; gpt2-large b1 720 against 810)"),
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
                cluster: bool = True, layers: bool | str = "auto",
                runs: Callable[[str], bool] | None = None) -> DecodePath:
    """The path of a decode step of ``batch`` rows (see the module's tables). ``runs(kind)``: whether the
    kernel of a "cluster" or "layers" row can run this model and batch on this device (default: yes);
    asked only for a row the table (and the flags) would take."""
    if batch < 1:
        raise ValueError(f"a decode step has at least one row; got batch {batch}")
    if precision not in ("fp32", "tf32", "bf16"):
        raise ValueError(f"precision must be fp32, tf32 or bf16; got {precision!r}")
    if cluster not in (True, False):
        raise ValueError(f"cluster must be True or False; got {cluster!r}")
    if layers not in (True, False, "auto"):
        raise ValueError(f"layers must be True, False or 'auto'; got {layers!r}")
    s = Step(batch, n_embd, precision, int(cc), bool(logits), vocab)
    runs = runs if runs is not None else (lambda kind: True)
    blocks = None
    for row in BLOCKS:
        if row.kind == "cluster" and not cluster:
            continue
        if row.kind == "layers":
            if layers is False:
                continue
            takes = row.when(s) if layers == "auto" else 1 <= batch <= build.GEMV_MAX_M and s.cc >= 90
        else:
            takes = row.when(s)
        if takes and (row.kind not in ("cluster", "layers") or runs(row.kind)):
            blocks = row.kind
            break
    head = next(row.kind for row in HEADS if row.when(s))
    return DecodePath(blocks, head)

"""The CUDA runner: the model on the GPU through our kernels (kernels/*.cu via CuPy).

Weights are uploaded once: the packed blocks in one device allocation
[n_layer, block_numel], plus wte, wpe and ln_f, for decode a transposed copy of each
block matrix ([N, K]; bf16 in bf16 mode), and on compute capability 9.0 each matrix and wte as
tf32 weight planes for the wgmma GEMM (linear.prepare_planes). A Runner owns a workspace sized once to n_ctx
rows and reused by every call; a CudaCache owns the KV cache [batch, n_layer, 2, n_ctx, D].

One block, the ten steps (the residual stream x is updated in place), prefill and solve.py:
    h = LN(x; g1, b1)                 layernorm_f32
    qkv = h @ W_qkv + b_qkv           gemm (linear.linear: gemm_wgmma.cu on sm_90, else gemm.cu;
                                      gemv for <= 8 rows)
    K, V -> cache                     kvcache_store_f32 (model); solve reads them from qkv
    a = attention(q, K, V)            attention_prefill_*
    x = x + a @ W_attn + b_attn       gemm epilogue bias_residual
    h = LN(x; g2, b2)                 layernorm_f32
    f = gelu(h @ W_fc + b_fc)         gemm epilogue bias_gelu
    x = x + f @ W_proj + b_proj       gemm epilogue bias_residual
A decode step's path is chosen in one place, decode_paths.decode_path (a table, each row
citing its measurement): its blocks in decode_cluster_bf16 (decode_paths: batch 1, bf16 weights,
gpt2's width, one thread block cluster per head), by the GEMMs above (batches over GEMV_MAX_M), or
else five kernels per block:
    qkv = LN(x) @ W_qkv + b; K, V -> cache   gemv_*_nt_ln_bias_kv
    a = attention(q, cache)           attention_decode_f32
    x = x + a @ W_attn + b            gemv_*_nt_bias_residual
    f = gelu(LN(x) @ W_fc + b)        gemv_*_nt_ln_bias_gelu
    x = x + f @ W_proj + b            gemv_*_nt_bias_residual
then ln_f + the LM head (gemv_*_nt_ln) and the argmax, which also moves the step's ints on to the
next greedy step (ids = argmax, pos + 1): at batch 1 in the LM head itself (its last block to finish
reduces the blocks' partials), else argmax_rows_f32. greedy_steps' chained steps at batch 1 need no
logits: there the head is screened (an int8 copy of wte bounds every logit, and only the rows that may
win are formed exactly; the same token, lm_head.lm_head_screened). The runner's flag cluster_decode
overrides the table (decode_path's cluster row). A step is one CUDA graph: the
upload of its ints from pinned memory, the kernels (programmatic dependent launch on sm_90: each starts, and
fetches its weights, while the one before finishes) and the download of the argmax into pinned
memory. greedy_steps() runs a second graph, the kernels alone, fed by the step before it on the
device, whose argmax kernel writes the ids straight into mapped host memory (no copy after the
kernels: about 9 us a step less); the host queues step i + 1 before it waits for step i's
argmax, so its own time per step (launch, Python) hides under the GPU's.
prefill_batch and sample_prefill pack several rows' new tokens into one pass of at most PREFILL_MAX_TOKENS
tokens: the embedding, the blocks' LayerNorms and GEMMs on the packed [T, D] rows, the K / V of each token
stored into its own cache row, attention_prefill_varlen_* (each row causal over its cached keys and its
own, from a table of (segment, query tile) entries: packing.varlen_tiles), then ln_f and the LM head on
each row's last position only. window_nll_sums runs perplexity's windows the same way, the LM head and the
log-softmax on the scored positions only, and brings back one float64 sum a window.
Sampled steps draw on the device (kernels/sampler.cu through sampler.DeviceSampler); only ids and
log-probabilities come back. sample_prefill and sample_step launch the sampler kernel after the step
(its graph) on the same stream; sample_steps, as greedy_steps, runs a graph per step that holds the
decode kernels and the draw, the draw writing the next step's ids (and counting them in the penalties'
history) on the device and into mapped host memory, the host queuing step i + 1 before it waits for
step i. sample_prefill prefills a prompt once for all the rows that share it (a prompt's n samples) and
copies its keys, values and logits to the others. Where a row of logits does not fit
one block's shared memory on the GPU, the NumPy sampler draws on the host instead. sample_rows (the
server's continuous batching) steps only the rows it is given, in their order: a decode step of n rows
(a graph per n, _RowsStep) whose seq names each row's cache row, which the K / V store and
attention_decode (its slots) read; the other rows are not touched.
"""

from __future__ import annotations

from typing import Optional, Sequence

import cupy as cp
import numpy as np

from ...config import GPT2Config
from ...layout import block_layout
from ...sampler import SampleOutput, SamplingBatch, SamplingError
from ...weights import ModelWeights
from ..base import BatchTooLarge, Cache, Runner, RowsDraw, check_batch_args, check_ids, check_step_rows, token_chunks
from . import attention, decode_paths, linear, lm_head, modules, ops, packing
from . import sampler as device_sampler

PREFILL_MAX_TOKENS = 8192  # tokens of one packed prefill pass (prefill_batch, window_nll_sums): its workspace
# holds about 11 x n_embd floats a token (277 MB for gpt2); never fewer than n_positions (one whole row)
# precision mode -> (GEMM variant, attention variant); bf16 mode stores the decode matrices as bf16
VARIANTS = {"fp32": ("tf32x3", "tf32x3f"), "tf32": ("tf32", "tf32"), "bf16": ("tf32x3", "tf32x3f")}
MATRICES = ("w_qkv", "w_attn", "w_fc", "w_proj")


class BlockWorkspace:
    """Activations of up to ``rows`` tokens of width d, allocated once and reused."""

    def __init__(self, rows: int, d: int):
        self.rows = rows
        self.h = cp.empty((rows, d), cp.float32)  # LayerNorm output
        self.qkv = cp.empty((rows, 3 * d), cp.float32)  # [q | k | v]
        self.att = cp.empty((rows, d), cp.float32)  # attention output
        self.f = cp.empty((rows, 4 * d), cp.float32)  # GELU(FC) output


class PackedWorkspace(BlockWorkspace):
    """A packed prefill pass's activations: the block workspace and the residual stream x [rows, D]."""

    def __init__(self, rows: int, d: int):
        super().__init__(rows, d)
        self.x = cp.empty((rows, d), cp.float32)


def run_block(w, x, ws: BlockWorkspace, t: int, *, eps: float, gemm_variant: str, attend, after_qkv=None,
              out=None, planes=None, planes_ready=None) -> None:
    """One block on the first t rows of x [>=t, D]: the result goes to ``out`` (default: x, in place).
    ``attend(qkv [t,3D], att [t,D])`` runs attention; ``after_qkv(qkv)`` (optional) is called once
    the QKV GEMM is queued (the model stores K and V there).
    ``planes``: the block's matrices prepared for the wgmma GEMM (prepare_block_planes), or None;
    ``planes_ready``: {name: event} the current stream waits for before that matrix's GEMM (planes
    made on another stream), or None."""
    h, qkv, att, f = ws.h[:t], ws.qkv[:t], ws.att[:t], ws.f[:t]
    xin = x[:t]
    xt = xin if out is None else out[:t]

    def lin(a, name, bias, out, **kw):
        if planes_ready is not None:
            cp.cuda.get_current_stream().wait_event(planes_ready[name])
        linear.linear(a, w[name], w[bias], out, variant=gemm_variant,
                           planes=None if planes is None else planes[name], **kw)
    ops.layernorm(xin, w["ln1_g"], w["ln1_b"], h, eps)
    lin(h, "w_qkv", "b_qkv", qkv)
    if after_qkv is not None:
        after_qkv(qkv)
    attend(qkv, att)
    lin(att, "w_attn", "b_attn", xt, epilogue="bias_residual", residual=xin)
    ops.layernorm(xt, w["ln2_g"], w["ln2_b"], h, eps)
    lin(h, "w_fc", "b_fc", f, epilogue="bias_gelu")
    lin(f, "w_proj", "b_proj", xt, epilogue="bias_residual", residual=xt)


def prepare_block_planes(w, gemm_variant: str, out: dict | None = None) -> dict:
    """The block's four matrices as wgmma weight planes ({name: linear.Planes}); ``out``: such
    a dict to refill (no allocation)."""
    return {name: linear.prepare_planes(w[name], gemm_variant, out=None if out is None else out[name])
            for name in MATRICES}


class CudaCache(Cache):
    def __init__(self, batch: int, config: GPT2Config):
        super().__init__(batch, config.n_positions)
        c = config
        # [B, n_layer, 2 (k, v), n_ctx, D]: key p of row b, layer l at kv[b, l, 0, p]
        self.kv = cp.zeros((batch, c.n_layer, 2, c.n_positions, c.n_embd), cp.float32)
        self.batch_stride = c.n_layer * 2 * c.n_positions * c.n_embd  # elements between rows
        self.step = None  # [4, B] int32 on the device: ids, seq, pos, lengths of the current step
        self.step_host = None  # the same in pinned host memory (the graph copies it up)
        self.argmax_host = None  # [B] int32 pinned: the step's argmax (the graph copies it down)
        self.logits = None  # [B, V] device logits of the current step: the cache's own, so a graph
        # captured for it never writes into a buffer that the runner regrows for prefill
        self.warm = False  # one eager step ran (kernels compiled, workspaces sized)
        self.graph = None  # the captured decode step (CudaRunner.use_graphs)
        self.graph_chain = [None, None]  # the step's kernels alone, fed by the step before (greedy_steps),
        # one graph per slot of argmax_ring
        self.argmax_ring = None  # 2 x ops.MappedInts(B): greedy_steps' argmax, alternating
        self.ring_events = None  # events after each step: [0], [1] for the ring's slots, [2] for argmax_host
        self.sampler = None  # device_sampler.DeviceSampler of the batch, made at the first sample_prefill / step
        self.prefill_logits = None  # [B, V] device logits of sample_prefill's rows
        self.rows_steps = {}  # n -> _RowsStep: sample_rows' decode steps of n rows (CudaRunner._decode_rows)
        self.rows_logits = None  # [B, V] device logits, rows 0 .. n - 1 those of a sample_rows step of n rows
        self.sample_chain = {}  # (slot, penalised) -> the graph of a chained sampled step (sample_steps)


class _RowsStep:
    """A decode step of n rows of a CudaCache, in any order (sample_rows): the step's own ints (ids, seq = the
    rows' cache rows, pos, lengths) and pinned buffers, its graph and DeviceSampler; the cache's KV and the
    first n rows of its rows_logits. Quacks as the cache in _decode_step / _decode_kernels, whose seq says
    each row's cache row (the K / V store and attention_decode's slots)."""

    def __init__(self, cache: CudaCache, n: int, vocab: int):
        self.batch = n
        self.kv, self.batch_stride = cache.kv, cache.batch_stride
        if cache.rows_logits is None:
            cache.rows_logits = cp.empty((cache.batch, vocab), cp.float32)
        self.logits = cache.rows_logits[:n]  # [n, V], contiguous
        self.step = cp.empty((4, n), cp.int32)
        self.step_host = _pinned((4, n), np.int32)
        self.argmax_host = _pinned((n,), np.int32)
        self.graph = None
        self.warm = False
        self.sampler = None  # DeviceSampler of n rows, or False where the vocabulary is too wide for it


class CudaRunner(Runner):
    backend = "cuda"

    def __init__(self, weights: ModelWeights, precision: str = "fp32", use_graphs: bool = True,
                 programmatic: bool = True, cluster_decode: bool = True):
        if precision not in VARIANTS:
            raise ValueError(f"cuda backend precision must be one of {', '.join(VARIANTS)}; got {precision!r}")
        self.precision = precision
        self.gemm_variant, self.attn_variant = VARIANTS[precision]
        self.config = c = weights.config
        if c.n_embd > ops.LN_MAX_D:
            raise ValueError(f"the cuda backend runs n_embd <= {ops.LN_MAX_D}; got {c.n_embd}")
        lay = block_layout(c.n_embd)
        self.blocks = cp.asarray(weights.blocks)  # [n_layer, block_numel], one allocation
        self.block_views = [lay.views(self.blocks[i]) for i in range(c.n_layer)]
        self.wte = cp.asarray(weights.wte)  # [V, D], also the LM head
        self.wpe = cp.asarray(weights.wpe)  # [n_ctx, D]
        self.ln_f_g, self.ln_f_b = cp.asarray(weights.ln_f_g), cp.asarray(weights.ln_f_b)
        # Decode (batch <= GEMV_MAX_M) reads the block matrices transposed, [N, K]: one contiguous
        # weight row per output (kernels/gemv.cu, the nt kernels). bf16 mode stores these copies
        # as bf16 (half the bytes read per step); prefill and larger batches use the fp32 GEMMs.
        bf16 = precision == "bf16"
        conv = linear.to_bf16_bits if bf16 else (lambda a: a)  # noqa: E731
        self.dec_mats = [{k: conv(cp.ascontiguousarray(v.T)) for k, v in w.items() if k in MATRICES}
                         for w in self.block_views]
        self.wte_dec = linear.to_bf16_bits(self.wte) if bf16 else self.wte  # [V, D] already
        # Prefill (and decode batches over GEMV_MAX_M) multiply on kernels/gemm_wgmma.cu where the
        # GPU has wgmma (compute capability 9.0): the matrices and wte prepared once as tf32 planes
        # ([planes, N, K rounded up to 32]: 2x the fp32 bytes for tf32x3); elsewhere gemm.cu's mma.sync.
        self.planes, self.wte_planes = None, None
        if linear.wgmma_available():
            self.planes = [prepare_block_planes(w, self.gemm_variant) for w in self.block_views]
            self.wte_planes = linear.prepare_planes(self.wte, self.gemm_variant, transposed=True)
        self.ws = BlockWorkspace(c.n_positions, c.n_embd)
        self.x = cp.empty((c.n_positions, c.n_embd), cp.float32)  # residual stream
        self.hf = cp.empty((c.n_positions, c.n_embd), cp.float32)  # ln_f output
        self._logits = None  # [rows, V], grown on demand
        self._argmax = cp.empty(c.n_positions, cp.int32)
        self._logits_buf(8)
        self.use_graphs = use_graphs
        self.programmatic = programmatic  # decode kernels with programmatic dependent launch (sm_90+)
        if cluster_decode not in (True, False):
            raise ValueError(f"cluster_decode must be True or False; got {cluster_decode!r}")
        self.cluster_decode = cluster_decode  # decode_path's cluster: False never
        self.cc = int(cp.cuda.Device().compute_capability)  # e.g. 90
        self._paths: dict = {}  # (batch, logits, flags) -> DecodePath
        self._cluster = None  # decode_paths.DecodeClusters, built at the first batch-1 step
        self.stream = cp.cuda.Stream()  # all of the runner's work; decode graphs are captured on it
        self._fwd = None  # forward_device's graphs (_ForwardGraphs), made at its first call
        self.pass_tokens = max(PREFILL_MAX_TOKENS, c.n_positions)  # tokens of one packed prefill pass, at most
        self._packed = None  # PackedWorkspace of the packed passes, grown on demand up to pass_tokens rows
        self._nll_cache = None  # window_nll_sums' cache (pass_tokens // n_positions rows at least)
        self._screen = None  # lm_head.ScreenTable of wte_dec, made at the first screened step
        self._draws = None  # sample_logits: {B: DeviceSampler, or False where too wide}
        self._draw_logits = None  # sample_logits' device logits [>= B, V]
        self._kept = None  # the last generation's cache (generation_cache)

    def memory_limit(self) -> Optional[int]:
        """Bytes a run state may take: the GPU's free memory now, less a quarter for the step's
        logits, workspaces and the kernels' scratch (the KV cache lives on the GPU, not in host RAM)."""
        free, _ = cp.cuda.runtime.memGetInfo()
        return int(free * 0.75)

    def check_batch(self, batch: int) -> None:
        """Refuse a batch the GPU cannot hold, or one past the decode workspace's rows (n_positions),
        before anything is allocated. A kept generation cache of another size is let go first (its memory
        counts as free)."""
        if self._kept is not None and self._kept.batch != batch:
            self._kept = None
            cp.get_default_memory_pool().free_all_blocks()
        super().check_batch(batch)
        if batch > self.config.n_positions:
            raise BatchTooLarge(f"{batch} rows: the cuda backend decodes at most n_positions = "
                                f"{self.config.n_positions} rows in one batch")

    def new_cache(self, batch: int) -> CudaCache:
        return CudaCache(batch, self.config)

    def generation_cache(self, batch: int) -> CudaCache:
        """The cache of the last generation when it has ``batch`` rows (emptied; its step graphs, sampler and
        buffers kept: a generation then captures no graph again), else a new one, which is kept instead."""
        if self._kept is None or self._kept.batch != batch:
            self._kept = None
            self._kept = self.new_cache(batch)
        self._kept.reset()
        return self._kept

    # -- pieces --------------------------------------------------------------

    def _logits_buf(self, rows: int):
        if self._logits is None or self._logits.shape[0] < rows:
            self._logits = cp.empty((max(rows, 8), self.config.vocab_size), cp.float32)
        return self._logits[:rows]

    def _head(self, rows_from: int, rows_to: int, decode_out=None, out=None, argmax=None, x=None, hf=None):
        """ln_f then the tied LM head on x[rows_from:rows_to] -> device logits [rows, V].
        Up to GEMV_MAX_M rows: one GEMV with ln_f fused, which for one row also takes its argmax
        when ``argmax`` is given (linear.gemv_nt's). ``decode_out``: a decode step's
        logits buffer (read wte_dec, bf16 in bf16 mode); else ``out`` [rows, V] if given (the
        caller's own array), else the runner's regrowable buffer. ``x`` [rows, D]: the rows to read
        instead of self.x[rows_from:rows_to], with ``hf`` [>= rows, D] for their ln_f."""
        c = self.config
        n = rows_to - rows_from
        decode = decode_out is not None
        out = decode_out if decode else (self._logits_buf(n) if out is None else out)
        x = self.x[rows_from:rows_to] if x is None else x
        if n <= linear.GEMV_MAX_M:
            linear.gemv_nt(x, self.wte_dec if decode else self.wte, out,
                                ln=(self.ln_f_g, self.ln_f_b, c.layer_norm_epsilon), argmax=argmax)
            return out
        if argmax is not None:
            raise ValueError(f"the LM head takes the argmax itself for one row only; got {n}")
        hf = self.hf[:n] if hf is None else hf[:n]
        ops.layernorm(x, self.ln_f_g, self.ln_f_b, hf, c.layer_norm_epsilon)
        if self.wte_planes is not None:
            linear.gemm_planes(hf, self.wte_planes, None, out, epilogue=None)
        else:
            linear.gemm_nt(hf, self.wte, out, variant=self.gemm_variant)
        return out

    def _step_ints(self, ids: np.ndarray, seq: np.ndarray, pos: np.ndarray):
        """Upload ids, seq, pos and lengths (pos + 1) as one int32 [4, T] array."""
        arr = np.stack([ids, seq, pos, pos + 1]).astype(np.int32)
        d = cp.asarray(arr)
        return d[0], d[1], d[2], d[3]

    # -- Runner interface -------------------------------------------------------

    def prefill(self, cache: Cache, row: int, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        c = self.config
        ids = check_ids(ids, c.vocab_size)
        t = len(ids)
        start = int(cache.pos[row])
        cache.check_room(row, t)
        pos = np.arange(start, start + t)
        with self.stream:
            logits = self._prefill(cache, row, ids, start, pos, all_logits)
            out = cp.asnumpy(logits, stream=self.stream, blocking=True)
        return out if all_logits else out[0]

    def forward_device(self, ids: Sequence[int]):
        """forward() with the logits left on the GPU: a new CuPy array [len(ids), vocab], ready
        when this returns (no copy of T x 50257 floats to the host, which alone takes longer
        than the model at 1024 tokens).

        With use_graphs, the blocks of a length's calls after its first run as one CUDA graph
        (_ForwardGraphs: the second call captures it) on the runner's own cache and position
        buffers; the LM head then writes straight into the new array."""
        ids = check_ids(ids, self.config.vocab_size)
        t = len(ids)
        if not self.use_graphs:
            cache = self.new_cache(1)
            cache.check_room(0, t)
            with self.stream:
                out = cp.empty((t, self.config.vocab_size), cp.float32)  # the logits land here
                self._prefill(cache, 0, ids, 0, np.arange(t), True, out=out)
            self.stream.synchronize()
            return out
        if self._fwd is None:
            self._fwd = _ForwardGraphs(self)
        out = self._fwd.run(ids)
        self.stream.synchronize()
        return out

    def _prefill(self, cache, row, ids, start, pos, all_logits, out=None):
        """The prefill's kernels on self.stream; returns the device logits (``out``, else the runner's
        buffer)."""
        t = len(ids)
        d_ids, d_seq, d_pos, _ = self._step_ints(ids, np.full(t, row), pos)
        self._prefill_blocks(cache, row, t, start, d_ids, d_seq, d_pos)
        cache.pos[row] = start + t
        return self._head(0, t, out=out) if all_logits else self._head(t - 1, t, out=out)

    def _prefill_blocks(self, cache, row, t, start, d_ids, d_seq, d_pos):
        """Embedding and every block of a prefill of t tokens at positions start.. of cache row
        ``row``, ids / rows / positions read from the device arrays d_ids, d_seq, d_pos [t]."""
        c = self.config
        ops.embedding(d_ids, d_pos, self.wte, self.wpe, self.x[:t])
        for layer, w in enumerate(self.block_views):
            k_cache, v_cache = cache.kv[0, layer, 0], cache.kv[0, layer, 1]
            store = lambda qkv: ops.kvcache_store(  # noqa: E731
                qkv, d_seq, d_pos, k_cache, v_cache, cache.batch_stride)
            rk, rv = cache.kv[row, layer, 0], cache.kv[row, layer, 1]
            attend = lambda qkv, out: attention.attention_prefill(  # noqa: E731
                qkv[:, :c.n_embd], rk, rv, out, n_head=c.n_head, s_q=t, s_kv=start + t, causal=True,
                q_start=start, q_stride=3 * c.n_embd, kv_stride=c.n_embd, variant=self.attn_variant)
            run_block(w, self.x, self.ws, t, eps=c.layer_norm_epsilon, gemm_variant=self.gemm_variant,
                      attend=attend, after_qkv=store, planes=self._planes(layer))

    # -- packed prefill: the new tokens of several rows in one pass -------------------------------

    def prefill_batch(self, cache: Cache, rows: Sequence[int], id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """The rows' new tokens packed into passes of at most pass_tokens tokens (consecutive rows, a row never
        split: token_chunks), each pass one run of the embedding, the blocks (_packed_pass) and ln_f + the LM
        head on each row's last position only (_packed_head); -> [len(rows), V] float32 on the host, in
        page-locked memory (from CuPy's pool: the copy down runs at the bus's speed, not a pageable copy's)."""
        rows, id_lists = check_batch_args(cache, rows, id_lists, self.config.vocab_size)
        for r, ids in zip(rows, id_lists):
            cache.check_room(r, len(ids))
        out = _pinned((len(rows), self.config.vocab_size), np.float32)
        with self.stream:
            for chunk in token_chunks([len(ids) for ids in id_lists], self.pass_tokens):
                i0 = chunk[0]
                ws, lengths = self._packed_pass(cache, [rows[i] for i in chunk], [id_lists[i] for i in chunk])
                for a, b, logits in self._packed_head(ws, np.cumsum(lengths) - 1):
                    logits.get(stream=self.stream, out=out[i0 + a:i0 + b], blocking=True)
        return out

    def _packed_ws(self, t: int) -> PackedWorkspace:
        """The packed passes' workspace, at least t rows (grown to a multiple of n_positions, at most pass_tokens)."""
        if t > self.pass_tokens:
            raise ValueError(f"a packed prefill pass takes at most {self.pass_tokens} tokens; got {t}")
        if self._packed is None or self._packed.rows < t:
            n = self.config.n_positions
            self._packed = None  # the old one freed before the new one is allocated
            self._packed = PackedWorkspace(min(self.pass_tokens, -(-t // n) * n), self.config.n_embd)
        return self._packed

    def _packed_pass(self, cache: Cache, rows: list, id_lists: list) -> tuple:
        """One packed pass on self.stream: row rows[i] gets id_lists[i] (checked ids, room checked by the
        caller) at positions from cache.pos[rows[i]]; the embedding, then every block (K / V stored per
        token into the tokens' rows, attention over the packed segments: attention_prefill_varlen_*, or
        for a single row the one-sequence attention_prefill, whose wgmma kernels split long rows' keys).
        -> (the workspace, whose x[:T] holds the blocks' output, lengths int64 [len(rows)]); cache.pos
        advanced."""
        c, d = self.config, self.config.n_embd
        lengths = np.array([len(ids) for ids in id_lists], np.int64)
        pasts = cache.pos[rows].astype(np.int64)
        t = int(lengths.sum())
        dev = cp.asarray(packing.packed_ints(id_lists, rows, pasts))  # ids, cache row, position of every token
        d_ids, d_seq, d_pos = dev[0], dev[1], dev[2]
        ws = self._packed_ws(t)
        ops.embedding(d_ids, d_pos, self.wte, self.wpe, ws.x[:t])
        single = len(rows) == 1
        tiles = None if single else cp.asarray(packing.varlen_tiles(lengths, pasts, rows, attention.TILE))
        max_keys = int((pasts + lengths).max())
        for layer, w in enumerate(self.block_views):
            k_cache, v_cache = cache.kv[0, layer, 0], cache.kv[0, layer, 1]
            store = lambda qkv: ops.kvcache_store(  # noqa: E731
                qkv, d_seq, d_pos, k_cache, v_cache, cache.batch_stride)
            if single:
                rk, rv, past = cache.kv[rows[0], layer, 0], cache.kv[rows[0], layer, 1], int(pasts[0])
                attend = lambda qkv, out: attention.attention_prefill(  # noqa: E731
                    qkv[:, :d], rk, rv, out, n_head=c.n_head, s_q=t, s_kv=past + t, causal=True,
                    q_start=past, q_stride=3 * d, kv_stride=d, variant=self.attn_variant)
            else:
                attend = lambda qkv, out: attention.attention_prefill_varlen(  # noqa: E731
                    qkv[:, :d], k_cache, v_cache, out, tiles, n_head=c.n_head, q_stride=3 * d,
                    cache_batch_stride=cache.batch_stride, cache_rows=cache.batch, max_keys=max_keys,
                    variant=self.attn_variant)
            run_block(w, ws.x, ws, t, eps=c.layer_norm_epsilon, gemm_variant=self.gemm_variant,
                      attend=attend, after_qkv=store, planes=self._planes(layer))
        cache.pos[rows] = pasts + lengths
        return ws, lengths

    def _packed_head(self, ws: PackedWorkspace, picks: np.ndarray):
        """ln_f and the LM head on rows ``picks`` of ws.x (a packed pass's output), in pieces of at most
        n_positions rows (the ln_f buffer's): yields (a, b, device logits [b - a, V] of picks[a:b]), each
        valid until the next piece is asked for (the runner's logits buffer)."""
        n = self.config.n_positions
        d_picks = cp.asarray(np.asarray(picks, np.int64))
        for a in range(0, len(picks), n):
            b = min(a + n, len(picks))
            x = cp.take(ws.x, d_picks[a:b], axis=0)  # [b - a, D], contiguous
            yield a, b, self._head(0, b - a, x=x, hf=self.hf)

    # -- perplexity on the device -----------------------------------------------------------------

    def window_nll_sums(self, windows: Sequence[tuple]) -> np.ndarray:
        """For each window (ids [L], first): the sum over labels i = first .. L - 1 of -log softmax(logits of
        position i - 1)[ids[i]], every window from position 0 -> float64 [len(windows)]. Windows go through
        packed passes (as many as fit pass_tokens) on a cache of the runner's own; ln_f, the LM head and
        the log-softmax run on the scored positions only, on the device (nll_rows): only the sums come back.
        A window whose scored logits hold NaN or +inf sums to NaN."""
        c = self.config
        wins = []
        for ids, first in windows:
            ids = check_ids(ids, c.vocab_size)
            if isinstance(first, bool) or not isinstance(first, (int, np.integer)) or not 1 <= first < len(ids):
                raise ValueError(f"a window's first scored label must be in [1, {len(ids)}); got {first!r}")
            if len(ids) > c.n_positions:
                raise ValueError(f"a window of {len(ids)} tokens does not fit the context of {c.n_positions}")
            wins.append((ids, int(first)))
        out = np.empty(len(wins), np.float64)
        if not wins:
            return out
        per = max(1, self.pass_tokens // max(len(ids) for ids, _ in wins))  # windows per pass
        need = min(per, len(wins))
        if self._nll_cache is None or self._nll_cache.batch < need:
            self._nll_cache = None
            self._nll_cache = self.new_cache(need)
        cache = self._nll_cache
        with self.stream:
            for g in range(0, len(wins), per):
                group = wins[g:g + per]
                k = len(group)
                cache.pos[:] = 0
                ws, lengths = self._packed_pass(cache, list(range(k)), [ids for ids, _ in group])
                picks, owner = packing.window_picks(lengths, [f for _, f in group])
                targets = cp.asarray(np.concatenate([ids[f:] for ids, f in group]))  # the label of each pick
                owner = cp.asarray(owner)
                sums = cp.zeros(k, cp.float64)
                for a, b, logits in self._packed_head(ws, picks):
                    sums += cp.bincount(owner[a:b], weights=nll_rows(logits, targets[a:b]), minlength=k)
                out[g:g + k] = cp.asnumpy(sums, stream=self.stream, blocking=True)
            cache.pos[:] = 0
        return out

    def _decode_kernels(self, cache: "CudaCache", step, host_out=None, logits: bool = True) -> None:
        """Every kernel of one decode step, reading ids / seq / pos / lengths from ``step`` [4, B]
        (device, fixed address) and writing logits and argmax to fixed buffers (the argmax also
        to ``host_out``, ops.MappedInts, when given): capturable. ``logits`` False: the step
        needs only the argmax (cache.logits may be left as it was; _decode_head)."""
        c = self.config
        b = cache.batch
        d_ids, d_seq, d_pos, d_len = step[0], step[1], step[2], step[3]
        # a plain launch (ops.embedding): the step's kernels after it find every earlier step
        # finished, which attention_decode_f32 relies on (it reads lengths and older keys early)
        ops.embedding(d_ids, d_pos, self.wte, self.wpe, self.x[:b])
        path = self._path(b, logits)
        if path.blocks == "cluster":
            self._cluster.launch(self.x[:1], cache.kv, d_seq, d_pos, d_len)
            self._decode_head(cache, b, step, path, host_out)
            return
        for layer, w in enumerate(self.block_views):
            k_cache, v_cache = cache.kv[0, layer, 0], cache.kv[0, layer, 1]
            store = lambda qkv: ops.kvcache_store(  # noqa: E731
                qkv, d_seq, d_pos, k_cache, v_cache, cache.batch_stride)
            # max_len = n_ctx: the bound on every step's lengths (the launch does not depend on it)
            attend = lambda qkv, out: attention.attention_decode(  # noqa: E731
                qkv, k_cache, v_cache, d_len, out, n_head=c.n_head, q_stride=3 * c.n_embd,
                cache_batch_stride=cache.batch_stride, max_len=c.n_positions, slots=d_seq,
                cache_rows=cache.kv.shape[0])
            if path.blocks == "gemv":
                kv = (d_seq, d_pos, k_cache, v_cache, cache.batch_stride)
                self._decode_block_gemv(w, self.dec_mats[layer], b, attend, kv)
            else:
                run_block(w, self.x, self.ws, b, eps=c.layer_norm_epsilon, gemm_variant=self.gemm_variant,
                          attend=attend, after_qkv=store, planes=self._planes(layer))
        self._decode_head(cache, b, step, path, host_out)

    def _planes(self, layer: int):
        return None if self.planes is None else self.planes[layer]

    def _decode_head(self, cache: "CudaCache", b: int, step, path, host_out=None) -> None:
        """ln_f, the LM head and the argmax of a decode step, as ``path.head`` says (decode_path)."""
        if path.head == "screen":
            if self._screen is None:  # made by _decode_chained before the step's kernels, never in between
                raise RuntimeError("the LM head's screen was not prepared before the step (_screen_prepare)")
            c = self.config
            lm_head.lm_head_screened(self.x[:1], self._screen, self.wte_dec,
                                         (self.ln_f_g, self.ln_f_b, c.layer_norm_epsilon),
                                         (self._argmax[:1], step, host_out))
            return
        if path.head == "gemv_argmax":  # the one-token LM head GEMV takes the argmax itself
            self._head(0, b, decode_out=cache.logits, argmax=(self._argmax[:b], step, host_out))
            return
        logits = self._head(0, b, decode_out=cache.logits)
        ops.argmax_rows(logits, self._argmax[:b], advance=step, host_out=host_out)

    def _screen_prepare(self) -> None:
        """The screen's table (once per runner) and workspaces on the runner's stream: outside any capture."""
        lm_head.screen_prepare(self.wte_dec, self.stream)
        if self._screen is None:
            self._screen = lm_head.screen_table(self.wte_dec, self.stream)

    def _path(self, b: int, logits: bool = True) -> "decode_paths.DecodePath":
        """The path of a decode step of b rows (decode_paths.decode_path with the runner's flags),
        worked out once per (b, logits, flags). Asking may build the cluster kernel's state (its
        packed weights: allocations and kernels): _decode_device and _decode_chained ask before they
        capture a step."""
        key = (b, logits, self.cluster_decode)
        path = self._paths.get(key)
        if path is None:
            c = self.config
            path = self._paths[key] = decode_paths.decode_path(
                b, c.n_embd, self.precision, self.cc, logits=logits, vocab=c.vocab_size,
                cluster=self.cluster_decode, runs=lambda kind: self._runs(kind, b))
        return path

    def _runs(self, kind: str, b: int) -> bool:
        """Whether the "cluster" kernel runs this model at batch b on this device (its shared memory,
        co-resident clusters); the first ask makes its state."""
        if self._cluster is None:
            self._cluster = decode_paths.DecodeClusters(self.block_views, self.dec_mats, self.config)
        return self._cluster.fits()

    def _decode_block_gemv(self, w, mats, b: int, attend, kv) -> None:
        """One block for b <= GEMV_MAX_M new tokens: four GEMVs over the transposed matrices,
        the LayerNorms fused into the QKV and FC GEMVs, the K / V store into the QKV GEMV
        (``kv``: gemv_nt's argument), the residual adds into the projections."""
        eps = self.config.layer_norm_epsilon
        x, ws = self.x[:b], self.ws
        qkv, att, f = ws.qkv[:b], ws.att[:b], ws.f[:b]
        gemv_nt = linear.gemv_nt
        gemv_nt(x, mats["w_qkv"], qkv, bias=w["b_qkv"], epilogue="bias", ln=(w["ln1_g"], w["ln1_b"], eps), kv=kv)
        attend(qkv, att)
        gemv_nt(att, mats["w_attn"], x, bias=w["b_attn"], epilogue="bias_residual", residual=x)
        gemv_nt(x, mats["w_fc"], f, bias=w["b_fc"], epilogue="bias_gelu", ln=(w["ln2_g"], w["ln2_b"], eps))
        gemv_nt(f, mats["w_proj"], x, bias=w["b_proj"], epilogue="bias_residual", residual=x)

    def _decode_device(self, cache: Cache, tokens: np.ndarray):
        """One decode step for every row; returns the device logits [B, V] (argmax in self._argmax).

        The first step of a cache runs eagerly (compiling kernels, sizing workspaces); with
        ``use_graphs`` the second is captured as a CUDA graph and every later step replays it.
        The step's ints go up from, and its argmax comes down to, pinned host buffers by copies
        that are part of the step (of the graph): a step is one graph launch and one wait."""
        c = self.config
        tokens = check_ids(tokens, c.vocab_size)
        b = cache.batch
        if tokens.shape[0] != b:
            raise ValueError(f"decode got {tokens.shape[0]} tokens for a batch of {b}")
        if b > c.n_positions:
            raise ValueError(f"decode batch {b} exceeds the workspace of {c.n_positions} rows")
        for r in range(b):
            cache.check_room(r, 1)
        pos = cache.pos
        if cache.step is None:
            cache.logits = cp.empty((b, c.vocab_size), cp.float32)
            cache.step = cp.empty((4, b), cp.int32)
            cache.step_host = _pinned((4, b), np.int32)
            cache.argmax_host = _pinned((b,), np.int32)
        self.stream.synchronize()  # the previous step's copies have used the pinned buffers
        cache.step_host[:] = [tokens, np.arange(b), pos, pos + 1]  # ids, seq, pos, lengths
        with self.stream:
            self._path(b)  # the path's kernel state (packed weights), made before any capture
            if cache.graph is not None:
                cache.graph.launch(self.stream)
            elif self.use_graphs and cache.warm:
                self.stream.begin_capture()
                try:
                    self._decode_step(cache)
                finally:
                    cache.graph = self.stream.end_capture()
                cache.graph.launch(self.stream)
            else:
                self._decode_step(cache)
                cache.warm = True
        cache.pos += 1
        return cache.logits

    def _decode_step(self, cache: "CudaCache") -> None:
        """Upload the step's ints, run its kernels, download its argmax (all on self.stream);
        eager or under capture, so the launch mode is chosen here, not at every graph replay."""
        b, s = cache.batch, self.stream.ptr
        rt = cp.cuda.runtime
        rt.memcpyAsync(cache.step.data.ptr, cache.step_host.ctypes.data, cache.step_host.nbytes,
                       rt.memcpyHostToDevice, s)
        with modules.programmatic_launches(self.programmatic):
            self._decode_kernels(cache, cache.step)
        rt.memcpyAsync(cache.argmax_host.ctypes.data, self._argmax.data.ptr, 4 * b, rt.memcpyDeviceToHost, s)

    def _decode_chained(self, cache: "CudaCache", slot: int) -> None:
        """Queue one decode step fed by the one before it on the device (cache.step as the
        previous step's argmax left it), its argmax written by the kernel straight into
        argmax_ring[slot] (mapped host memory: no copy after the kernels), then an event."""
        ring = cache.argmax_ring[slot]
        with self.stream:
            path = self._path(cache.batch, logits=False)  # its kernel state, made before any capture
            if path.head == "screen" and cache.graph_chain[slot] is None:
                # the module build, the table and workspaces (allocations, a kernel): before the step's kernels,
                # so never under a capture, and finished before the screen reads the table ahead of its pdl_wait
                self._screen_prepare()
            if cache.graph_chain[slot] is None and self.use_graphs:
                self.stream.synchronize()  # once per slot: capture starts on an idle stream
                self.stream.begin_capture()
                try:
                    with modules.programmatic_launches(self.programmatic):
                        self._decode_kernels(cache, cache.step, host_out=ring, logits=False)
                finally:
                    cache.graph_chain[slot] = self.stream.end_capture()
            if cache.graph_chain[slot] is not None:
                cache.graph_chain[slot].launch(self.stream)
            else:
                with modules.programmatic_launches(self.programmatic):
                    self._decode_kernels(cache, cache.step, host_out=ring, logits=False)
            cache.ring_events[slot].record(self.stream)
        cache.pos += 1

    def _greedy_steps(self, cache: Cache, tokens: np.ndarray, max_steps: Optional[int]):
        """Runs one step ahead: step i + 1 is queued (fed on the device) before step i's argmax
        is waited for. Step 0 is decode_greedy's (fed by ``tokens``, argmax in argmax_host)."""
        n_ctx = cache.n_ctx
        if cache.argmax_ring is None:
            cache.argmax_ring = [ops.MappedInts(cache.batch) for _ in range(2)]
            cache.ring_events = [cp.cuda.Event(disable_timing=True) for _ in range(3)]  # [2]: step 0
        self._decode_device(cache, tokens)
        cache.ring_events[2].record(self.stream)
        waiting = (cache.ring_events[2], cache.argmax_host)  # (event, pinned buffer) of the next step to take
        launched, taken = 1, 0
        try:
            while True:
                ahead = None
                if (max_steps is None or launched < max_steps) and (cache.pos < n_ctx).all():
                    slot = launched % 2
                    self._decode_chained(cache, slot)
                    ahead = (cache.ring_events[slot], cache.argmax_ring[slot].array)
                    launched += 1
                event, buf = waiting
                event.synchronize()
                taken += 1
                yield buf.astype(np.int64)
                if ahead is None:
                    return
                waiting = ahead
        finally:
            if launched > taken:  # closed with a step queued: wait for it and take it back
                self.stream.synchronize()
                cache.pos -= launched - taken

    # -- sampling on the device ----------------------------------------------------

    def _device_sampler(self, cache: "CudaCache"):
        """The cache's DeviceSampler, or None where a row of logits does not fit the kernel's shared memory
        on this GPU (the host sampler then draws, as the base Runner does)."""
        if cache.sampler is None:
            try:
                cache.sampler = device_sampler.DeviceSampler(cache.batch, self.config.vocab_size)
            except device_sampler.SamplerTooWide:
                cache.sampler = False
        return cache.sampler or None

    def sample_prefill(self, cache: Cache, id_lists: Sequence[Sequence[int]], batch: SamplingBatch) -> SampleOutput:
        """Prefill rows 0 .. B-1 in packed passes (as prefill_batch; each row's last logits into a device
        [B, V] buffer) and draw each row's first token on the device (kernels/sampler.cu); only ids and
        log-probabilities come back."""
        if len(id_lists) != cache.batch or batch.batch != cache.batch:
            raise ValueError(f"sample_prefill needs one prompt and one sampling row per cache row ({cache.batch}); "
                             f"got {len(id_lists)} prompts and {batch.batch} sampling rows")
        ds = self._device_sampler(cache)
        if ds is None:
            return super().sample_prefill(cache, id_lists, batch)
        c = self.config
        rows = [check_ids(ids, c.vocab_size) for ids in id_lists]
        for r, ids in enumerate(rows):
            cache.check_room(r, len(ids))
        if cache.prefill_logits is None:
            cache.prefill_logits = cp.empty((cache.batch, c.vocab_size), cp.float32)
        with self.stream:
            first = {}  # (start, ids) -> the row that prefills them: a prompt's n samples prefill once
            copies = []  # (row, source row, start, end): the same tokens at the same positions
            for r, ids in enumerate(rows):
                start = int(cache.pos[r])
                key = (start, ids.tobytes())
                if key in first:
                    copies.append((r, first[key], start, start + len(ids)))
                else:
                    first[key] = r
            uniq = list(first.values())  # increasing
            for chunk in token_chunks([len(rows[r]) for r in uniq], self.pass_tokens):
                chunk_rows = [uniq[i] for i in chunk]
                ws, lengths = self._packed_pass(cache, chunk_rows, [rows[r] for r in chunk_rows])
                for a, b, logits in self._packed_head(ws, np.cumsum(lengths) - 1):
                    # a device scatter (the LM head writes whole 16-byte aligned arrays; rows of [B, V] are not)
                    cache.prefill_logits[cp.asarray(np.asarray(chunk_rows[a:b], np.int64))] = logits
            for r, src, start, end in copies:  # the source row's keys, values and logits
                cache.kv[r, :, :, start:end] = cache.kv[src, :, :, start:end]
                cache.prefill_logits[r] = cache.prefill_logits[src]
                cache.pos[r] = end
            ds.launch(cache.prefill_logits, batch, cache.pos.copy(), self.stream)
        return ds.result(self.stream)

    def sample_step(self, cache: Cache, tokens: np.ndarray, batch: SamplingBatch) -> SampleOutput:
        """One decode step (its graph where captured), then the draw on the device from the step's device
        logits, launched after the step on the same stream; only ids and log-probabilities come back."""
        if batch.batch != cache.batch:
            raise ValueError(f"sample_step got {batch.batch} sampling rows for a batch of {cache.batch}")
        return self._launch_step(cache, tokens, batch).result()

    def _launch_step(self, cache: Cache, tokens: np.ndarray, batch: SamplingBatch) -> RowsDraw:
        """sample_step, queued: the step and its draw on the stream; result() waits for the ids."""
        ds = self._device_sampler(cache)
        if ds is None:
            return RowsDraw(super().sample_step(cache, tokens, batch))
        logits = self._decode_device(cache, tokens)  # [B, V] on the device
        with self.stream:
            ds.launch(logits, batch, cache.pos.copy(), self.stream)
        stream = self.stream
        return RowsDraw(wait=lambda: ds.result(stream))

    def sample_rows(self, cache: Cache, rows: Sequence[int], tokens: np.ndarray, batch: SamplingBatch) -> SampleOutput:
        """sample_step on rows ``rows`` of the cache only, in that order: one decode step of len(rows) rows
        (_decode_rows: a graph per number of rows; each row's K / V and attention at its own cache row), then
        the draw on the device; the other rows are not touched. All the rows in order: sample_step."""
        return self.launch_rows(cache, rows, tokens, batch).result()

    def launch_rows(self, cache: Cache, rows: Sequence[int], tokens: np.ndarray, batch: SamplingBatch) -> RowsDraw:
        """sample_rows queued on the stream (the step, then the draw); result() waits for the ids and reads them.
        The host may queue a prefill meanwhile (it runs after the step), not another step."""
        rows, tokens = check_step_rows(cache, rows, tokens, self.config.vocab_size)
        if batch.batch != len(rows):
            raise ValueError(f"sample_rows got {batch.batch} sampling rows for {len(rows)} cache rows")
        if rows == list(range(cache.batch)):
            return self._launch_step(cache, tokens, batch)
        st = cache.rows_steps.get(len(rows))
        if st is None:
            st = cache.rows_steps[len(rows)] = _RowsStep(cache, len(rows), self.config.vocab_size)
        if st.sampler is None:
            try:
                st.sampler = device_sampler.DeviceSampler(len(rows), self.config.vocab_size)
            except device_sampler.SamplerTooWide:
                st.sampler = False
        if st.sampler is False:
            return RowsDraw(super().sample_rows(cache, rows, tokens, batch))
        rows = np.asarray(rows, np.int64)
        self._decode_rows(cache, st, rows, tokens)
        sampler, stream = st.sampler, self.stream
        with stream:
            sampler.launch(st.logits, batch, cache.pos[rows], stream)
        return RowsDraw(wait=lambda: sampler.result(stream))

    def sample_logits(self, logits: np.ndarray, batch: SamplingBatch, positions) -> SampleOutput:
        """Host logits [B, V] up to the device and drawn there (kernels/sampler.cu; a DeviceSampler per B, kept),
        only ids and log-probabilities back; the NumPy sampler where a row does not fit the kernel."""
        logits = np.ascontiguousarray(logits, np.float32)
        n, V = batch.batch, self.config.vocab_size
        if logits.shape != (n, V):
            raise ValueError(f"sample_logits needs logits [{n}, {V}] for {n} sampling rows; got {logits.shape}")
        if self._draws is None:
            self._draws = {}
        ds = self._draws.get(n)
        if ds is None:
            try:
                ds = self._draws[n] = device_sampler.DeviceSampler(n, V)
            except device_sampler.SamplerTooWide:
                ds = self._draws[n] = False
        if ds is False:
            return super().sample_logits(logits, batch, positions)
        if self._draw_logits is None or self._draw_logits.shape[0] < n:
            self._draw_logits = cp.empty((max(n, 8), V), cp.float32)
        with self.stream:
            dev = self._draw_logits[:n]
            dev.set(logits, stream=self.stream)
            ds.launch(dev, batch, np.asarray(positions, np.int64), self.stream)
        return ds.result(self.stream)

    def _decode_rows(self, cache: "CudaCache", st: _RowsStep, rows: np.ndarray, tokens: np.ndarray) -> None:
        """Append tokens[i] to cache row rows[i] (ids already checked): one decode step of len(rows) rows, its
        logits in st.logits. As _decode_device: the first step of a size eager, the second captured, later
        ones replay it."""
        for r in rows:
            cache.check_room(int(r), 1)
        pos = cache.pos[rows]
        self.stream.synchronize()  # the previous step's copies have used the pinned buffers
        st.step_host[:] = [tokens, rows, pos, pos + 1]  # ids, seq (cache rows), pos, lengths
        with self.stream:
            self._path(st.batch)  # the path's kernel state, made before any capture
            if st.graph is not None:
                st.graph.launch(self.stream)
            elif self.use_graphs and st.warm:
                self.stream.begin_capture()
                try:
                    self._decode_step(st)
                finally:
                    st.graph = self.stream.end_capture()
                st.graph.launch(self.stream)
            else:
                self._decode_step(st)
                st.warm = True
        cache.pos[rows] += 1

    def _sample_steps(self, cache: Cache, tokens: np.ndarray, batch: SamplingBatch, max_steps: Optional[int]):
        """Runs one step ahead, as _greedy_steps does: each step is the decode kernels and the draw
        (kernels/sampler.cu) in one graph, the draw writing the next step's ids on the device (and into
        mapped host memory) and counting them in the penalties' history there; step i + 1 is queued before
        step i's ids are waited for. Step 0 is fed ``tokens`` from the host (_decode_device, then the draw).
        A batch that wants log-probabilities, or logits too wide for the device sampler, steps through
        sample_step instead."""
        ds = self._device_sampler(cache)
        if ds is None or batch.logprobs or batch.top_logprobs:
            yield from super()._sample_steps(cache, tokens, batch, max_steps)
            return
        n_ctx = cache.n_ctx
        if cache.argmax_ring is None:
            cache.argmax_ring = [ops.MappedInts(cache.batch) for _ in range(2)]
            cache.ring_events = [cp.cuda.Event(disable_timing=True) for _ in range(3)]
        self._decode_device(cache, tokens)  # step 0's decode (its ints from the host)
        with self.stream:
            penalised = ds.start_chain(batch, self.stream)
        launched, taken = 0, 0
        try:
            with self.stream:
                ds.launch_chained(cache.logits, cache.step, cache.argmax_ring[0], self.stream)
                cache.ring_events[0].record(self.stream)
            launched = 1
            waiting = (cache.ring_events[0], cache.argmax_ring[0].array)
            while True:
                ahead = None
                if (max_steps is None or launched < max_steps) and (cache.pos < n_ctx).all():
                    slot = launched % 2
                    self._sample_chained(cache, ds, slot, penalised)
                    ahead = (cache.ring_events[slot], cache.argmax_ring[slot].array)
                    launched += 1
                event, buf = waiting
                event.synchronize()
                taken += 1
                ids = buf.astype(np.int64)
                if (ids < 0).any():
                    row = int(np.argmax(ids < 0))
                    raise SamplingError(f"the logits of row {row} contain NaN or +inf, or are all -inf, or "
                                        "overflowed under its penalties (the model's activations overflowed or its "
                                        "weights are not usable); nothing can be sampled")
                yield ids
                if ahead is None:
                    return
                waiting = ahead
        finally:
            if launched > taken:  # closed with a step queued: wait for it and take it back
                self.stream.synchronize()
                cache.pos -= launched - taken
            ds.end_chain()

    def _sample_chained(self, cache: "CudaCache", ds, slot: int, penalised: bool) -> None:
        """Queue one sampled step fed by the one before it on the device: the decode kernels (their
        argmax moves cache.step on), then the draw, which puts its ids into cache.step and argmax_ring[slot];
        then an event. One graph per (slot, penalised), captured at its first use."""
        ring = cache.argmax_ring[slot]
        key = (slot, penalised)

        def queue():
            with modules.programmatic_launches(self.programmatic):
                self._decode_kernels(cache, cache.step, logits=True)
            ds.launch_chained(cache.logits, cache.step, ring, self.stream)  # a plain launch: after the step

        with self.stream:
            self._path(cache.batch)  # its kernel state, made before any capture
            graph = cache.sample_chain.get(key)
            if graph is None and self.use_graphs:
                self.stream.synchronize()  # once per slot: capture starts on an idle stream
                self.stream.begin_capture()
                try:
                    queue()
                finally:
                    graph = cache.sample_chain[key] = self.stream.end_capture()
            if graph is not None:
                graph.launch(self.stream)
            else:
                queue()
            cache.ring_events[slot].record(self.stream)
        cache.pos += 1

    def decode(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        logits = self._decode_device(cache, tokens)
        return cp.asnumpy(logits, stream=self.stream, blocking=True)

    def decode_greedy(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        self._decode_device(cache, tokens)
        self.stream.synchronize()
        return cache.argmax_host.astype(np.int64)


_SUMEXP = cp.ReductionKernel("float32 z, float32 m", "float64 s", "exp(z - m)", "a + b", "s = a", "0",
                             "gpt2block_sum_exp_f32")  # sum_j exp(z_j - m), each term in fp32, summed in fp64


def nll_rows(logits, targets):
    """-log softmax(logits[r])[targets[r]] of every row: logits float32 [n, V], targets int [n] (device)
    -> float64 [n] (device): max, then the sum of exp(z - max) in float64, then lse - z[target]."""
    n = logits.shape[0]
    m = logits.max(axis=1)  # [n]; NaN where a row holds NaN
    s = _SUMEXP(logits, m[:, None], axis=1)  # [n] float64
    zt = logits[cp.arange(n), targets]  # [n]
    return cp.log(s) + m.astype(cp.float64) - zt.astype(cp.float64)


def _pinned(shape: tuple, dtype) -> np.ndarray:
    """A NumPy array in page-locked host memory (copies from / to it can be part of a graph)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    mem = cp.cuda.alloc_pinned_memory(n * dtype.itemsize)
    return np.frombuffer(mem, dtype, n).reshape(shape)


class _ForwardGraphs:
    """forward_device's blocks as CUDA graphs, one per sequence length: a length's first call runs
    eagerly (compiling kernels, sizing workspaces), its second is captured, later ones replay it.
    The graphs read the token ids from one device buffer (filled from pinned memory by an async copy
    before the launch) and use a cache of the runner's own (the K / V of positions 0 .. t - 1 are
    written before they are read, so nothing needs clearing between calls). The LM head runs after
    the replay, eagerly, into the caller's new array. At most MAX graphs are kept (least recently
    used dropped)."""

    MAX = 8

    def __init__(self, runner: "CudaRunner"):
        c = runner.config
        self.runner = runner
        self.cache = runner.new_cache(1)
        self.host_ints = _pinned((3 * c.n_positions,), np.int32)
        self.ints = cp.empty(3 * c.n_positions, cp.int32)  # ids, rows (0), positions of a call
        self.graphs: dict = {}  # t -> graph, least recently used first
        self.seen: set = set()

    def run(self, ids: np.ndarray):
        r, t = self.runner, len(ids)
        self.cache.pos[0] = 0
        self.cache.check_room(0, t)
        h = self.host_ints
        h[:t], h[t:2 * t], h[2 * t:3 * t] = ids, 0, np.arange(t)
        with r.stream:
            self.ints[:3 * t].set(h[:3 * t], stream=r.stream)
            d_ids, d_seq, d_pos = self.ints[:t], self.ints[t:2 * t], self.ints[2 * t:3 * t]
            out = cp.empty((t, r.config.vocab_size), cp.float32)  # the logits land here
            graph = self.graphs.pop(t, None)
            if graph is None and t in self.seen:
                r.stream.begin_capture()
                try:
                    r._prefill_blocks(self.cache, 0, t, 0, d_ids, d_seq, d_pos)
                except BaseException:
                    self.seen.discard(t)
                    raise
                finally:
                    graph = r.stream.end_capture()
            if graph is not None:
                graph.launch(r.stream)
                self.graphs[t] = graph
                while len(self.graphs) > self.MAX:
                    self.graphs.pop(next(iter(self.graphs)))
            else:
                r._prefill_blocks(self.cache, 0, t, 0, d_ids, d_seq, d_pos)
                self.seen.add(t)
            r._head(0, t, out=out)
        return out

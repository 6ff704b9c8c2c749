"""The device sampler: kernels/sampler.cu's launch over a batch's device logits, and its state.

DeviceSampler (one per cache) owns, allocated once for its B rows: the parameter words [SW_WORDS, B]
in pinned host memory and on the device (sampler_params.pack_params), the history [B, V] int32 when
the batch has penalties (its rows written when a batch starts or a row's lists change, then grown on
the device), and the outputs (ids, log-probabilities, the top-n) on the device and in pinned host
memory. ``launch`` queues on a stream: the words' upload, the kernel, the outputs' download; nothing
is allocated and nothing waits there, so the three could be part of a CUDA graph. ``result`` waits
for the stream and returns a sampler.SampleOutput; only ids (and log-probabilities when asked) cross
to the host, never logits. Chained launches (``start_chain``, ``launch_chained``, ``end_chain``: the
CUDA runner's sample_steps) upload the words once and then draw from a decode step's device ints, the
kernel writing each draw into the next step's ids and the history: a launch that a graph can replay.
"""

from __future__ import annotations

import numpy as np
import cupy as cp

from ...sampler import MAX_TOP_LOGPROBS, SampleOutput, SamplingBatch, SamplingError
from . import build
from .modules import kernel, launch as launch_kernel
from .sampler_params import SW_WORDS, HistoryTracker, history_row, pack_static, pack_step

THREADS = build.SAMPLER_THREADS
# the kernel's static shared memory, with room to spare: top-k's candidate keys and 4 KB (19,424 bytes in all
# under nvcc 13 at 4,096 candidates: 3,040 besides them)
_STATIC_SMEM = build.SAMPLER_CANDIDATES * 4 + 4096


class SamplerTooWide(ValueError):
    """A vocabulary whose row does not fit one block's shared memory on this GPU."""


def max_vocab(device=None) -> int:
    """The widest row kernels/sampler.cu takes on this GPU: 4 V bytes of dynamic shared memory per block."""
    dev = cp.cuda.Device() if device is None else device
    return (int(dev.attributes["MaxSharedMemoryPerBlockOptin"]) - _STATIC_SMEM) // 4


def check_vocab(vocab: int) -> None:
    if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or vocab < 1:
        raise ValueError(f"vocab must be a positive int; got {vocab!r}")
    limit = max_vocab()
    if vocab > limit:
        raise SamplerTooWide(f"the device sampler holds a row of logits in one block's shared memory: at most "
                             f"{limit} ids on this GPU; got a vocabulary of {vocab}")


def _pinned(shape: tuple, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    mem = cp.cuda.alloc_pinned_memory(max(n, 1) * dtype.itemsize)
    return np.frombuffer(mem, dtype, n).reshape(shape)


class DeviceSampler:
    """Sampling state of B rows over a vocabulary of V ids on the device (see the module's docstring)."""

    def __init__(self, batch: int, vocab: int):
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be a positive int; got {batch!r}")
        check_vocab(vocab)
        B, V = int(batch), int(vocab)
        self.B, self.V = B, V
        self.params_host = _pinned((SW_WORDS, B), np.uint32)
        self.params = cp.empty((SW_WORDS, B), cp.uint32)
        self.ids = cp.empty(B, cp.int32)  # [B]
        self.logprob = cp.empty(B, cp.float32)  # [B]
        self.top_ids = cp.empty((B, MAX_TOP_LOGPROBS), cp.int32)  # its first B n hold [B, n] (n = top_logprobs)
        self.top_logprobs = cp.empty((B, MAX_TOP_LOGPROBS), cp.float32)
        self.ids_host = _pinned((B,), np.int32)
        self.logprob_host = _pinned((B,), np.float32)
        self.top_ids_host = _pinned((B, MAX_TOP_LOGPROBS), np.int32)
        self.top_logprobs_host = _pinned((B, MAX_TOP_LOGPROBS), np.float32)
        self.history = None  # [B, V] int32, made for the first penalised batch
        self.tracker = None  # HistoryTracker of the batch the history holds
        self._pending = None  # (log-probabilities wanted, top_n) of the launch queued last
        self._static = None  # the batch whose parameters params_host holds
        self._chain = None  # during a run of chained launches: whether they read the history

    # ---- the history

    def _write_rows(self, batch: SamplingBatch, rows, stream) -> None:
        rows = list(rows)
        staging = np.empty((len(rows), self.V), np.int32)
        for j, b in enumerate(rows):
            history_row(batch.prompt_ids[b], batch.output_ids[b], self.V, out=staging[j])
        if rows == list(range(self.B)):
            self.history.set(staging, stream=stream)
        else:
            for j, b in enumerate(rows):
                self.history[b].set(staging[j], stream=stream)
        stream.synchronize()  # the copies from the staging buffer are done before it is freed

    def _history_for(self, batch: SamplingBatch, stream) -> np.ndarray:
        """The history's state for this launch: the ids to append [B] (-1 none), rows rewritten where needed."""
        if self.history is None:
            self.history = cp.zeros((self.B, self.V), cp.int32)
        if self.tracker is None or self.tracker.batch is not batch:
            self.tracker = HistoryTracker(batch)
            self._write_rows(batch, range(self.B), stream)
            return np.full(self.B, -1, np.int64)
        append, stale = self.tracker.step(batch)
        bad = (append >= self.V) | (append < -1)
        if bad.any():
            b = int(np.argmax(bad))
            raise SamplingError(f"output_ids[{b}] ends in token id {int(append[b])}, outside the vocabulary "
                                f"[0, {self.V})")
        if stale:
            self._write_rows(batch, stale, stream)
        return append

    # ---- the launch

    def launch(self, logits, batch: SamplingBatch, positions, stream, u_out=None) -> None:
        """Queue the draw of every row of ``batch`` from device logits [B, V] (float32, row stride V) on
        ``stream``; positions [B]: each row's Philox position. ``u_out``: a device float32 [B] that
        receives each row's uniform (tests). Read the result with ``result()``."""
        B, V = self.B, self.V
        if not isinstance(batch, SamplingBatch):
            raise TypeError(f"batch must be a SamplingBatch; got {type(batch).__name__}")
        if batch.batch != B:
            raise ValueError(f"the device sampler holds {B} rows; the batch has {batch.batch}")
        if not isinstance(logits, cp.ndarray) or logits.dtype != cp.float32 or logits.shape != (B, V):
            raise ValueError(f"logits must be a CuPy float32 [{B}, {V}] array; got "
                             f"{getattr(logits, 'dtype', type(logits).__name__)} {getattr(logits, 'shape', '')}")
        if not logits.flags.c_contiguous:
            raise ValueError("logits must be C-contiguous")
        top_n = batch.top_logprobs
        if top_n > V:
            raise SamplingError(f"top_logprobs {top_n} exceeds the vocabulary of {V}")
        if u_out is not None and (not isinstance(u_out, cp.ndarray) or u_out.dtype != cp.float32
                                  or u_out.shape != (B,)):
            raise ValueError(f"u_out must be a CuPy float32 [{B}] array")
        if self._pending is not None:
            stream.synchronize()  # the pinned words of the launch before are no longer read
        append = self._history_for(batch, stream) if batch.penalised else None
        if self._static is not batch:  # the parameters' words change only with the batch
            pack_static(batch, self.params_host)
            self._static = batch
        pack_step(batch, positions, self.params_host, append)
        s = stream.ptr
        rt = cp.cuda.runtime
        rt.memcpyAsync(self.params.data.ptr, self.params_host.ctypes.data, self.params_host.nbytes,
                       rt.memcpyHostToDevice, s)
        k = kernel("sampler", "sample_rows_f32", build.sampler())
        want_lp = batch.logprobs or top_n > 0  # as sampler.sample: always with the top-n
        self._launch_kernel(logits, append is not None, want_lp, top_n, u_out, None, None, stream)
        rt.memcpyAsync(self.ids_host.ctypes.data, self.ids.data.ptr, 4 * B, rt.memcpyDeviceToHost, s)
        if want_lp:
            rt.memcpyAsync(self.logprob_host.ctypes.data, self.logprob.data.ptr, 4 * B, rt.memcpyDeviceToHost, s)
        if top_n:
            n = 4 * B * top_n  # the kernel writes [B, top_n] packed at the buffers' start
            rt.memcpyAsync(self.top_ids_host.ctypes.data, self.top_ids.data.ptr, n, rt.memcpyDeviceToHost, s)
            rt.memcpyAsync(self.top_logprobs_host.ctypes.data, self.top_logprobs.data.ptr, n,
                           rt.memcpyDeviceToHost, s)
        self._pending = (want_lp, top_n)

    def _launch_kernel(self, logits, penalised: bool, want_lp: bool, top_n: int, u_out, step, host_ids,
                       stream) -> None:
        k = kernel("sampler", "sample_rows_f32", build.sampler())
        V = self.V
        args = (logits, np.int32(V), np.int32(V), self.params, self.history if penalised else None,
                self.ids, self.logprob if want_lp else None, np.int32(top_n),
                self.top_ids if top_n else None, self.top_logprobs if top_n else None, u_out,
                step, None if host_ids is None else np.uint64(host_ids.device_ptr))
        args = tuple(a if a is not None else np.uint64(0) for a in args)  # NULL pointers
        launch_kernel(k, (self.B,), (THREADS,), args, shared_mem=4 * V, stream=stream)

    # ---- chained steps (CudaRunner's sample steps: the draw fed forward on the device)

    def start_chain(self, batch: SamplingBatch, stream) -> bool:
        """Upload the words of ``batch`` for a run of chained launches (``launch_chained``), the history's rows
        brought up to date first (the ids the loop took since the last launch are added by the first launch).
        The chained launches add their own draws to the history on the device, so ``end_chain`` must follow
        the run. -> whether the launches read the history (the batch has penalties)."""
        if not isinstance(batch, SamplingBatch):
            raise TypeError(f"batch must be a SamplingBatch; got {type(batch).__name__}")
        if batch.batch != self.B:
            raise ValueError(f"the device sampler holds {self.B} rows; the batch has {batch.batch}")
        if batch.logprobs or batch.top_logprobs:
            raise ValueError("chained draws return ids only: a batch that wants log-probabilities draws step by step")
        if self._pending is not None:
            stream.synchronize()  # the pinned words of the launch before are no longer read
            self._pending = None
        append = self._history_for(batch, stream) if batch.penalised else None
        if self._static is not batch:
            pack_static(batch, self.params_host)
            self._static = batch
        # positions: the chained launches read each row's from the step's ints (SW_POSITION unused)
        pack_step(batch, np.zeros(self.B, np.int64), self.params_host, append)
        rt = cp.cuda.runtime
        rt.memcpyAsync(self.params.data.ptr, self.params_host.ctypes.data, self.params_host.nbytes,
                       rt.memcpyHostToDevice, stream.ptr)
        stream.synchronize()  # params_host is free again; once per run of steps
        self._chain = append is not None
        return self._chain

    def launch_chained(self, logits, step, host_ids, stream) -> None:
        """Queue the draw of every row from ``logits`` [B, V] (device float32) with the words start_chain
        uploaded: step [4, B] int32 (the decode step's ints on the device) gets the drawn ids and gives the
        positions; host_ids (ops.MappedInts of B) gets the ids too. Capturable: nothing is uploaded."""
        if self._chain is None:
            raise RuntimeError("launch_chained before start_chain")
        if logits.shape != (self.B, self.V) or logits.dtype != cp.float32 or not logits.flags.c_contiguous:
            raise ValueError(f"logits must be a C-contiguous CuPy float32 [{self.B}, {self.V}] array")
        if step.shape != (4, self.B) or step.dtype != cp.int32:
            raise ValueError(f"step must be a CuPy int32 [4, {self.B}] array")
        self._launch_kernel(logits, self._chain, False, 0, None, step, host_ids, stream)

    def end_chain(self) -> None:
        """A run of chained launches is over: the device history holds draws the host's lists may not
        (a finished row's, a step taken back), so its rows are written afresh at the next penalised launch."""
        self._chain = None
        self.tracker = None

    @property
    def chain_penalised(self):
        """Whether the current run of chained launches reads the history (None: no run)."""
        return self._chain

    def result(self, stream) -> SampleOutput:
        """Wait for the launch queued last and return its SampleOutput (ids [B] int64, ...)."""
        if self._pending is None:
            raise RuntimeError("DeviceSampler.result: no launch queued")
        want_lp, top_n = self._pending
        B = self.B
        stream.synchronize()
        self._pending = None
        ids = self.ids_host.astype(np.int64)
        if (ids < 0).any():
            row = int(np.argmax(ids < 0))
            raise SamplingError(f"the logits of row {row} contain NaN or +inf, or are all -inf, or overflowed under "
                                "its penalties (the model's activations overflowed or its weights are not usable); "
                                "nothing can be sampled")
        return SampleOutput(
            ids,
            self.logprob_host.copy() if want_lp else None,
            self.top_ids_host.reshape(-1)[:B * top_n].reshape(B, top_n).astype(np.int64) if top_n else None,
            self.top_logprobs_host.reshape(-1)[:B * top_n].reshape(B, top_n).copy() if top_n else None)

"""solve(): one non-causal GPT-2 block on the user's device buffers (gpt2block.solve's device path),
its calls as CUDA graphs (one per buffers, seq_len and precision) and the states that hold them.

    solve_device(x, output, weights, seq_len, precision, d, stream=)   x, output [seq_len, d]; weights: one
                                                   block in the flat layout (gpt2block.layout); the work is
                                                   queued on ``stream`` (default: CuPy's current stream)
    clear_solve_cache()                            drop every cached graph, workspace and weight planes

The block is runner.run_block on the weights' views; the wgmma GEMM's weight planes are remade from
the call's weights by every call, on a second stream beside the LayerNorm and attention.

Threads. What a call caches lives in a _SolveState: its two streams and events, its graphs, its
workspace and weight planes (and, keyed on its streams, the attention and GEMV scratch of attention.py
and linear.py). A call takes a state from its device's pool (state_pool.StatePool) and holds it alone
until it returns, so concurrent calls from several threads never share a graph, a workspace or a stream,
and a state's graphs are never captured or launched by two threads at once. A pool holds at most
SOLVE_STATES_MAX states per device; a call beyond that waits for one to be given back. A thread takes
the state it used last where that one is free, so one thread's repeated calls replay their graphs.

Memory, the bound: per device at most SOLVE_STATES_MAX states, each holding one workspace sized to the
longest seq_len it has run (9 d float32 per row: 27 KB a row at d = 768, 28 MB at seq_len 1024), the
weight planes of each precision it has run (d = 768: 57 MB for fp32's tf32x3 planes, 28 MB for tf32's),
at most SOLVE_GRAPHS_MAX graphs (a graph captured on a workspace since outgrown is dropped with it),
its streams' attention scratch (grown with seq_len like the workspace) and at most SOLVE_SEEN_MAX
remembered keys. Threads that come and go add nothing.
"""

from __future__ import annotations

import cupy as cp

from ...config import HEAD_DIM
from ...layout import block_layout
from . import attention, linear
from .runner import MATRICES, BlockWorkspace, prepare_block_planes, run_block
from .state_pool import StatePool

SOLVE_VARIANTS = {"fp32": ("tf32x3", "tf32x3f"), "tf32": ("tf32", "tf32")}
SOLVE_STATES_MAX = 4  # states per device: solve() calls that run at once (more wait for a free state)
SOLVE_GRAPHS_MAX = 16  # captured solve calls kept per state (least recently used dropped)
SOLVE_SEEN_MAX = 4096  # keys remembered per state as run once (forgotten all at once beyond this)
# A capture in thread-local mode: another thread's work (allocations, synchronizations, the legacy
# stream) never invalidates it, and an unsafe call of this thread's own (an allocation) raises
# instead of leaving a freed address in the graph.
_CAPTURE_MODE = 1  # cudaStreamCaptureModeThreadLocal (CUDA's driver_types.h)

_rt = cp.cuda.runtime


class _SolveState:
    """One caller's solve() state on one device (held by one call at a time, see the module's note).

    A key's first call runs eagerly (compiling kernels, sizing the workspace and scratch), its second is
    captured, later ones replay the graph, so a call costs one graph launch instead of a dozen Python
    launches. A graph reads x and the weights at replay, so new contents at the same addresses are
    picked up (the weight planes are remade inside it from this call's weights).

    Ordering: ``done`` is recorded after the state's last work, wherever it ran; every call first makes
    its work wait for it (the state's workspace and planes are reused) and for the caller's stream.
    A replay is launched on the caller's stream itself. An eager or captured call runs on the private
    ``stream`` (a capture needs a stream of its own), after an event on the caller's stream, and the
    caller's stream then waits for ``done``: either way the call's work comes after the caller's earlier
    work on its stream and before its later work."""

    def __init__(self):
        self.stream = cp.cuda.Stream(non_blocking=True)  # on the device current at construction
        self.side = cp.cuda.Stream(non_blocking=True)  # the weight planes, forked from self.stream
        self.ready = cp.cuda.Event(disable_timing=True)  # the caller's work so far (eager / captured calls)
        self.done = cp.cuda.Event(disable_timing=True)  # the end of this state's last work
        self.fork = cp.cuda.Event(disable_timing=True)
        self.fork2 = cp.cuda.Event(disable_timing=True)
        self.planes_ready = {name: cp.cuda.Event(disable_timing=True) for name in MATRICES}
        self.reset()

    def reset(self) -> None:
        """Forget what is cached (after the state's last work has finished: its buffers may be freed)."""
        self.done.synchronize()
        self.graphs: dict = {}  # key -> (graph, workspace), least recently used first
        self.seen: set = set()  # keys that ran eagerly once
        self.ws: dict = {}  # d -> BlockWorkspace
        self.planes: dict = {}  # (variant, d) -> {name: linear.Planes}

    def replay(self, key, caller) -> bool:
        """Launch key's graph on the caller's stream if there is one (the fast path of a repeated call:
        nothing else is needed); False if not."""
        got = self.graphs.pop(key, None)
        if got is None:
            return False
        self.graphs[key] = got  # now the most recently used
        _rt.streamWaitEvent(caller.ptr, self.done.ptr, 0)
        got[0].launch(caller)
        _rt.eventRecord(self.done.ptr, caller.ptr)
        return True

    def workspace(self, rows: int, d: int) -> BlockWorkspace:
        """This state's workspace of width d for at least ``rows`` rows: regrown only for a longer
        seq_len, the graphs captured on the old one dropped with it (on the current stream: call
        after this state's earlier work is ordered before it)."""
        ws = self.ws.get(d)
        if ws is None or ws.rows < rows:
            if ws is not None:
                self.graphs = {k: g for k, g in self.graphs.items() if g[1] is not ws}
            ws = self.ws[d] = BlockWorkspace(rows, d)
        return ws

    def block_planes(self, w, variant: str, d: int) -> dict:
        """This state's planes for (variant, d), made at their first call (never under a capture)."""
        got = self.planes.get((variant, d))
        if got is None:
            got = self.planes[(variant, d)] = prepare_block_planes(w, variant)
        return got

    def run(self, key, caller, prepare, body) -> None:
        """A call without a graph: ``prepare()`` allocates what the call needs (returns its workspace),
        ``body()`` queues its kernels on the current stream (no allocation). Both on self.stream, after
        the caller's earlier work and this state's; the caller's stream waits for the end."""
        _rt.eventRecord(self.ready.ptr, caller.ptr)
        _rt.streamWaitEvent(self.stream.ptr, self.ready.ptr, 0)
        _rt.streamWaitEvent(self.stream.ptr, self.done.ptr, 0)
        try:
            with self.stream:
                ws = prepare()
                if key in self.seen:
                    self.stream.synchronize()
                    self.stream.begin_capture(_CAPTURE_MODE)
                    try:
                        body()
                    except BaseException:
                        self.seen.discard(key)  # run eagerly next time
                        raise
                    finally:
                        graph = self.stream.end_capture()
                    graph.launch(self.stream)
                    self.graphs[key] = (graph, ws)
                    while len(self.graphs) > SOLVE_GRAPHS_MAX:
                        self.graphs.pop(next(iter(self.graphs)))
                else:
                    body()
                    if len(self.seen) >= SOLVE_SEEN_MAX:
                        self.seen.clear()
                    self.seen.add(key)
        finally:
            _rt.eventRecord(self.done.ptr, self.stream.ptr)
            _rt.streamWaitEvent(caller.ptr, self.done.ptr, 0)


_pools: dict[int, StatePool] = {}  # device -> its states


def _pool(dev: int) -> StatePool:
    pool = _pools.get(dev)
    if pool is None:
        pool = _pools.setdefault(dev, StatePool(_SolveState, SOLVE_STATES_MAX))
    return pool


def clear_solve_cache() -> None:
    """Drop every cached solve() graph, workspace and weight planes, of every device (each state's
    last work is waited for first). A call in flight keeps its own until it returns."""
    for dev, pool in list(_pools.items()):
        def reset(st, dev=dev):
            with cp.cuda.Device(dev):
                st.reset()

        pool.clear(reset)


def _queue_block(st: _SolveState, w: dict, xa, out, ws: BlockWorkspace, seq_len: int, d: int,
                 gemm_variant: str, attn_variant: str, planes) -> None:
    """The block's kernels on the current stream (st.stream, eager or under capture). The weight
    planes (``planes`` not None) are remade on st.side: W_qkv's forked at the call's start, beside the
    first LayerNorm; the other three once the QKV GEMM is queued, beside attention; each GEMM waits only
    for its own matrix's planes (in a graph: parallel branches). Every fork comes after the previous
    call's GEMMs in this stream's order, which read the same planes. (Measured fastest of three
    schedules, docs/PERFORMANCE.md version 18; the others live in dev/tune_solve_planes.py.)"""
    n_head = d // HEAD_DIM

    def attend(qkv, att):
        attention.attention_prefill(
            qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], att, n_head=n_head, s_q=seq_len, s_kv=seq_len,
            causal=False, q_start=0, q_stride=3 * d, kv_stride=3 * d, variant=attn_variant)

    side_last = []  # the side stream's last event, which this stream joins

    def make_planes(names, fork):
        fork.record()
        st.side.wait_event(fork)
        with st.side:
            for name in names:
                linear.prepare_planes(w[name], gemm_variant, out=planes[name])
                st.planes_ready[name].record()
        side_last[:] = [st.planes_ready[names[-1]]]

    ready, after_qkv = None, None
    if planes is not None:
        make_planes(MATRICES[:1], st.fork)
        after_qkv = lambda qkv: make_planes(MATRICES[1:], st.fork2)  # noqa: E731
        ready = st.planes_ready
    try:
        # x is only read; the residual stream after attention lives in output
        run_block(w, xa, ws, seq_len, eps=1e-5, gemm_variant=gemm_variant, attend=attend, out=out,
                  planes=planes, planes_ready=ready, after_qkv=after_qkv)
    finally:
        if side_last:  # joined even if run_block raised (a capture must end joined)
            cp.cuda.get_current_stream().wait_event(side_last[0])


def solve_device(x, output, weights, seq_len: int, precision: str = "fp32", d: int = 768,
                 ptrs: tuple | None = None, stream=None, dev: int | None = None) -> None:
    """The device path of gpt2block.solve (arguments already checked there), on the current device:
    x, output [seq_len, d]. ``stream``: the caller's stream (anything with the handle as ``.ptr``;
    default CuPy's current stream): the call's work is ordered after the work queued on it so far and
    before the work queued on it next. ``ptrs``: the device addresses of x, output and weights, where the
    caller has them: a repeated call then replays its graph without touching the arrays. ``dev``: the
    current device, where the caller knows it."""
    variants = SOLVE_VARIANTS.get(precision)
    if variants is None:
        raise ValueError(f"solve() runs precision fp32 or tf32 (bf16 is a decode weight mode); got {precision!r}")
    caller = cp.cuda.get_current_stream() if stream is None else stream
    pool = _pool(_rt.getDevice() if dev is None else dev)
    st = pool.take()
    try:
        if ptrs is not None and st.replay((*ptrs, seq_len, precision, d), caller):
            return
        gemm_variant, attn_variant = variants
        xa = cp.asarray(x).reshape(seq_len, d)
        out = cp.asarray(output).reshape(seq_len, d)
        wflat = cp.asarray(weights).reshape(-1)
        w = block_layout(d).views(wflat)
        use_planes = seq_len > linear.GEMV_MAX_M and linear.wgmma_available()
        got = {}

        def prepare():
            got["ws"] = st.workspace(seq_len, d)
            # the wgmma GEMM's weight planes: their buffers; remade from this call's weights by every call
            got["planes"] = st.block_planes(w, gemm_variant, d) if use_planes else None
            return got["ws"]

        def body():
            _queue_block(st, w, xa, out, got["ws"], seq_len, d, gemm_variant, attn_variant, got["planes"])

        st.run((xa.data.ptr, out.data.ptr, wflat.data.ptr, seq_len, precision, d), caller, prepare, body)
    finally:
        pool.give(st)

"""solve(): one non-causal GPT-2 block on the user's device buffers (gpt2block.solve's device path),
its calls as CUDA graphs (one per buffers, seq_len and precision) and its workspaces.

    solve_device(x, output, weights, seq_len, precision, d)   x, output [seq_len, d]; weights: one block
                                                               in the flat layout (gpt2block.layout)

The block is runner.run_block on the weights' views; the wgmma GEMM's weight planes are remade from
the call's weights by every call, on a second stream beside the LayerNorm and attention.
"""

from __future__ import annotations

import cupy as cp

from ...config import HEAD_DIM
from ...layout import block_layout
from . import attention, linear
from .runner import MATRICES, BlockWorkspace, prepare_block_planes, run_block

_solve_ws: dict[tuple, BlockWorkspace] = {}  # (device, d) -> the solve() workspace
SOLVE_VARIANTS = {"fp32": ("tf32x3", "tf32x3f"), "tf32": ("tf32", "tf32")}
SOLVE_GRAPHS_MAX = 16  # captured solve calls kept per device (least recently used dropped)
SOLVE_SEEN_MAX = 4096  # keys remembered as run once (forgotten all at once beyond this)
SOLVE_PLANES_SCHEDULES = ("side_first", "main_first", "start")
SOLVE_PLANES_SCHEDULE = "side_first"  # where solve() makes its weight planes (see solve_device's body);
                                      # "start" and "main_first" kept for A/B runs


class _SolveGraphs:
    """One device's solve() calls as CUDA graphs, keyed on the buffers' addresses, seq_len and
    precision: a key's first call runs eagerly (compiling kernels, sizing workspaces), its second is
    captured, later ones replay it, so a call costs one graph launch instead of a dozen Python
    launches. A graph reads x and the weights at replay, so new contents at the same addresses are
    picked up (the weight planes are remade inside it from this call's weights). Everything runs
    on one private stream (the planes on a second one forked from it and joined back), ordered after
    the caller's current stream and before its later work (events both ways); so the calls of a
    device run one after another, and they share one set of weight planes per (variant, d),
    allocated outside any capture."""

    def __init__(self):
        self.stream = cp.cuda.Stream(non_blocking=True)  # on the device current at construction
        self.events = tuple(cp.cuda.Event(disable_timing=True) for _ in range(2))  # (ready, done)
        # the weight planes are made on a second stream, forked from self.stream (SOLVE_PLANES_SCHEDULE:
        # W_qkv's at the call's start, beside the first LayerNorm; the other three once the QKV GEMM
        # is queued, beside attention): each matrix's GEMM waits only for its own planes (in a
        # graph: parallel branches)
        self.side = cp.cuda.Stream(non_blocking=True)
        self.fork = cp.cuda.Event(disable_timing=True)
        self.fork2 = cp.cuda.Event(disable_timing=True)
        self.planes_ready = {name: cp.cuda.Event(disable_timing=True) for name in MATRICES}
        self.graphs: "dict[tuple, tuple]" = {}  # key -> (graph, workspace), least recently used first
        self.seen: set = set()  # keys that ran eagerly once
        self.planes: dict = {}  # (variant, d) -> {name: linear.Planes}

    def block_planes(self, w, variant: str, d: int) -> dict:
        """The device's planes for (variant, d), made at the first call (outside any capture)."""
        got = self.planes.get((variant, d))
        if got is None:
            got = self.planes[(variant, d)] = prepare_block_planes(w, variant)
        return got

    def _enter(self):
        caller = cp.cuda.get_current_stream()
        self.events[0].record(caller)
        self.stream.wait_event(self.events[0])
        return caller

    def _leave(self, caller) -> None:
        self.events[1].record(self.stream)
        caller.wait_event(self.events[1])

    def replay(self, key, ws: BlockWorkspace) -> bool:
        """Launch key's graph if it has one for this workspace (the fast path of a repeated call:
        nothing else is needed); False if not."""
        got = self.graphs.get(key)
        if got is None or got[1] is not ws:
            return False
        self.graphs[key] = self.graphs.pop(key)  # now the most recently used
        caller = self._enter()
        try:
            got[0].launch(self.stream)
        finally:
            self._leave(caller)
        return True

    def run(self, key, ws: BlockWorkspace, body) -> None:
        """body() queues the call's kernels on the current stream (no allocation if run before)."""
        caller = self._enter()
        try:
            with self.stream:
                got = self.graphs.pop(key, None)
                if got is not None and got[1] is not ws:  # the workspace was regrown since the capture
                    got = None
                if got is None and key in self.seen:
                    self.stream.synchronize()
                    self.stream.begin_capture()
                    try:
                        body()
                    except BaseException:
                        self.seen.discard(key)  # run eagerly next time
                        raise
                    finally:
                        graph = self.stream.end_capture()
                    got = (graph, ws)
                if got is not None:
                    got[0].launch(self.stream)
                    self.graphs[key] = got
                    while len(self.graphs) > SOLVE_GRAPHS_MAX:
                        self.graphs.pop(next(iter(self.graphs)))
                else:
                    body()
                    if len(self.seen) >= SOLVE_SEEN_MAX:
                        self.seen.clear()
                    self.seen.add(key)
        finally:
            self._leave(caller)


_solve_graphs: dict[int, _SolveGraphs] = {}  # device -> its graphs


def _solve_key_tail(seq_len: int, precision: str) -> tuple:
    """The end of a solve graph's key: what else its kernels depend on (the planes' schedule included)."""
    return seq_len, precision, SOLVE_PLANES_SCHEDULE


def solve_workspace(rows: int, d: int) -> BlockWorkspace:
    """The current device's solve() workspace: allocated at the first call and regrown only for a
    longer seq_len (a graph captured on the old one keeps it alive until it is dropped)."""
    key = (cp.cuda.runtime.getDevice(), d)
    ws = _solve_ws.get(key)
    if ws is None or ws.rows < rows:
        ws = _solve_ws[key] = BlockWorkspace(rows, d)
    return ws


def solve_device(x, output, weights, seq_len: int, precision: str = "fp32", d: int = 768,
                 ptrs: tuple | None = None) -> None:
    """The device path of gpt2block.solve (arguments already checked there): x, output [seq_len, d].
    ``ptrs``: the device addresses of x, output and weights, where the caller has them: a repeated
    call then replays its graph without touching the arrays."""
    if precision not in SOLVE_VARIANTS:
        raise ValueError(f"solve() runs precision fp32 or tf32 (bf16 is a decode weight mode); got {precision!r}")
    if SOLVE_PLANES_SCHEDULE not in SOLVE_PLANES_SCHEDULES:
        raise ValueError(f"cuda.solve.SOLVE_PLANES_SCHEDULE must be one of {', '.join(SOLVE_PLANES_SCHEDULES)}; "
                         f"got {SOLVE_PLANES_SCHEDULE!r}")
    dev = cp.cuda.runtime.getDevice()
    graphs = _solve_graphs.get(dev)
    if graphs is None:
        graphs = _solve_graphs[dev] = _SolveGraphs()
    if ptrs is not None:
        ws = _solve_ws.get((dev, d))
        if ws is not None and ws.rows >= seq_len and graphs.replay((dev,) + tuple(ptrs) + _solve_key_tail(seq_len, precision), ws):
            return
    gemm_variant, attn_variant = SOLVE_VARIANTS[precision]
    xa = cp.asarray(x).reshape(seq_len, d)
    out = cp.asarray(output).reshape(seq_len, d)
    wflat = cp.asarray(weights).reshape(-1)
    w = block_layout(d).views(wflat)
    ws = solve_workspace(seq_len, d)
    n_head = d // HEAD_DIM
    # the wgmma GEMM's weight planes, remade from this call's weights by every call (they may change)
    planes = None
    if seq_len > linear.GEMV_MAX_M and linear.wgmma_available():
        planes = graphs.block_planes(w, gemm_variant, d)

    def attend(qkv, att):
        attention.attention_prefill(
            qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], att, n_head=n_head, s_q=seq_len, s_kv=seq_len,
            causal=False, q_start=0, q_stride=3 * d, kv_stride=3 * d, variant=attn_variant)

    def make_planes(names, fork=None):
        # on the side stream after `fork` is reached on this one, or on this one (fork None)
        if fork is not None:
            fork.record()
            graphs.side.wait_event(fork)
        with graphs.side if fork is not None else cp.cuda.get_current_stream():
            for name in names:
                linear.prepare_planes(w[name], gemm_variant, out=planes[name])
                graphs.planes_ready[name].record()
                if fork is not None:
                    side_last[:] = [graphs.planes_ready[name]]

    side_last = []  # the side stream's last event, which this stream joins

    def body():
        ready, after_qkv = None, None
        side_last.clear()
        if planes is not None:
            # Every fork comes after the previous call's GEMMs (in this stream's order), which read
            # the same planes. "side_first": W_qkv's planes on the side stream at the call's start,
            # beside the first LayerNorm; the other three once the QKV GEMM is queued, beside
            # attention. "main_first": W_qkv's on this stream, before the LayerNorm. "start"
            # (version 17): all four on the side stream at the start; the LayerNorm, which does not
            # depend on them, started only as the last began (25 us in). (In a graph, the root queued
            # second starts 12-19 us after the first in a lone call, dev/timeline_solve.py; back
            # to back it costs nothing and side_first measured fastest, dev/tune_solve_planes.py.)
            sched = SOLVE_PLANES_SCHEDULE
            if sched == "start":
                make_planes(MATRICES, graphs.fork)
            else:
                make_planes(MATRICES[:1], graphs.fork if sched == "side_first" else None)
                after_qkv = lambda qkv: make_planes(MATRICES[1:], graphs.fork2)  # noqa: E731
            ready = graphs.planes_ready
        try:
            # x is only read; the residual stream after attention lives in output
            run_block(w, xa, ws, seq_len, eps=1e-5, gemm_variant=gemm_variant, attend=attend, out=out,
                      planes=planes, planes_ready=ready, after_qkv=after_qkv)
        finally:
            if side_last:  # joined even if run_block raised (a capture must end joined)
                cp.cuda.get_current_stream().wait_event(side_last[0])

    graphs.run((dev, xa.data.ptr, out.data.ptr, wflat.data.ptr) + _solve_key_tail(seq_len, precision), ws, body)

"""solve() from several threads at once and on the caller's stream (backends/cuda/solve.py's states):
concurrent calls give the bits of the same calls made one after another, a call is ordered on the
caller's current stream (torch's for torch tensors, CuPy's for CuPy arrays), and memory stays bounded."""

import threading

import pytest
from torch_ref import challenge_weights, torch_block

import gpt2block

THREADS, CALLS = 8, 50
# per thread: three seq_lens (GEMV path, small GEMMs, split-key attention at 1024), rotated by thread
SEQS = (1, 7, 64, 100, 333, 1024)
SPIN = 20_000_000  # torch.cuda._sleep cycles (about 10 ms): the host runs well ahead of the stream


def _thread_seqs(i):
    return [SEQS[(i + k) % len(SEQS)] for k in range(0, len(SEQS), 2)]


def _inputs(torch, i, s):
    gen = torch.Generator().manual_seed(1000 * i + s)
    return (torch.rand(s, 768, generator=gen) * 2 - 1).cuda()


@pytest.fixture(scope="module")
def shared_weights(torch_cuda):
    return challenge_weights(torch_cuda, biases=True, gen=torch_cuda.Generator().manual_seed(44))


def _run_threads(target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 (reported below, with its thread)
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


@pytest.mark.parametrize("streams", ["own", "default"])
@pytest.mark.parametrize("arrays", ["torch", "cupy"])
def test_threads_give_the_serial_bits(torch_cuda, cp, shared_weights, arrays, streams):
    """8 threads x 50 calls, each thread its own x and output for three seq_lens (mixed, cycled), all the
    same weights, fp32 and tf32 by thread; output poisoned before each call and compared on the caller's
    stream right after it (no synchronize between): every call gives the bits of the serial call. The
    callers' streams: one non-blocking stream per thread ("own") or everyone's default stream."""
    torch = torch_cuda
    use_cupy = arrays == "cupy"
    w = cp.asarray(shared_weights) if use_cupy else shared_weights
    prec = ["fp32" if i % 2 == 0 else "tf32" for i in range(THREADS)]
    bufs, want = {}, {}
    for i in range(THREADS):  # the serial calls, one after another
        for s in _thread_seqs(i):
            x = _inputs(torch, i, s)
            if use_cupy:
                x = cp.asarray(x).copy()
            out = cp.full((s, 768), cp.nan, cp.float32) if use_cupy else torch.full_like(x, float("nan"))
            gpt2block.solve(x, out, w, s, precision=prec[i])
            want[i, s] = out.copy() if use_cupy else out.clone()
            bufs[i, s] = (x, out)
    torch.cuda.synchronize()
    for (i, s), o in want.items():
        assert bool((o == o).all()), f"thread {i}, seq_len {s}: the serial call left NaN"
    bad = [[] for _ in range(THREADS)]

    def work(i):
        seqs = _thread_seqs(i)
        if streams == "own":
            stream = cp.cuda.Stream(non_blocking=True) if use_cupy else torch.cuda.Stream()
        else:
            stream = cp.cuda.Stream.null if use_cupy else torch.cuda.default_stream()
        with (stream if use_cupy else torch.cuda.stream(stream)):
            for j in range(CALLS):
                s = seqs[j % len(seqs)]
                x, out = bufs[i, s]
                out.fill(cp.nan) if use_cupy else out.fill_(float("nan"))
                gpt2block.solve(x, out, w, s, precision=prec[i])
                same = bool(cp.array_equal(out, want[i, s])) if use_cupy else bool(torch.equal(out, want[i, s]))
                if not same:
                    bad[i].append((j, s))

    errors = _run_threads(work)
    assert not errors, errors
    assert not any(bad), f"calls whose bits differ from the serial call's (thread: [(call, seq_len)]): {bad}"
    from gpt2block.backends.cuda import solve as cuda_solve

    assert cuda_solve._pool(cp.cuda.runtime.getDevice()).count <= cuda_solve.SOLVE_STATES_MAX


@pytest.mark.parametrize("arrays", ["torch", "torch-public-stream", "cupy"])
def test_solve_is_ordered_on_the_callers_stream(torch_cuda, cp, shared_weights, arrays, monkeypatch):
    """On a non-default stream, behind a 10 ms spin: x written, solve, output copied, x poisoned, all
    queued without a synchronize, four times (eager, captured, replayed twice) with new x each time.
    A call that did not wait for the write of x, or whose output the copy did not wait for, or that read
    x after it was poisoned, gives other bits than the same call made alone. ("torch-public-stream":
    torch's stream asked through torch.cuda.current_stream, as where torch._C lacks the raw call.)"""
    torch = torch_cuda
    if arrays == "torch-public-stream":
        monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream", raising=False)
    s = 1024
    srcs = [_inputs(torch, 90 + k, s) for k in range(4)]
    use_cupy = arrays == "cupy"
    w = cp.asarray(shared_weights) if use_cupy else shared_weights
    want = []
    for src in srcs:
        out = torch.empty_like(src)
        gpt2block.solve(src, out, shared_weights, s)
        want.append(out)
    torch.cuda.synchronize()
    got = []
    if use_cupy:
        cstream = cp.cuda.Stream(non_blocking=True)
        tstream = torch.cuda.ExternalStream(cstream.ptr)
        x = cp.empty((s, 768), cp.float32)
        out = cp.empty((s, 768), cp.float32)
        with cstream:
            for src in srcs:
                with torch.cuda.stream(tstream):
                    torch.cuda._sleep(SPIN)
                x[...] = cp.asarray(src)
                out.fill(cp.nan)
                gpt2block.solve(x, out, w, s)
                got.append(out.copy())
                x.fill(cp.nan)
        cstream.synchronize()
        got = [torch.as_tensor(g, device="cuda") for g in got]
    else:
        stream = torch.cuda.Stream()
        x = torch.empty(s, 768, device="cuda")
        out = torch.empty_like(x)
        with torch.cuda.stream(stream):
            for src in srcs:
                torch.cuda._sleep(SPIN)
                x.copy_(src)
                out.fill_(float("nan"))
                gpt2block.solve(x, out, w, s)
                got.append(out.clone())
                x.fill_(float("nan"))
        stream.synchronize()
    for k, (g, wnt) in enumerate(zip(got, want)):
        assert torch.equal(g, wnt), f"call {k}: not the bits of the call made alone"


def _memory(cp, torch):
    pool = cp.get_default_memory_pool()
    free, _ = cp.cuda.runtime.memGetInfo()
    return pool.used_bytes(), pool.total_bytes(), torch.cuda.memory_allocated(), free


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_device_memory_flat_over_200_calls(torch_cuda, cp, shared_weights, precision):
    """After each key's eager and captured call: 200 more calls (two seq_lens alternating) allocate
    nothing (CuPy's pool, torch's allocator) and the device's free memory does not move."""
    torch = torch_cuda
    xs = {s: _inputs(torch, 7, s) for s in (100, 1024)}
    outs = {s: torch.empty_like(x) for s, x in xs.items()}
    for _ in range(3):
        for s in xs:
            gpt2block.solve(xs[s], outs[s], shared_weights, s, precision=precision)
    torch.cuda.synchronize()
    before = _memory(cp, torch)
    for k in range(200):
        s = (100, 1024)[k % 2]
        gpt2block.solve(xs[s], outs[s], shared_weights, s, precision=precision)
    torch.cuda.synchronize()
    after = _memory(cp, torch)
    assert after[:3] == before[:3], f"pool used / total, torch allocated: {before[:3]} -> {after[:3]}"
    assert abs(after[3] - before[3]) <= 2 << 20, f"device free memory {before[3]} -> {after[3]}"


def test_threads_memory_bounded_by_the_states(torch_cuda, cp, shared_weights):
    """8 threads, each its own buffers at seq_len 1024, two rounds of 25 calls: the pool holds at most
    SOLVE_STATES_MAX states, and what the second round adds to CuPy's pool is at most what states made
    in it hold (nothing when the first round made them all)."""
    from gpt2block.backends.cuda import solve as cuda_solve

    torch = torch_cuda
    s = 1024
    bufs = {i: (_inputs(torch, 50 + i, s), torch.empty(s, 768, device="cuda")) for i in range(THREADS)}
    pool = cuda_solve._pool(cp.cuda.runtime.getDevice())

    def work(i):
        x, out = bufs[i]
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(25):
                gpt2block.solve(x, out, shared_weights, s)
            torch.cuda.current_stream().synchronize()

    assert not _run_threads(work)
    torch.cuda.synchronize()
    used, count = cp.get_default_memory_pool().used_bytes(), pool.count
    assert not _run_threads(work)
    torch.cuda.synchronize()
    # a state's workspace, fp32's two planes of the four matrices, and 32 MB for its attention scratch
    per_state = 9 * 768 * 4 * s + 2 * 4 * 768 * 768 * 12 + (32 << 20)
    grown = cp.get_default_memory_pool().used_bytes() - used
    assert count <= pool.count <= cuda_solve.SOLVE_STATES_MAX
    assert grown <= (pool.count - count) * per_state, f"{grown} bytes more with {pool.count - count} new states"


def test_workspace_regrowth_up_then_down(torch_cuda, cp, shared_weights):
    """seq_len 1, 3, 1023, 1025, 4096 from a cleared cache (the workspace regrown at each, the graphs on
    the old one dropped), then down again, each twice (eager, captured): the same bits both ways, and
    within the challenge's tolerance of the torch block."""
    from gpt2block.backends.cuda import solve as cuda_solve

    torch = torch_cuda
    torch.cuda.synchronize()
    cuda_solve.clear_solve_cache()
    seqs = (1, 3, 1023, 1025, 4096)
    xs = {s: _inputs(torch, 3, s) for s in seqs}
    first = {}
    for order in (seqs, seqs[::-1]):
        for s in order:
            for _ in range(2):
                out = torch.full_like(xs[s], float("nan"))
                gpt2block.solve(xs[s], out, shared_weights, s)
                torch.cuda.synchronize()
                if s not in first:
                    first[s] = out
                    torch.testing.assert_close(out, torch_block(xs[s], shared_weights), atol=1e-3, rtol=1e-3)
                assert torch.equal(out, first[s]), f"seq_len {s}: other bits after regrowth"

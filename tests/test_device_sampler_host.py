"""backends/cuda/sampler.py's host side without a GPU: CuPy stood in by NumPy arrays (host pointers, memmove
for the copies) and the kernel by a NumPy model of sample_rows_f32 that reads the packed words and the history
as the kernel does (test_sampler_kernel_model's arithmetic). Over a few steps of a generation-like loop (the
loop appending the ids it takes, a finished row taking none, a row's list rewritten) DeviceSampler's ids,
log-probabilities and top-n equal sampler.sample()'s on the same logits and histories."""

import ctypes
import importlib
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from gpt2block.backends.cuda import sampler_params as sp
from gpt2block.sampler import SamplingBatch, SamplingError, SamplingParams, philox4x32, raw_logprobs, sample
from test_sampler_kernel_model import kernel_draw


class _DevArray(np.ndarray):
    """A "device" array: host memory whose address stands for the device pointer."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.ctypes.data)

    def set(self, arr, stream=None):
        self[...] = arr


def _fake_cupy() -> ModuleType:
    cp = ModuleType("cupy")
    cp.ndarray = _DevArray
    cp.float32, cp.float64, cp.int32, cp.uint32 = np.float32, np.float64, np.int32, np.uint32
    cp.empty = lambda shape, dtype=np.float32: np.empty(shape, dtype).view(_DevArray)
    cp.zeros = lambda shape, dtype=np.float32: np.zeros(shape, dtype).view(_DevArray)
    cp.asarray = lambda a, dtype=None: np.array(a, dtype).view(_DevArray)
    runtime = SimpleNamespace(memcpyHostToDevice=1, memcpyDeviceToHost=2,
                              memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n))
    cp.cuda = SimpleNamespace(runtime=runtime, alloc_pinned_memory=lambda n: bytearray(n),
                              Device=lambda: SimpleNamespace(attributes={"MaxSharedMemoryPerBlockOptin": 232448}))
    return cp


def _model_launch(k, grid, block, args, shared_mem=0, stream=None):
    """sample_rows_f32 in NumPy: the words decoded, the history appended and applied, kernel_draw."""
    logits, V, ld, params, history, ids, logprob, top_n, top_ids, top_lp, u_out, step, host_ids = args
    V, top_n, B = int(V), int(top_n), grid[0]
    w = np.asarray(params)
    chained = isinstance(step, np.ndarray)
    host = (np.ctypeslib.as_array((ctypes.c_int32 * B).from_address(int(host_ids))) if int(host_ids) else None)
    for b in range(B):
        raw = np.asarray(logits[b], np.float32)
        if np.isnan(raw).any() or np.isposinf(raw).any() or np.isneginf(raw).all():
            ids[b] = -1
            if host is not None:
                host[b] = -1
            continue
        def f64(i):
            return float(np.array([w[i, b], w[i + 1, b]], np.uint32).view(np.float64)[0])
        rep, pres, freq = w[sp.SW_REPETITION:sp.SW_FREQUENCY + 1, b].view(np.float32)
        l = raw + np.float32(0.0)
        if isinstance(history, np.ndarray):
            h = history[b]
            add = int(w[sp.SW_APPEND, b:b + 1].view(np.int32)[0])
            if add >= 0:
                h[add] += 1
            w[sp.SW_APPEND, b] = np.uint32(0xFFFFFFFF)  # applied once
            for i in np.flatnonzero(h):
                v = l[i]
                if rep != 1:
                    v = v / rep if v > 0 else v * rep
                c = h[i] & sp.HISTORY_COUNT_MASK
                if c:
                    v = np.float32(np.float32(v - pres) - np.float32(freq * np.float32(c)))
                l[i] = v
        p = SamplingParams(temperature=f64(sp.SW_TEMPERATURE), top_k=int(w[sp.SW_TOP_K, b]),
                           top_p=f64(sp.SW_TOP_P), min_p=f64(sp.SW_MIN_P))
        position = int(step[2, b]) if chained else w[sp.SW_POSITION, b]
        x0 = philox4x32([position, w[sp.SW_SAMPLE, b], 0, 0], [w[sp.SW_SEED, b], w[sp.SW_SEED + 1, b]])[0]
        ids[b] = kernel_draw(l, p, int(x0) >> 8)
        if chained:
            step[0, b] = max(int(ids[b]), 0)
            if isinstance(history, np.ndarray) and ids[b] >= 0:
                history[b, ids[b]] += 1
        if host is not None:
            host[b] = ids[b]
        lp = raw_logprobs(raw)
        if isinstance(logprob, np.ndarray):
            logprob[b] = lp[ids[b]]
        if top_n:
            order = np.argsort(-lp, kind="stable")[:top_n]
            top_ids.reshape(-1)[b * top_n:(b + 1) * top_n] = order
            top_lp.reshape(-1)[b * top_n:(b + 1) * top_n] = lp[order]


@pytest.fixture
def ds(monkeypatch):
    before = set(sys.modules)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    mod = importlib.import_module("gpt2block.backends.cuda.sampler")
    monkeypatch.setattr(mod, "kernel", lambda *a: None)
    monkeypatch.setattr(mod, "launch_kernel", _model_launch)
    yield mod
    for name in set(sys.modules) - before:  # nothing built on the stand-in outlives the test
        if name != "cupy":
            del sys.modules[name]


STREAM = SimpleNamespace(ptr=0, synchronize=lambda: None)


def test_device_sampler_host_side_equals_the_reference(ds):
    B, V, steps = 5, 300, 6
    rng = np.random.default_rng(8)
    params = [SamplingParams(temperature=0.9, top_k=20, repetition_penalty=1.4),
              SamplingParams(temperature=0.0, presence_penalty=1.0),
              SamplingParams(top_k=0, top_p=0.8, frequency_penalty=0.8),
              SamplingParams(top_k=0, min_p=0.1, repetition_penalty=0.7), SamplingParams(temperature=1.7)]
    prompts = [list(rng.integers(0, V, n)) for n in (3, 1, 8, 5, 2)]
    batch = SamplingBatch(params, [11, 12, 13, 2**64 - 1, 0], [0, 1, 2, 0, 5], prompts, logprobs=True,
                          top_logprobs=4)
    dev = ds.DeviceSampler(B, V)
    pos = np.array([len(p) for p in prompts])
    for step in range(steps):
        logits = (rng.standard_normal((B, V)) * 2).astype(np.float32)
        logits[:, :3] = logits[:, 3:4]  # ties
        dev.launch(ds.cp.asarray(logits), batch, pos, STREAM)
        got = dev.result(STREAM)
        ref = sample(logits, params, seeds=batch.seeds, positions=pos, sample_indices=batch.sample_indices,
                     prompt_ids=batch.prompt_ids, output_ids=batch.output_ids, logprobs=True, top_logprobs=4)
        np.testing.assert_array_equal(got.ids, ref.ids, err_msg=f"step {step}")
        np.testing.assert_allclose(got.logprobs, ref.logprobs, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got.top_ids, ref.top_ids)
        np.testing.assert_allclose(got.top_logprobs, ref.top_logprobs, rtol=0, atol=1e-6)
        for b in range(B):
            if not (b == 4 and step >= 2):  # row 4 finished at step 2: it takes no more ids
                batch.output_ids[b].append(int(got.ids[b]))
        if step == 3:
            batch.output_ids[0][-1] = (batch.output_ids[0][-1] + 1) % V  # a list changed: the row written afresh
        pos += 1


def test_device_sampler_refuses_bad_input(ds):
    V = 300
    batch = SamplingBatch([SamplingParams()] * 2, [1, 2], [0, 0], [[1], [2]])
    dev = ds.DeviceSampler(2, V)
    good = ds.cp.asarray(np.zeros((2, V), np.float32))
    with pytest.raises(ValueError, match=r"float32 \[2, 300\]"):
        dev.launch(ds.cp.asarray(np.zeros((2, V + 1), np.float32)), batch, [0, 0], STREAM)
    with pytest.raises(ValueError, match="holds 2 rows"):
        dev.launch(good, SamplingBatch([SamplingParams()], [1], [0], [[1]]), [0], STREAM)
    with pytest.raises(RuntimeError, match="no launch queued"):
        dev.result(STREAM)
    bad = np.zeros((2, V), np.float32)
    bad[1, 5] = np.nan
    dev.launch(ds.cp.asarray(bad), batch, np.array([1, 1]), STREAM)
    with pytest.raises(SamplingError, match="row 1"):
        dev.result(STREAM)
    with pytest.raises(ds.SamplerTooWide, match="at most 52992 ids"):
        ds.DeviceSampler(1, 60000)


def test_chained_launches_feed_their_draws_forward(ds):
    """start_chain / launch_chained as CudaRunner._sample_steps runs them: the step's ints give each row's
    position and receive its draw, the history counts every draw on the "device" (the host's lists are
    not read after start_chain), host_ids get the ids; each step equals sample() on the same logits with
    the histories holding every draw. end_chain makes the next launch write the rows afresh."""
    B, V, steps = 4, 300, 5
    rng = np.random.default_rng(21)
    params = [SamplingParams(temperature=0.9, top_k=20, repetition_penalty=1.4),
              SamplingParams(temperature=0.0, presence_penalty=1.0),
              SamplingParams(top_k=0, top_p=0.8, frequency_penalty=0.8), SamplingParams(temperature=1.3)]
    prompts = [list(rng.integers(0, V, n)) for n in (3, 1, 8, 5)]
    batch = SamplingBatch(params, [5, 6, 7, 8], [0, 1, 0, 2], prompts)
    dev = ds.DeviceSampler(B, V)
    pos = np.array([len(p) for p in prompts])
    first = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    dev.launch(ds.cp.asarray(first), batch, pos, STREAM)  # the prefill's draw, taken by the loop
    drawn = [[int(t)] for t in dev.result(STREAM).ids]
    for b in range(B):
        batch.output_ids[b].append(drawn[b][0])
    host = np.zeros(B, np.int32)
    host_ids = SimpleNamespace(device_ptr=host.ctypes.data)
    step = ds.cp.asarray(np.stack([np.zeros(B), np.arange(B), pos, pos + 1]).astype(np.int32))
    assert dev.start_chain(batch, STREAM) is True
    with pytest.raises(ValueError, match="log-probabilities"):
        dev.start_chain(SamplingBatch(params, [1] * B, [0] * B, prompts, logprobs=True), STREAM)
    for i in range(steps):
        step[2] += 1  # the step's argmax moved the ints on: pos = the drawn token's position
        step[3] += 1
        logits = (rng.standard_normal((B, V)) * 2).astype(np.float32)
        dev.launch_chained(ds.cp.asarray(logits), step, host_ids, STREAM)
        ref = sample(logits, params, seeds=batch.seeds, positions=np.asarray(step[2]),
                     sample_indices=batch.sample_indices, prompt_ids=prompts, output_ids=drawn)
        np.testing.assert_array_equal(host, ref.ids, err_msg=f"step {i}")
        np.testing.assert_array_equal(step[0], ref.ids)
        for b in range(B):
            drawn[b].append(int(ref.ids[b]))
    dev.end_chain()
    with pytest.raises(RuntimeError, match="start_chain"):
        dev.launch_chained(ds.cp.asarray(first), step, host_ids, STREAM)
    # the loop took only the first two draws of the chain: the next launch rewrites every row from its lists
    for b in range(B):
        batch.output_ids[b][:] = drawn[b][:3]
    logits = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    dev.launch(ds.cp.asarray(logits), batch, pos + 3, STREAM)
    ref = sample(logits, params, seeds=batch.seeds, positions=pos + 3, sample_indices=batch.sample_indices,
                 prompt_ids=prompts, output_ids=batch.output_ids)
    np.testing.assert_array_equal(dev.result(STREAM).ids, ref.ids)

"""solve() on the GPU under the LeetGPU challenge's conditions, against the torch float32
reference block (atol = rtol = 1e-3) and the float64 judge (at most 2x torch fp32's error)."""

import numpy as np
import pytest
from torch_ref import challenge_weights, torch_block

import gpt2block

SEQ_LENS = [1, 2, 4, "4-zero", 16, 30, 64, 100, 128, 256, 1024, 1025]


def _case(torch, seq_len, biases, seed):
    gen = torch.Generator().manual_seed(seed)
    zero = seq_len == "4-zero"
    s = 4 if zero else seq_len
    x = torch.zeros(s, 768) if zero else torch.rand(s, 768, generator=gen) * 2 - 1
    return s, x.cuda(), challenge_weights(torch, biases=biases, gen=gen)


def _errors(torch, x, w, out):
    ref32 = torch_block(x, w)
    ref64 = torch_block(x.double(), w.double())
    ours = (out.double() - ref64).abs().max().item()
    peer = (ref32.double() - ref64).abs().max().item()
    return ref32, ours, peer


@pytest.mark.parametrize("biases", [False, True], ids=["zero-bias", "bias"])
@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_solve_fp32_matches_challenge(torch_cuda, seq_len, biases):
    torch = torch_cuda
    s, x, w = _case(torch, seq_len, biases, seed=hash((str(seq_len), biases)) % 2**31)
    out = torch.full_like(x, float("nan"))
    gpt2block.solve(x, out, w, s)
    torch.cuda.synchronize()
    ref32, ours, peer = _errors(torch, x, w, out)
    assert torch.isfinite(out).all(), "output has unwritten (NaN) elements"
    torch.testing.assert_close(out, ref32, atol=1e-3, rtol=1e-3)
    # fp32 mode: no worse than twice torch fp32 against float64 (plus one float32 ulp at |out| ~ 4)
    assert ours <= 2 * peer + 5e-7, f"error vs float64 {ours:.3g} > 2 x torch fp32's {peer:.3g}"
    assert x.isfinite().all()


@pytest.mark.parametrize("seq_len", [1, 30, 1024, 8192])
def test_solve_tf32_within_challenge_tolerance(torch_cuda, seq_len):
    torch = torch_cuda
    s, x, w = _case(torch, seq_len, True, seed=seq_len)
    out = torch.full_like(x, float("nan"))
    gpt2block.solve(x, out, w, s, precision="tf32")
    ref32 = torch_block(x, w)
    torch.testing.assert_close(out, ref32, atol=1e-3, rtol=1e-3)


def test_solve_long_sequence_fp32(torch_cuda):
    torch = torch_cuda
    s, x, w = _case(torch, 8192, True, seed=8192)
    out = torch.full_like(x, float("nan"))
    gpt2block.solve(x, out, w, s)
    ref32, ours, peer = _errors(torch, x, w, out)
    torch.testing.assert_close(out, ref32, atol=1e-3, rtol=1e-3)
    assert ours <= 2 * peer + 5e-7


def test_solve_cupy_arrays_and_x_untouched(torch_cuda, cp):
    torch = torch_cuda
    s, x, w = _case(torch, 100, True, seed=7)
    xc, wc = cp.asarray(x.cpu().numpy()), cp.asarray(w.cpu().numpy())
    x_before = xc.copy()
    out = cp.full((s, 768), cp.nan, cp.float32)
    gpt2block.solve(xc, out, wc, s)
    torch.testing.assert_close(torch.as_tensor(out.get()), torch_block(x, w).cpu(), atol=1e-3, rtol=1e-3)
    assert (xc == x_before).all()
    # the same call twice gives the same bits (no races; the split attention's combine is ordered)
    out2 = cp.full((s, 768), cp.nan, cp.float32)
    gpt2block.solve(xc, out2, wc, s)
    assert (out == out2).all()


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_solve_repeats_bit_for_bit_eager_captured_replayed(torch_cuda, cp, precision):
    """seq_len 1024 (split-key attention, wgmma GEMMs): the eager call, the captured one and two
    replays of the same buffers give the same bits."""
    torch = torch_cuda
    s, x, w = _case(torch, 1024, True, seed=11)
    outs = []
    out = torch.empty_like(x)
    for _ in range(4):
        out.fill_(float("nan"))
        gpt2block.solve(x, out, w, s, precision=precision)
        torch.cuda.synchronize()
        outs.append(out.clone())
    assert torch.isfinite(outs[0]).all()
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_solve_replay_after_the_weights_change_gives_their_bits(torch_cuda, cp, precision):
    """The weight planes are remade inside the graph from the call's weights: eager, captured and
    replayed calls give the first weights' bits, and a replay after the weights change in place gives
    the new weights' bits (those of a call on a fresh buffer holding them). (A GEMM that did not wait
    for its planes would mostly still pass: the planes are usually done in time.)"""
    torch = torch_cuda
    s, x, w = _case(torch, 1024, True, seed=12)
    w2 = w.clone()
    w2[: w2.numel() // 2] *= 1.5
    out = torch.empty_like(x)
    want = {}
    for weights, key in ((w, "a"), (w2, "b")):
        out.fill_(float("nan"))
        gpt2block.solve(x, out, weights, s, precision=precision)
        torch.cuda.synchronize()
        want[key] = out.clone()
    assert torch.isfinite(want["a"]).all() and not torch.equal(want["a"], want["b"])
    buf = w.clone()
    for i in range(4):  # eager, captured, replayed; the weights change in place before the last
        if i == 3:
            buf.copy_(w2)
        out.fill_(float("nan"))
        gpt2block.solve(x, out, buf, s, precision=precision)
        torch.cuda.synchronize()
        assert torch.equal(out, want["b" if i == 3 else "a"]), i


def test_solve_rejects_bad_device_arguments(torch_cuda, cp):
    torch = torch_cuda
    x = torch.rand(8, 768, device="cuda")
    w = torch.zeros(gpt2block.block_numel(768), device="cuda")
    out = torch.full_like(x, 7.0)
    with pytest.raises(ValueError, match="output must not overlap x"):
        gpt2block.solve(x, x, w, 8)
    with pytest.raises(TypeError, match="x must be float32; got float64"):
        gpt2block.solve(x.double(), out, w, 8)
    with pytest.raises(ValueError, match="weights requires grad: pass weights.detach()"):
        gpt2block.solve(x, out, w.clone().requires_grad_(), 8)
    with pytest.raises(TypeError, match="x must be a NumPy array or a CUDA array"):
        gpt2block.solve(x.to_sparse(), out, w, 8)
    with pytest.raises(TypeError, match="x must be a NumPy array or a CUDA array"):
        gpt2block.solve(x.cpu(), out, w, 8)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        gpt2block.solve(torch.rand(768, 8, device="cuda").t(), out, w, 8)
    with pytest.raises(ValueError, match="output must have shape"):
        gpt2block.solve(x, out[:4], w, 8)
    with pytest.raises(TypeError, match="all be host"):
        gpt2block.solve(x, out, w.cpu().numpy(), 8)
    with pytest.raises(ValueError, match="precision"):
        gpt2block.solve(x, out, w, 8, precision="bf16")
    assert (out == 7.0).all(), "a rejected call wrote into output"


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("seq_len", [2, 100])
def test_solve_repeated_calls_see_new_contents(torch_cuda, cp, precision, seq_len):
    """The same buffers four times (eager, captured, replayed twice: backends/cuda/solve._SolveState),
    x and the weights refilled in place before each call, output poisoned: every call's result is
    that call's block, and a longer call in between (a regrown workspace) changes nothing."""
    torch = torch_cuda
    gen = torch.Generator().manual_seed(seq_len)
    x = torch.empty(seq_len, 768, device="cuda")
    w = challenge_weights(torch, biases=True, gen=gen)
    out = torch.empty_like(x)
    for call in range(4):
        x.copy_(torch.rand(seq_len, 768, generator=gen) * 2 - 1)
        w.copy_(challenge_weights(torch, biases=True, gen=gen))
        out.fill_(float("nan"))
        gpt2block.solve(x, out, w, seq_len, precision=precision)
        if call == 1:  # a longer call in between regrows the solve workspace (longer than any so far)
            from gpt2block.backends.cuda import solve as cuda_backend

            states = cuda_backend._pool(cp.cuda.runtime.getDevice())._all
            rows = max([st.ws[768].rows for st in states if 768 in st.ws] + [seq_len]) + 64
            before = {id(st): st.ws.get(768) for st in states}
            x2 = torch.rand(rows, 768, device="cuda")
            gpt2block.solve(x2, torch.empty_like(x2), w, rows, precision=precision)
            assert any(st.ws.get(768) is not before.get(id(st)) for st in states), "no workspace regrown"
        torch.cuda.synchronize()
        ref32, ours, peer = _errors(torch, x, w, out)
        assert torch.isfinite(out).all(), f"call {call}: output has unwritten (NaN) elements"
        torch.testing.assert_close(out, ref32, atol=1e-3, rtol=1e-3, msg=lambda m: f"call {call}: {m}")
        if precision == "fp32":
            assert ours <= 2 * peer + 4 * 2**-23, f"call {call}: error {ours:.3g} vs torch fp32 {peer:.3g}"

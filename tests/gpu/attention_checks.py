"""The accuracy checks of kernels/attention.cu and kernels/attention_wgmma.cu (through
gpt2block.backends.cuda.attention), shared by tests/gpu/test_attention.py and dev/check_attention.py.

Each output is compared with a float64 NumPy reference and with torch float32 (TF32 off) against the
same reference: f32 and tf32x3f must stay within 2x torch's error plus one float32 ulp of the output's
scale; tf32 (1 pass) within TF32_LIMIT. Outputs are poisoned with NaN before each run; K/V cache
positions past each row's length hold NaN. Large cases compare a sample of query rows (all rows are
still checked for NaN). Import it only where CuPy and a GPU are present.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from gpt2block.backends.cuda import attention as ca

EPS32 = float(np.finfo(np.float32).eps)
TF32_LIMIT = 1e-2  # 1-pass TF32: max abs error at scale 1 (|out| ~ 1); indexing bugs give O(1) errors
MAX_REF_ROWS = 384  # float64 reference rows per case beyond which rows are sampled
# prefill variants as run here: "v" with impl="auto" (the tensor-core variants on attention_wgmma.cu
# where the GPU has wgmma), "v@mma" forcing attention.cu's mma.sync kernel
VARIANTS = tuple(ca.PREFILL_VARIANTS) + tuple(f"{v}@mma" for v in ca.WG_KERNELS)


def run_prefill(variant, *args, **kw):
    """ca.attention_prefill with a VARIANTS entry."""
    v, _, impl = variant.partition("@")
    ca.attention_prefill(*args, variant=v, impl=impl or "auto", **kw)


# -- references -------------------------------------------------------------------------------

def ref_attention(q, k, v, n_head, causal, q_start, rows):
    """float64 NumPy: attention outputs of the query rows ``rows`` (indices into q) -> [len(rows), D]."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    qs = q[rows]
    out = np.empty((len(rows), q.shape[1]))
    for h in range(n_head):
        c = slice(64 * h, 64 * h + 64)
        s = (qs[:, c] @ k[:, c].T) / 8.0  # [R, L]
        if causal:
            s = np.where(np.arange(k.shape[0])[None, :] > (q_start + rows)[:, None], -np.inf, s)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, c] = (e / e.sum(axis=1, keepdims=True)) @ v[:, c]
    return out


def torch_attention(torch, q, k, v, n_head, causal, q_start):
    """torch float32 on the GPU, plain matmul + softmax (TF32 off) -> float64 NumPy [S_q, D]."""
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(a, np.float32)).cuda() for a in (q, k, v))
    sq, sk = q.shape[0], k.shape[0]
    hq = tq.reshape(sq, n_head, 64).transpose(0, 1)
    hk = tk.reshape(sk, n_head, 64).transpose(0, 1)
    hv = tv.reshape(sk, n_head, 64).transpose(0, 1)
    s = (hq @ hk.transpose(1, 2)) / 8.0
    if causal:
        mask = torch.arange(sk, device="cuda")[None, :] > (q_start + torch.arange(sq, device="cuda"))[:, None]
        s = s.masked_fill(mask, float("-inf"))
    o = (torch.softmax(s, dim=-1) @ hv).transpose(0, 1).reshape(sq, -1)
    return o.double().cpu().numpy()


def sample_rows(rng, n):
    if n <= MAX_REF_ROWS:
        return np.arange(n)
    pick = rng.choice(np.arange(1, n - 1), MAX_REF_ROWS - 2, replace=False)
    return np.sort(np.concatenate([[0, n - 1], pick]))


class Result:
    def __init__(self, name, err, peer, limit, finite):
        self.name, self.err, self.peer, self.limit, self.finite = name, err, peer, limit, finite
        self.ok = finite and err <= limit

    def line(self):
        ratio = self.err / self.peer if self.peer > 0 else float("inf") if self.err > 0 else 0.0
        flag = "ok  " if self.ok else "FAIL"
        nan = "" if self.finite else "  NaN/unwritten output"
        return f"{flag} {self.name:58s} err {self.err:9.2e}  torch {self.peer:9.2e}  ratio {ratio:5.2f}  limit {self.limit:9.2e}{nan}"


def limit_for(variant, peer, ref_max, scale):
    if variant.partition("@")[0] == "tf32":
        return TF32_LIMIT * max(1.0, ref_max) if scale == 1 else float("inf")
    return 2.0 * peer + EPS32 * ref_max


# -- prefill ----------------------------------------------------------------------------------

def prefill_inputs(rng, s_q, s_kv, d, scale, layout):
    """Host float32 q [s_q, D], k, v [s_kv, D] and the device views the wrapper gets."""
    if layout == "solve":  # q, k, v inside one [S, 3D] buffer, strides 3D
        assert s_q == s_kv
        qkv = (rng.standard_normal((s_q, 3 * d)) * scale).astype(np.float32)
        buf = cp.asarray(qkv)
        host = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        dev = buf[:, :d], buf[:, d:2 * d], buf[:, 2 * d:]
        return host, dev, 3 * d, 3 * d
    # model layout: q inside a [s_q, 3D] QKV output, K/V rows 0 .. s_kv-1 of a layer's cache whose
    # later rows hold NaN (a read past s_kv would show)
    qkv = (rng.standard_normal((s_q, 3 * d)) * scale).astype(np.float32)
    k = (rng.standard_normal((s_kv, d)) * scale).astype(np.float32)
    v = (rng.standard_normal((s_kv, d)) * scale).astype(np.float32)
    cache = cp.full((2, 2, s_kv + 70, d), np.nan, np.float32)  # [layer, k/v, rows, D]
    cache[1, 0, :s_kv] = cp.asarray(k)
    cache[1, 1, :s_kv] = cp.asarray(v)
    return (qkv[:, :d], k, v), (cp.asarray(qkv)[:, :d], cache[1, 0], cache[1, 1]), 3 * d, d


def check_prefill(torch, rng, s_q, d, causal, q_start=0, scale=1.0, layout=None, variants=VARIANTS):
    s_kv = q_start + s_q
    layout = layout or ("solve" if not causal and q_start == 0 else "cache")
    n_head = d // 64
    (q, k, v), (dq, dk, dv), q_stride, kv_stride = prefill_inputs(rng, s_q, s_kv, d, scale, layout)
    rows = sample_rows(rng, s_q)
    ref = ref_attention(q, k, v, n_head, causal, q_start, rows)
    peer = float(np.abs(torch_attention(torch, q, k, v, n_head, causal, q_start)[rows] - ref).max())
    ref_max = float(np.abs(ref).max())
    results = []
    for variant in variants:
        out = cp.full((s_q, d), np.nan, np.float32)
        run_prefill(variant, dq, dk, dv, out, n_head=n_head, s_q=s_q, s_kv=s_kv, causal=causal, q_start=q_start,
                    q_stride=q_stride, kv_stride=kv_stride)
        finite = bool(cp.isfinite(out).all())
        err = float(np.abs(cp.asnumpy(out)[rows] - ref).max())
        name = (f"prefill {variant:11s} S={s_q:<5d} D={d:<4d} {'causal' if causal else 'full  '} "
                f"q0={q_start:<4d} x{scale:g} {layout}")
        results.append(Result(name, err, peer, limit_for(variant, peer, ref_max, scale), finite))
    return results


# -- decode -----------------------------------------------------------------------------------

def decode_inputs(rng, lengths, d, n_ctx, scale):
    """A [B, layers=2, k/v, n_ctx, D] cache with NaN past each row's length; q inside a [B, 3D] QKV."""
    b = len(lengths)
    qkv = (rng.standard_normal((b, 3 * d)) * scale).astype(np.float32)
    cache = np.full((b, 2, 2, n_ctx, d), np.nan, np.float32)
    for r, n in enumerate(lengths):
        cache[r, 1, :, :n] = rng.standard_normal((2, n, d)) * scale
    return qkv, cache


def run_decode(qkv_d, cache_d, lengths, d, max_len, out=None):
    b = len(lengths)
    out = cp.full((b, d), np.nan, np.float32) if out is None else out
    ca.attention_decode(qkv_d, cache_d[0, 1, 0], cache_d[0, 1, 1], cp.asarray(np.asarray(lengths, np.int32)), out,
                        n_head=d // 64, q_stride=3 * d, cache_batch_stride=cache_d[0].size, max_len=max_len)
    return out


def check_decode(torch, rng, lengths, d, scale=1.0, n_ctx=1024, tight=False):
    qkv, cache = decode_inputs(rng, lengths, d, n_ctx, scale)
    max_len = max(lengths) if tight else n_ctx
    out = cp.asnumpy(run_decode(cp.asarray(qkv), cp.asarray(cache), lengths, d, max_len))
    n_head = d // 64
    err = peer = ref_max = 0.0
    for r, n in enumerate(lengths):
        q, k, v = qkv[r:r + 1, :d], cache[r, 1, 0, :n], cache[r, 1, 1, :n]
        ref = ref_attention(q, k, v, n_head, False, 0, np.arange(1))
        err = max(err, float(np.abs(out[r:r + 1] - ref).max()))
        peer = max(peer, float(np.abs(torch_attention(torch, q, k, v, n_head, False, 0) - ref).max()))
        ref_max = max(ref_max, float(np.abs(ref).max()))
    name = f"decode f32    B={len(lengths):<2d} D={d:<4d} lengths={','.join(map(str, lengths))} x{scale:g} max_len={max_len}"
    return [Result(name, err, peer, 2.0 * peer + EPS32 * ref_max, bool(np.isfinite(out).all()))]


def check_decode_repeat(rng, lengths=(1024, 7, 300), d=768):
    """Two runs on the same inputs give bit-identical outputs (no float atomics, fixed combine order)."""
    qkv, cache = decode_inputs(rng, list(lengths), d, 1024, 1.0)
    qkv_d, cache_d = cp.asarray(qkv), cp.asarray(cache)
    a = cp.asnumpy(run_decode(qkv_d, cache_d, list(lengths), d, 1024))
    b = cp.asnumpy(run_decode(qkv_d, cache_d, list(lengths), d, 1024))
    same = a.tobytes() == b.tobytes()
    return [Result(f"decode repeat bit-exact lengths={lengths}", 0.0 if same else float("inf"), 0.0, 0.0,
                   bool(np.isfinite(a).all()))]

"""The NumPy reference backend: the oracle every kernel is checked against.

Written like picoGPT: each step of the Pre-LN block a small function with its
shapes in comments. float32 by default; float64 on request, as the judge.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config import HEAD_DIM, GPT2Config
from ..layout import block_layout
from ..weights import ModelWeights
from ..sampler import SampleOutput, SamplingBatch
from .base import Cache, Runner, check_batch_args, check_ids, check_step_rows, token_chunks

SQRT_2_OVER_PI = 0.7978845608028654
PREFILL_CHUNK_TOKENS = 2048  # tokens per packed prefill pass (bounds the activations' memory)
ATTN_SCALE = HEAD_DIM ** -0.5  # a Python float, so float32 stays float32 (np.sqrt(64) is a float64 scalar and would promote)


def layer_norm(x, g, b, eps=1e-5):  # [T, D] -> [T, D]; two-pass variance (rows reach the thousands)
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc / np.sqrt(var + eps) * g + b


def gelu_tanh(z):  # any shape -> same shape; HF "gelu_new"
    return 0.5 * z * (1.0 + np.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)))


def linear(x, w, b):  # [T, in] @ [in, out] + [out] -> [T, out]
    return x @ w + b


def softmax(s):  # [..., L] -> [..., L]
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v, n_head, causal, q_start=0):
    """q [T, D], k and v [L, D] -> [T, D]. Query i sits at position q_start + i;
    with ``causal`` it sees keys 0 .. q_start + i, otherwise all L keys."""
    T, D = q.shape
    L = k.shape[0]
    qh = q.reshape(T, n_head, HEAD_DIM).transpose(1, 0, 2)  # [H, T, 64]
    kh = k.reshape(L, n_head, HEAD_DIM).transpose(1, 2, 0)  # [H, 64, L]
    vh = v.reshape(L, n_head, HEAD_DIM).transpose(1, 0, 2)  # [H, L, 64]
    s = (qh @ kh) * ATTN_SCALE  # [H, T, L]
    if causal:
        mask = np.arange(L)[None, :] > (q_start + np.arange(T))[:, None]  # [T, L]
        s = np.where(mask, -np.inf, s)
    return (softmax(s) @ vh).transpose(1, 0, 2).reshape(T, D)  # [T, D]


def block(x, w, n_head, causal, eps=1e-5, kv=None, q_start=0):
    """One Pre-LN block. x [T, D] -> [T, D]; w: named views (layout.FIELDS).

    kv: optional (k_cache, v_cache), each [n_ctx, D]: this block's K and V are
    written at rows q_start .. q_start + T and attention reads rows 0 .. q_start + T.
    """
    return block_rows(x, w, n_head, causal, eps, [(0, len(x), kv, q_start)])


def block_rows(x, w, n_head, causal, eps, rows):
    """One Pre-LN block over sequences packed back to back: x [N, D] -> [N, D].

    rows: (lo, hi, kv, start) per sequence: its tokens are x[lo:hi], at positions start ..
    start + hi - lo; kv as in ``block`` (or None: attention over its own tokens only).
    Attention stays within each sequence; everything else runs on all N rows at once.
    """
    D = x.shape[1]
    h = layer_norm(x, w["ln1_g"], w["ln1_b"], eps)  # [N, D]
    qkv = linear(h, w["w_qkv"], w["b_qkv"])  # [N, 3D]
    a = np.empty_like(h)  # [N, D]
    for lo, hi, kv, start in rows:
        q, k, v = qkv[lo:hi, :D], qkv[lo:hi, D:2 * D], qkv[lo:hi, 2 * D:]  # [T, D] each
        if kv is not None:
            kc, vc = kv
            kc[start:start + hi - lo] = k
            vc[start:start + hi - lo] = v
            k, v = kc[:start + hi - lo], vc[:start + hi - lo]
        a[lo:hi] = attention(q, k, v, n_head, causal, start)  # [T, D]
    x1 = x + linear(a, w["w_attn"], w["b_attn"])  # [N, D]
    f = gelu_tanh(linear(layer_norm(x1, w["ln2_g"], w["ln2_b"], eps), w["w_fc"], w["b_fc"]))  # [N, 4D]
    return x1 + linear(f, w["w_proj"], w["b_proj"])  # [N, D]


def block_flat(x, flat, causal, eps=1e-5):
    """One block from its flat buffer (layout.py): x [T, D] -> [T, D]. Used by solve()."""
    D = x.shape[1]
    return block(x, block_layout(D).views(flat), D // HEAD_DIM, causal, eps)


class NumpyCache(Cache):
    def __init__(self, batch: int, config: GPT2Config, dtype):
        super().__init__(batch, config.n_positions)
        # [B, n_layer, 2 (k, v), n_ctx, D]; np.zeros maps pages lazily, so unused context costs nothing
        self.kv = np.zeros((batch, config.n_layer, 2, config.n_positions, config.n_embd), dtype)


class NumpyRunner(Runner):
    backend = "numpy"

    def __init__(self, weights: ModelWeights, dtype=np.float32):
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"numpy backend runs float32 or float64; got {dtype}")
        self.dtype = np.dtype(dtype)
        self.precision = "fp32" if self.dtype == np.float32 else "fp64"
        self.config = c = weights.config
        cast = lambda a: np.asarray(a, self.dtype)  # noqa: E731
        self.blocks = [{k: cast(v) for k, v in weights.block(i).items()} for i in range(c.n_layer)]
        self.wte, self.wpe = cast(weights.wte), cast(weights.wpe)  # [V, D], [n_ctx, D]
        self.ln_f_g, self.ln_f_b = cast(weights.ln_f_g), cast(weights.ln_f_b)  # [D]

    def new_cache(self, batch: int) -> NumpyCache:
        return NumpyCache(batch, self.config, self.dtype)

    def _run(self, cache: NumpyCache, rows: Sequence[int], id_lists: Sequence[np.ndarray]) -> np.ndarray:
        """Append id_lists[i] to row rows[i] of the cache, all rows in one pass: -> ln_f output [N, D],
        the rows' new tokens back to back."""
        c = self.config
        segs, lo = [], 0
        for r, ids in zip(rows, id_lists):
            cache.check_room(r, len(ids))
            segs.append((r, lo, lo + len(ids), int(cache.pos[r])))
            lo += len(ids)
        x = np.concatenate([self.wte[ids] + self.wpe[start:start + len(ids)]
                            for ids, (_, _, _, start) in zip(id_lists, segs)])  # [N, D]
        for i, w in enumerate(self.blocks):
            per_row = [(a, b, (cache.kv[r, i, 0], cache.kv[r, i, 1]), start) for r, a, b, start in segs]
            x = block_rows(x, w, c.n_head, True, c.layer_norm_epsilon, per_row)
        for r, a, b, start in segs:
            cache.pos[r] = start + b - a
        return layer_norm(x, self.ln_f_g, self.ln_f_b, c.layer_norm_epsilon)

    def _logits(self, h):  # [T, D] -> [T, V], the LM head tied to wte
        return (h @ self.wte.T).astype(np.float32 if self.dtype == np.float32 else self.dtype)

    def prefill(self, cache: Cache, row: int, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        ids = check_ids(ids, self.config.vocab_size)
        h = self._run(cache, [row], [ids])
        return self._logits(h) if all_logits else self._logits(h[-1:])[0]

    def prefill_batch(self, cache: Cache, rows: Sequence[int], id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """Packed rows, in chunks of at most PREFILL_CHUNK_TOKENS tokens (a longer prompt is a chunk alone)."""
        rows, id_lists = check_batch_args(cache, rows, id_lists, self.config.vocab_size)
        out = []
        for chunk in token_chunks([len(ids) for ids in id_lists], PREFILL_CHUNK_TOKENS):
            h = self._run(cache, [rows[i] for i in chunk], [id_lists[i] for i in chunk])  # [N, D]
            ends = np.cumsum([len(id_lists[i]) for i in chunk]) - 1
            out.append(self._logits(h[ends]))  # [len(chunk), V]
        return np.concatenate(out)

    def decode(self, cache: Cache, tokens: np.ndarray) -> np.ndarray:
        tokens = check_ids(tokens, self.config.vocab_size)
        if tokens.shape[0] != cache.batch:
            raise ValueError(f"decode got {tokens.shape[0]} tokens for a batch of {cache.batch}")
        for b in range(cache.batch):
            cache.check_room(b, 1)
        h = self._run(cache, range(cache.batch), tokens[:, None])  # [B, D]
        return self._logits(h)

    def sample_rows(self, cache: Cache, rows: Sequence[int], tokens: np.ndarray, batch: SamplingBatch) -> SampleOutput:
        """Only the rows named run: one packed pass over len(rows) tokens, then the NumPy sampler."""
        rows, tokens = check_step_rows(cache, rows, tokens, self.config.vocab_size)
        if batch.batch != len(rows):
            raise ValueError(f"sample_rows got {batch.batch} sampling rows for {len(rows)} cache rows")
        for r in rows:
            cache.check_room(r, 1)
        h = self._run(cache, rows, tokens[:, None])  # [len(rows), D]
        return batch.draw(self._logits(h), cache.pos[rows])

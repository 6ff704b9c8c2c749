"""The sampler: each row's next token from its logits, by the sampling contract below.

This NumPy sampler is the reference (and the CPU path); a device sampler must draw
from exactly the distribution ``distribution()`` returns. Per row (one sequence),
given logits l [V] (float32), its SamplingParams and its history:

1. Penalties (float32 arithmetic), for every id t already in the history:
   repetition_penalty r (HF's rule, once per id; history = prompt + generated):
       l[t] = l[t] / r if l[t] > 0 else l[t] * r
   presence_penalty a and frequency_penalty f (OpenAI's; history = the generated ids
   only, c[t] = how often t was generated): l[t] -= a, then l[t] -= f * c[t].
2. temperature T below TEMPERATURE_FLOOR (0 included) is greedy: the argmax of the
   penalised logits, the lowest id among equal maxima. Else z = l / T and
   p = softmax(z) (float64, stable).
3. top_k k (0 = off): keep the ids whose z >= the k-th largest z (ties all kept).
4. top_p P (1 = off): on p renormalised over what top-k kept, keep the ids with
   p >= tau, tau the largest value whose kept mass sum_{p_i >= tau} p_i >= P (ties
   at the boundary all kept; the most likely id always kept).
5. min_p m (0 = off): keep the ids with p >= m * max(p).
6. The kept probabilities renormalised; the id drawn is the first id (in id order)
   whose cumulative kept mass exceeds u * total.

u comes from Philox-4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as
1, 2, 3", SC11), keyed by the row's 64-bit seed (key = (low 32 bits, high 32 bits)),
counter (position, sample_index, 0, 0): position = the index in the sequence of the
token being drawn (prompt length + tokens generated so far), sample_index = which of
a prompt's n samples. u = (first output word >> 8) * 2^-24, in [0, 1) and exact in
float32. The same seed gives the same numbers whatever batch the row is in (and so the same tokens,
unless the logits' last bits, which a batch's summation order may change, decide a draw).

Outputs per row: the id, its log-probability under the raw distribution
(log_softmax of the logits before penalties and temperature) and, on request, the
top-n (n <= MAX_TOP_LOGPROBS) ids and log-probabilities of that raw distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

TEMPERATURE_FLOOR = 1e-5  # a temperature below this is greedy (l / T would overflow long before 1e-320)
MAX_TOP_LOGPROBS = 20
SEED_MAX = 2**64 - 1
COUNTER_MAX = 2**32 - 1  # position and sample_index are 32-bit counter words

# Philox-4x32 round multipliers and Weyl key increments (Random123's constants)
PHILOX_M0, PHILOX_M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LOW32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


class SamplingError(ValueError):
    """A sampling parameter out of range, or logits the sampler cannot use."""


# ---------------------------------------------------------------- parameters


def _number(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number; got {type(v).__name__} {v!r}")
    try:
        f = float(v)
    except OverflowError:
        raise SamplingError(f"{name} must be a finite number; got {v!r}") from None
    if not math.isfinite(f):
        raise SamplingError(f"{name} must be a finite number; got {v!r}")
    return f


def _integer(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {type(v).__name__} {v!r}")
    return int(v)


@dataclass(frozen=True)
class SamplingParams:
    """One row's sampling parameters. The defaults are the CLI's and the API's (this is their one owner)."""

    temperature: float = 1.0  # < TEMPERATURE_FLOOR (0 included) = greedy
    top_k: int = 50  # 0 = off
    top_p: float = 1.0  # in (0, 1]; 1 = off
    min_p: float = 0.0  # in [0, 1]; 0 = off
    repetition_penalty: float = 1.0  # > 0; 1 = off
    presence_penalty: float = 0.0  # in [-2, 2]; 0 = off
    frequency_penalty: float = 0.0  # in [-2, 2]; 0 = off

    def __post_init__(self):
        t = _number("temperature", self.temperature)
        if t < 0:
            raise SamplingError(f"temperature must be >= 0 (0 = greedy); got {self.temperature!r}")
        k = _integer("top_k", self.top_k)
        if k < 0:
            raise SamplingError(f"top_k must be >= 0 (0 = off); got {self.top_k!r}")
        p = _number("top_p", self.top_p)
        if not 0 < p <= 1:
            raise SamplingError(f"top_p must be in (0, 1] (1 = off); got {self.top_p!r}")
        m = _number("min_p", self.min_p)
        if not 0 <= m <= 1:
            raise SamplingError(f"min_p must be in [0, 1] (0 = off); got {self.min_p!r}")
        r = _number("repetition_penalty", self.repetition_penalty)
        if r <= 0:
            raise SamplingError(f"repetition_penalty must be > 0 (1 = off); got {self.repetition_penalty!r}")
        pres = _number("presence_penalty", self.presence_penalty)
        freq = _number("frequency_penalty", self.frequency_penalty)
        for name, v in (("presence_penalty", pres), ("frequency_penalty", freq)):
            if not -2 <= v <= 2:
                raise SamplingError(f"{name} must be in [-2, 2] (0 = off); got {getattr(self, name)!r}")
        for name, v in (("temperature", t), ("top_k", k), ("top_p", p), ("min_p", m), ("repetition_penalty", r),
                        ("presence_penalty", pres), ("frequency_penalty", freq)):
            object.__setattr__(self, name, v)  # plain Python numbers from here on

    @property
    def greedy(self) -> bool:
        return self.temperature < TEMPERATURE_FLOOR

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


def check_seed(seed, name: str = "seed") -> int:
    s = _integer(name, seed)
    if not 0 <= s <= SEED_MAX:
        raise SamplingError(f"{name} must be in [0, 2**64 - 1]; got {seed!r}")
    return s


def check_top_logprobs(n) -> int:
    n = _integer("top_logprobs", n)
    if not 0 <= n <= MAX_TOP_LOGPROBS:
        raise SamplingError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]; got {n}")
    return n


# ---------------------------------------------------------------- Philox-4x32-10


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox-4x32-R: counter [..., 4] and key [..., 2] (32-bit words) -> [..., 4] uint32."""
    c = np.asarray(counter, np.uint64)
    k = np.asarray(key, np.uint64)
    c0, c1, c2, c3 = (c[..., i] & _LOW32 for i in range(4))
    k0, k1 = k[..., 0] & _LOW32, k[..., 1] & _LOW32
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & _LOW32, (k1 + PHILOX_W1) & _LOW32
        p0, p1 = PHILOX_M0 * c0, PHILOX_M1 * c2  # 64-bit products of 32-bit words
        c0, c1, c2, c3 = (p1 >> _32) ^ c1 ^ k0, p1 & _LOW32, (p0 >> _32) ^ c3 ^ k1, p0 & _LOW32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _words(name: str, values, n: int, hi: int) -> np.ndarray:
    """[n] integers in [0, hi] -> uint64, each checked."""
    arr = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)  # ints stay exact
    if arr.ndim == 0:  # one value for every row
        return np.full(n, _words(f"{name}", [arr.item()], 1, hi)[0], np.uint64)
    if arr.shape != (n,):
        raise SamplingError(f"{name} must hold one value per row ({n}); got shape {arr.shape}")
    if arr.dtype.kind in "iu":  # an integer array: checked at once
        bad = (arr < 0) | (arr > hi)
        if bad.any():
            i = int(np.argmax(bad))
            raise SamplingError(f"{name}[{i}] must be in [0, {hi}]; got {arr[i]}")
        return arr.astype(np.uint64)
    out = np.empty(n, np.uint64)
    for i, v in enumerate(arr.tolist()):
        v = _integer(f"{name}[{i}]", v)
        if not 0 <= v <= hi:
            raise SamplingError(f"{name}[{i}] must be in [0, {hi}]; got {v}")
        out[i] = v
    return out


def philox_uniform(seeds, positions, sample_indices=0) -> np.ndarray:
    """The contract's uniforms: seeds, positions, sample_indices ([B] each, or one value) -> u [B] in [0, 1)."""
    n = max(np.size(seeds), np.size(positions), np.size(sample_indices))
    s = _words("seeds", seeds, n, SEED_MAX)
    pos = _words("positions", positions, n, COUNTER_MAX)
    idx = _words("sample_indices", sample_indices, n, COUNTER_MAX)
    zero = np.zeros(n, np.uint64)
    out = philox4x32(np.stack([pos, idx, zero, zero], -1), np.stack([s & _LOW32, s >> _32], -1))  # [n, 4]
    return (out[:, 0] >> np.uint32(8)).astype(np.float64) * 2.0**-24


# ---------------------------------------------------------------- the distribution


def check_logits(logits) -> np.ndarray:
    """logits [B, V] (finite or -inf; at least one finite per row) -> float32 array."""
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise SamplingError(f"logits must be [batch, vocab]; got shape {logits.shape}")
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"logits must be floating point; got {logits.dtype}")
    logits = logits.astype(np.float32, copy=False)
    for what, bad in (("NaN", np.isnan(logits)), ("+inf", np.isposinf(logits))):
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            raise SamplingError(f"the logits of row {row} contain {what} (the model's activations overflowed "
                                "or its weights are not usable)")
    dead = np.isneginf(logits).all(axis=-1)
    if dead.any():
        raise SamplingError(f"every logit of row {int(np.argmax(dead))} is -inf; nothing can be sampled")
    return logits


def _history(name: str, ids, vocab: int) -> np.ndarray:
    arr = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be a sequence of token ids (integers); got {arr.dtype} of shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= vocab:
        bad = int(arr[(arr < 0) | (arr >= vocab)][0])
        raise SamplingError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab})")
    return arr.astype(np.int64)


def apply_penalties(row, params: SamplingParams, prompt_ids=(), output_ids=()) -> np.ndarray:
    """Step 1: row [V] float32 -> a penalised copy [V] float32 (the input is untouched)."""
    out = np.array(row, np.float32, copy=True)
    V = out.shape[0]
    prompt = _history("prompt_ids", prompt_ids, V)
    output = _history("output_ids", output_ids, V)
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([prompt, output]))
        r = np.float32(params.repetition_penalty)
        z = out[seen]
        out[seen] = np.where(z > 0, z / r, z * r)
    if (params.presence_penalty != 0.0 or params.frequency_penalty != 0.0) and output.size:
        ids, counts = np.unique(output, return_counts=True)
        out[ids] -= np.float32(params.presence_penalty)
        out[ids] -= np.float32(params.frequency_penalty) * counts.astype(np.float32)
    return out


def _kept(l, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Steps 2-5 on penalised logits l [V] (float32, not greedy): the kept set as (ids [n] ascending,
    probabilities [n] float64 summing to 1). Work past the top-k cut is on the kept ids only."""
    V = l.shape[0]
    z = l.astype(np.float64) / params.temperature  # [V]; -inf stays -inf
    if 0 < params.top_k < V:
        kth = np.partition(z, V - params.top_k)[V - params.top_k]  # the k-th largest z
        ids = np.flatnonzero(z >= kth)  # ties with it all kept
        if kth == -np.inf:
            ids = ids[np.isfinite(z[ids])]
    else:
        ids = np.flatnonzero(np.isfinite(z))
    zk = z[ids]
    p = np.exp(zk - zk.max())
    p /= p.sum()  # softmax over the top-k set
    keep = np.ones(ids.size, bool)
    if params.top_p < 1.0:
        q = np.sort(p)[::-1]  # descending
        cum = np.cumsum(q)
        j = min(int(np.searchsorted(cum, params.top_p, side="left")), q.size - 1)
        keep &= p >= q[j]  # tau = q[j]: the largest value whose kept mass reaches top_p
    if params.min_p > 0.0:
        keep &= p >= params.min_p * p.max()
    ids, p = ids[keep], p[keep]
    return ids, p / p.sum()


def distribution(row, params: SamplingParams, prompt_ids=(), output_ids=()) -> np.ndarray:
    """The exact distribution one row is drawn from: row [V] logits -> probabilities [V] (float64, zero
    outside the kept set; one-hot at the argmax when greedy). The oracle of every sampler."""
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams; got {type(params).__name__}")
    l = apply_penalties(check_logits(np.asarray(row)[None])[0], params, prompt_ids, output_ids)
    p = np.zeros(l.shape[0])
    if params.greedy:
        p[int(np.argmax(l))] = 1.0
    else:
        ids, kept = _kept(l, params)
        p[ids] = kept
    return p


def draw(probs, u: float) -> int:
    """Step 6: the first index whose cumulative mass exceeds u * total; probs [n] >= 0 (in id order), u in
    [0, 1)."""
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(i, int(np.flatnonzero(probs)[-1]))  # u * total rounded up to the total: the last kept id


# ---------------------------------------------------------------- the batched sampler


@dataclass
class SampleOutput:
    ids: np.ndarray  # [B] int64
    logprobs: Optional[np.ndarray] = None  # [B] float32: the chosen ids' log-probabilities, raw distribution
    top_ids: Optional[np.ndarray] = None  # [B, n] int64, most likely first (ties: lower id first)
    top_logprobs: Optional[np.ndarray] = None  # [B, n] float32


def raw_logprobs(row) -> np.ndarray:
    """log_softmax of the raw logits row [V], float64."""
    z = np.asarray(row, np.float64)
    m = z.max()
    return z - m - np.log(np.exp(z - m).sum())


def _per_row(name: str, value, B: int) -> list:
    if value is None:
        return [()] * B
    if len(value) != B:
        raise SamplingError(f"{name} must hold one sequence per row ({B}); got {len(value)}")
    return list(value)


def sample(logits, params: Union[SamplingParams, Sequence[SamplingParams]], *, u=None, seeds=None,
           positions=None, sample_indices=0, prompt_ids=None, output_ids=None, logprobs: bool = True,
           top_logprobs: int = 0) -> SampleOutput:
    """logits [B, V] -> SampleOutput (ids [B], ...). Each row has its own parameters when ``params`` is a
    sequence of B SamplingParams.

    The uniforms are ``u`` [B] when given (each in [0, 1)), else the contract's Philox numbers of
    (seeds, positions, sample_indices) ([B] each or one value). Greedy rows use none.
    prompt_ids[b], output_ids[b]: row b's prompt and generated ids (the penalties' histories).
    logprobs: whether to give the chosen ids' log-probabilities (always given with top_logprobs > 0).
    """
    logits = check_logits(logits)
    B, V = logits.shape
    rows = [params] * B if isinstance(params, SamplingParams) else list(params)
    if len(rows) != B:
        raise SamplingError(f"got {len(rows)} SamplingParams for {B} rows of logits")
    for i, p in enumerate(rows):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"params[{i}] must be a SamplingParams; got {type(p).__name__}")
    top_n = check_top_logprobs(top_logprobs)
    prompts, outputs = _per_row("prompt_ids", prompt_ids, B), _per_row("output_ids", output_ids, B)
    if u is not None:
        u = _uniforms(u, B)
    elif not all(p.greedy for p in rows):
        if seeds is None or positions is None:
            raise SamplingError("sampled rows need u, or seeds and positions for the Philox numbers")
        u = philox_uniform(seeds, positions, sample_indices)
        if u.shape[0] != B:
            raise SamplingError(f"got random numbers for {u.shape[0]} rows; the logits have {B}")
    logprobs = logprobs or top_n > 0
    ids = np.empty(B, np.int64)
    lp = np.empty(B, np.float32)
    top_i = np.empty((B, top_n), np.int64)
    top_v = np.empty((B, top_n), np.float32)
    for b, p in enumerate(rows):
        l = logits[b]
        if p.penalised:
            l = apply_penalties(l, p, prompts[b], outputs[b])
        if p.greedy:
            ids[b] = int(np.argmax(l))
        else:
            kept_ids, kept_p = _kept(l, p)
            ids[b] = kept_ids[draw(kept_p, float(u[b]))]
        if not logprobs:
            continue
        raw = raw_logprobs(logits[b])  # [V]
        lp[b] = raw[ids[b]]
        if top_n:
            order = np.argsort(-raw, kind="stable")[:top_n]
            top_i[b], top_v[b] = order, raw[order]
    return SampleOutput(ids, lp if logprobs else None, top_i if top_n else None, top_v if top_n else None)


def _uniforms(u, B: int) -> np.ndarray:
    arr = np.asarray(u)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)) or arr.dtype == bool:
        raise TypeError(f"u must hold numbers; got {arr.dtype}")
    arr = arr.astype(np.float64).reshape(-1)
    if arr.shape[0] != B:
        raise SamplingError(f"got {arr.shape[0]} random numbers (u) for {B} rows")
    if np.isnan(arr).any():
        raise SamplingError(f"u[{int(np.argmax(np.isnan(arr)))}] is NaN; random numbers must lie in [0, 1)")
    bad = (arr < 0) | (arr >= 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise SamplingError(f"u[{i}] = {float(arr[i])!r}; random numbers must lie in [0, 1)")
    return arr


# ---------------------------------------------------------------- a batch's sampling state


@dataclass
class SamplingBatch:
    """The sampling state of a batch of B rows: what a Runner's sample_step reads.

    Row b draws with params[b], its seed seeds[b] and sample index sample_indices[b]; the token drawn at
    the step that brings row b's cache to cache.pos[b] tokens has position cache.pos[b] (the Philox
    counter). prompt_ids[b] and output_ids[b] are its penalties' histories: the generation loop appends
    every id it takes to output_ids[b] (ids a finished row is fed are not appended).
    """

    params: list  # [B] SamplingParams
    seeds: np.ndarray  # [B] uint64
    sample_indices: np.ndarray  # [B] int64
    prompt_ids: list  # [B] lists of ints
    output_ids: list = field(default_factory=list)  # [B] lists of ints
    logprobs: bool = False  # the chosen ids' log-probabilities wanted
    top_logprobs: int = 0  # and the top-n of each row's raw distribution (0: none)

    def __post_init__(self):
        B = len(self.params)
        if not self.output_ids:
            self.output_ids = [[] for _ in range(B)]
        self.seeds = _words("seeds", self.seeds, B, SEED_MAX)
        self.sample_indices = _words("sample_indices", self.sample_indices, B, COUNTER_MAX).astype(np.int64)
        self.top_logprobs = check_top_logprobs(self.top_logprobs)
        if len(self.prompt_ids) != B or len(self.output_ids) != B:
            raise SamplingError(f"a batch of {B} rows needs {B} prompt and output histories")

    @property
    def batch(self) -> int:
        return len(self.params)

    @property
    def all_greedy(self) -> bool:
        return all(p.greedy for p in self.params)

    @property
    def penalised(self) -> bool:
        return any(p.penalised for p in self.params)

    def draw(self, logits, positions) -> SampleOutput:
        """The NumPy sampler on host logits [B, V]; positions [B]: each row's position of the drawn token."""
        return sample(logits, self.params, seeds=self.seeds, positions=positions,
                      sample_indices=self.sample_indices, prompt_ids=self.prompt_ids, output_ids=self.output_ids,
                      logprobs=self.logprobs, top_logprobs=self.top_logprobs)

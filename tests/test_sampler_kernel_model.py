"""kernels/sampler.cu's arithmetic, modelled in NumPy step by step (the radix select over 8-bit digits, the
64-bit fixed-point masses, the integer draw threshold), against the reference sampler: the thresholds it
finds are the contract's, and its draws are sampler.sample()'s wherever a draw is not within rounding of a
boundary. The GPU tests check the kernel itself against the same reference."""

import numpy as np
import pytest

from gpt2block.backends.cuda import build
from gpt2block.sampler import SamplingParams, apply_penalties, philox_uniform, sample


def float_key(v):
    """The kernel's float_key: float32 bits in the floats' order."""
    u = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    return np.where(u & 0x80000000, ~u & 0xFFFFFFFF, u | 0x80000000).astype(np.uint64)


def radix_select(keys, weights, target):
    """The largest key K with sum(weights[keys >= K]) >= target, by four 8-bit digit passes."""
    prefix, above = 0, 0
    for shift in (24, 16, 8, 0):
        hi_mask = 0 if shift == 24 else (0xFFFFFFFF << (shift + 8)) & 0xFFFFFFFF
        inside = (weights != 0) & ((keys & hi_mask) == prefix)
        hist = np.zeros(256, object)
        for d, w in zip(((keys[inside] >> shift) & 255).tolist(), weights[inside].tolist()):
            hist[d] += w
        reach = above
        for d in range(255, -1, -1):
            if reach + hist[d] >= target:
                prefix |= d << shift
                break
            reach += hist[d]
        above = reach
    return prefix


def topk_key(keys, k):
    """Top-k's key as the kernel finds it: by the radix select on the candidates (the keys >= t0, the least of
    the thread groups' largest keys; thread t holds ids t, t + SAMPLER_THREADS, ...) where k <= n <=
    SAMPLER_CANDIDATES, else on the whole row. -> (key, whether the candidates were used)."""
    V, threads = keys.shape[0], build.SAMPLER_THREADS
    groups = build.SAMPLER_MIN_GROUPS
    while groups < k and groups <= threads:
        groups *= 2
    if groups <= threads:
        largest = np.zeros(threads, np.uint64)  # 0: a thread without ids
        np.maximum.at(largest, np.arange(V) % threads, keys)
        g = largest.reshape(groups, threads // groups).max(axis=1)
        cand = keys[keys >= g[g != 0].min()]
        if k <= cand.size <= build.SAMPLER_CANDIDATES:
            return radix_select(cand, np.ones(cand.size, np.int64), k), True
    return radix_select(keys, np.ones(V, np.int64), k), False


def kernel_draw(l, p: SamplingParams, k24: int) -> int:
    """One row's id as sample_rows_f32 draws it from penalised logits l [V] and the 24-bit uniform k24."""
    V = l.shape[0]
    l = l + np.float32(0.0)
    pmax = l.max()
    if p.greedy:
        return int(np.flatnonzero(l == pmax)[0])
    kth = 0
    if 0 < p.top_k < V:
        kth = topk_key(float_key(l), p.top_k)[0]
    zmax = float(pmax) / p.temperature
    keep = (float_key(l) >= kth) & np.isfinite(l)
    e = np.zeros(V, np.float32)
    e[keep] = np.exp(l[keep].astype(np.float64) / p.temperature - zmax).astype(np.float32)
    shift = 62 - int(V).bit_length()
    mass = [int(round(x * 2.0**shift)) for x in e.astype(np.float64).tolist()]  # exact: e has 24 bits
    total = sum(mass)
    pkey = 0
    if p.top_p < 1.0:
        target = min(total, max(1, int(np.ceil(p.top_p * float(total)))))
        pkey = radix_select(e.view(np.uint32).astype(np.uint64), np.array(mass, object), target)
    kept = [m if (b >= pkey and float(x) >= p.min_p) else 0
            for m, b, x in zip(mass, e.view(np.uint32).tolist(), e.tolist())]
    thr = (k24 * sum(kept)) >> 24
    cum = np.cumsum(np.array(kept, object))
    return int(np.flatnonzero(cum > thr)[0])


@pytest.mark.parametrize("k", [1, 2, 5, 50, 999])
def test_radix_select_finds_the_kth_largest_with_ties(k):
    rng = np.random.default_rng(k)
    v = rng.integers(-20, 20, 1000).astype(np.float32) / 4  # many ties
    v[:7] = -np.inf
    v[7:9] = np.float32(-0.0) + np.float32(0.0)
    key = radix_select(float_key(v), np.ones(1000, np.int64), k)
    kth = np.sort(v)[::-1][k - 1]
    assert key == float_key(kth), f"k = {k}: key {key:#x}, the k-th largest {kth} has {int(float_key(kth)):#x}"


def _rows_for_candidates():
    """(name, row): spread, many ties, -inf runs, constant, ascending and descending rows, narrow and wide."""
    rng = np.random.default_rng(64)
    rows = []
    for V in (400, 1000, 3000, 50257):
        rows.append((f"normal {V}", (rng.standard_normal(V) * 3).astype(np.float32)))
        rows.append((f"ties {V}", rng.integers(-20, 20, V).astype(np.float32) / 4))
        v = (rng.standard_normal(V) * 2).astype(np.float32)
        v[rng.random(V) < 0.3] = -np.inf
        v[:V // 10] = v.max()
        rows.append((f"-inf and tied maxima {V}", v))
        rows.append((f"constant {V}", np.full(V, 1.5, np.float32)))
        rows.append((f"ascending {V}", np.arange(V, dtype=np.float32) / 7))
        rows.append((f"descending {V}", -np.arange(V, dtype=np.float32) / 7))
    return rows


def test_topk_on_the_candidates_is_the_whole_rows_key():
    """The kernel's top-k key (topk_key: the candidates where they suffice) is the k-th largest key of the row,
    for k from 1 to beyond SAMPLER_THREADS; both ways are taken (the candidates for the small k of spread rows,
    the whole row for a constant wide row and for k beyond the candidates' reach)."""
    used = {True: 0, False: 0}
    for name, v in _rows_for_candidates():
        keys = float_key(v + np.float32(0.0))
        ordered = np.sort(keys)[::-1]
        for k in (1, 2, 5, 50, 64, 65, 200, 700, 1500):
            if k >= v.shape[0]:
                continue
            key, on_candidates = topk_key(keys, k)
            used[on_candidates] += 1
            assert key == ordered[k - 1], f"{name}, k = {k}: key {key:#x}, the k-th largest is {int(ordered[k - 1]):#x}"
    assert used[True] >= 50 and used[False] >= 10, f"the candidates' way taken {used[True]} times, the row's {used[False]}"


CASES = [SamplingParams(temperature=0.0), SamplingParams(), SamplingParams(temperature=0.5, top_k=0),
         SamplingParams(temperature=2.0, top_k=5), SamplingParams(top_k=0, top_p=0.9),
         SamplingParams(top_k=50, top_p=0.5), SamplingParams(top_k=0, min_p=0.05),
         SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.3,
                        presence_penalty=0.5, frequency_penalty=0.5)]


def test_kernel_model_draws_the_reference_ids():
    """150 rows of 400 logits (ties, -inf entries) under each case: the model's ids equal sample()'s."""
    rng = np.random.default_rng(3)
    V, n = 400, 150
    differ = 0
    for p in CASES:
        logits = (rng.standard_normal((n, V)) * 2).astype(np.float32)
        logits[:, :10] = logits[:, 10:11]  # ties
        logits[rng.random((n, V)) < 0.05] = -np.inf
        prompts = [list(rng.integers(0, V, 8)) for _ in range(n)]
        outputs = [list(rng.integers(0, V, 5)) for _ in range(n)]
        seeds, positions = np.arange(n, dtype=np.uint64) * 7919, np.full(n, 9)
        ref = sample(logits, p, seeds=seeds, positions=positions, prompt_ids=prompts, output_ids=outputs,
                     logprobs=False)
        k24 = (philox_uniform(seeds, positions) * 2**24).astype(np.int64)
        for b in range(n):
            got = kernel_draw(apply_penalties(logits[b], p, prompts[b], outputs[b]), p, int(k24[b]))
            differ += got != ref.ids[b]
    assert differ <= 1, f"{differ} of {n * len(CASES)} draws differ from the reference sampler"

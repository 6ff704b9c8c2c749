"""The reference sampler: Philox-4x32-10 against its published answers, every parameter checked by name,
the exact distribution's rules, draws against that distribution (chi-square), penalties, logprobs, batches."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from chi_square import chi_square, wilson_hilferty_sf
from gpt2block.sampler import (
    MAX_TOP_LOGPROBS, TEMPERATURE_FLOOR, SamplingBatch, SamplingError, SamplingParams, apply_penalties,
    distribution, draw, philox4x32, philox_uniform, raw_logprobs, sample,
)

finite = st.floats(-30, 30, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def logits_rows(draw_, max_b=4, max_v=40):
    b = draw_(st.integers(1, max_b))
    v = draw_(st.integers(1, max_v))
    return draw_(arrays(np.float32, (b, v), elements=finite))


def softmax64(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


# ---------------------------------------------------------------- Philox-4x32-10

# Random123's known-answer vectors (D. E. Shaw Research, Random123, tests/kat_vectors, the rows
# "philox4x32 10": counter[4] key[2] -> output[4], hexadecimal 32-bit words).
PHILOX4X32_10_KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff),
     (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX4X32_10_KAT)
def test_philox_matches_random123_known_answers(counter, key, expected):
    assert tuple(int(w) for w in philox4x32(counter, key)) == expected
    # batched: the same words whatever rows sit around them
    out = philox4x32(np.array([counter, (1, 2, 3, 4), counter]), np.array([key, (5, 6), key]))
    assert tuple(int(w) for w in out[2]) == expected and out.dtype == np.uint32


def test_philox_uniform_is_the_contracts_formula():
    seed, pos, idx = 0x299F31D0A4093822, 0x243F6A88, 0x85A308D3
    # key = (seed's low word, high word), counter = (position, sample_index, 0, 0)
    first = int(philox4x32((pos, idx, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))[0])
    assert philox_uniform(seed, pos, idx)[0] == (first >> 8) * 2.0**-24
    u = philox_uniform(2**64 - 1, np.arange(20000), 3)
    assert u.min() >= 0 and u.max() < 1 and np.all(u * 2**24 == np.floor(u * 2**24))  # 24-bit multiples
    assert np.all(u.astype(np.float32) == u)  # exact in float32
    counts = np.bincount((u * 16).astype(int), minlength=16)
    assert chi_square(counts, np.full(16, 1 / 16))[2] >= 1e-3
    assert philox_uniform(1, 5, 0)[0] != philox_uniform(2, 5, 0)[0] != philox_uniform(2, 5, 1)[0]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"seeds": -1}, SamplingError, r"seeds\[0\] must be in \[0, 18446744073709551615\]"),
    ({"seeds": 2**64}, SamplingError, r"seeds\[0\]"),
    ({"seeds": 1.5}, TypeError, r"seeds\[0\] must be an integer"),
    ({"seeds": True}, TypeError, r"seeds\[0\] must be an integer"),
    ({"positions": -1}, SamplingError, r"positions\[0\]"),
    ({"positions": 2**32}, SamplingError, r"positions\[0\]"),
    ({"positions": [1, 2, 3]}, SamplingError, "must hold one value per row"),
    ({"sample_indices": np.nan}, TypeError, r"sample_indices\[0\]"),
])
def test_philox_uniform_refuses_bad_counters_by_name(kwargs, error, match):
    args = {"seeds": [1, 2], "positions": [0, 0], "sample_indices": 0} | kwargs
    with pytest.raises(error, match=match):
        philox_uniform(**args)


# ---------------------------------------------------------------- parameters


@pytest.mark.parametrize("name, value, error", [
    ("temperature", -0.1, SamplingError), ("temperature", float("nan"), SamplingError),
    ("temperature", float("inf"), SamplingError), ("temperature", "1", TypeError), ("temperature", None, TypeError),
    ("temperature", 10**400, SamplingError),
    ("top_k", -1, SamplingError), ("top_k", 2.5, TypeError), ("top_k", True, TypeError), ("top_k", "5", TypeError),
    ("top_p", 0.0, SamplingError), ("top_p", 1.5, SamplingError), ("top_p", -0.5, SamplingError),
    ("top_p", float("nan"), SamplingError), ("top_p", float("inf"), SamplingError), ("top_p", [0.5], TypeError),
    ("min_p", -0.01, SamplingError), ("min_p", 1.01, SamplingError), ("min_p", float("nan"), SamplingError),
    ("min_p", False, TypeError),
    ("repetition_penalty", 0.0, SamplingError), ("repetition_penalty", -1.0, SamplingError),
    ("repetition_penalty", float("inf"), SamplingError), ("repetition_penalty", float("nan"), SamplingError),
    ("presence_penalty", 2.5, SamplingError), ("presence_penalty", -2.01, SamplingError),
    ("presence_penalty", float("-inf"), SamplingError), ("presence_penalty", "0", TypeError),
    ("frequency_penalty", 3, SamplingError), ("frequency_penalty", float("nan"), SamplingError),
])
def test_bad_params_are_refused_by_name(name, value, error):
    with pytest.raises(error, match=name):
        SamplingParams(**{name: value})


def test_params_take_numpy_numbers_and_keep_python_ones():
    p = SamplingParams(temperature=np.float32(0.5), top_k=np.int64(7), presence_penalty=-2, frequency_penalty=2)
    assert type(p.temperature) is float and type(p.top_k) is int and p.temperature == 0.5
    assert SamplingParams(temperature=0).greedy and SamplingParams(temperature=1e-320).greedy
    assert SamplingParams(temperature=TEMPERATURE_FLOOR / 2).greedy
    assert not SamplingParams(temperature=TEMPERATURE_FLOOR).greedy


# ---------------------------------------------------------------- the exact distribution


@settings(max_examples=200, deadline=None)
@given(logits_rows(), st.sampled_from([0.0, 1e-320, 1e-6]))
def test_greedy_is_the_argmax_lowest_id_first(logits, t):
    out = sample(logits, SamplingParams(temperature=t, top_k=0))
    np.testing.assert_array_equal(out.ids, np.argmax(logits, axis=-1))
    assert out.ids.dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(logits_rows(max_b=1), st.integers(1, 60), st.floats(1.0, 5.0))  # no probability underflows to 0
def test_top_k_keeps_the_k_largest_and_every_tie_at_the_boundary(logits, k, temperature):
    row = np.round(logits[0])  # rounding makes ties common
    p = distribution(row, SamplingParams(temperature=temperature, top_k=k))
    kept = p > 0
    if k >= len(row):
        assert kept.all()
    else:
        kth = np.sort(row)[::-1][k - 1]
        np.testing.assert_array_equal(kept, row >= kth)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(p[kept], softmax64(row[kept].astype(np.float64) / temperature), rtol=1e-9, atol=1e-300)


@settings(max_examples=300, deadline=None)
@given(logits_rows(max_b=1), st.floats(0.01, 1.0), st.floats(0.1, 3.0), st.booleans())
def test_top_p_keeps_every_id_at_or_above_the_threshold(logits, top_p, temperature, ties):
    row = np.round(logits[0]) if ties else logits[0]
    p = distribution(row, SamplingParams(temperature=temperature, top_k=0, top_p=top_p))
    full = softmax64(row.astype(np.float64) / temperature)  # [V]
    kept = p > 0
    tau = full[kept].min()
    np.testing.assert_array_equal(kept, full >= tau)  # a threshold: ties at it all kept
    assert full[kept].sum() >= top_p - 1e-9  # the kept mass reaches top_p
    assert full[full > tau].sum() < top_p + 1e-9  # a higher threshold would not: tau is the largest
    assert kept[np.argmax(full)]
    np.testing.assert_allclose(p[kept], full[kept] / full[kept].sum(), rtol=1e-9, atol=1e-300)


@settings(max_examples=200, deadline=None)
@given(logits_rows(max_b=1), st.floats(0.0, 1.0), st.integers(0, 20), st.floats(0.2, 3.0))
def test_min_p_keeps_ids_at_least_min_p_times_the_most_likely(logits, min_p, k, temperature):
    row = logits[0]
    p = distribution(row, SamplingParams(temperature=temperature, top_k=k, min_p=min_p))
    only_k = distribution(row, SamplingParams(temperature=temperature, top_k=k))
    np.testing.assert_array_equal(p > 0, (only_k > 0) & (only_k >= min_p * only_k.max()))


def test_top_k_then_top_p_renormalises_between_them():
    row = np.log(np.array([0.4, 0.3, 0.2, 0.1], np.float32))
    # top-k 2 leaves 0.4, 0.3 -> 4/7, 3/7; top_p 0.5 keeps 4/7 alone (without top-k it would need 0.3 too)
    assert np.flatnonzero(distribution(row, SamplingParams(top_k=2, top_p=0.5))).tolist() == [0]
    assert np.flatnonzero(distribution(row, SamplingParams(top_k=0, top_p=0.5))).tolist() == [0, 1]


@settings(max_examples=100, deadline=None)
@given(logits_rows(), st.integers(0, 10), st.floats(0.05, 1.0), st.floats(0.1, 3.0), st.floats(0, 0.5),
       st.lists(st.floats(0, 1, exclude_max=True), min_size=4, max_size=4))
def test_sample_draws_only_ids_of_the_distribution(logits, k, top_p, temperature, min_p, us):
    params = SamplingParams(temperature=temperature, top_k=k, top_p=top_p, min_p=min_p)
    out = sample(logits, params, u=us[: len(logits)])
    for b in range(len(logits)):
        assert distribution(logits[b], params)[out.ids[b]] > 0


def test_draw_inverts_the_cdf_in_id_order():
    p = np.array([0.0, 0.25, 0.0, 0.5, 0.25])
    assert [draw(p, u) for u in (0.0, 0.2499, 0.25, 0.7499, 0.75, 0.999999)] == [1, 1, 3, 3, 4, 4]
    assert draw(p, np.nextafter(1.0, 0.0)) == 4  # never past the last kept id


def test_evenly_spaced_u_give_each_id_its_share():
    rng = np.random.default_rng(0)
    row = rng.normal(0, 2, 30).astype(np.float32)
    params = SamplingParams(temperature=0.7, top_k=12, top_p=0.9, min_p=0.02)
    p = distribution(row, params)
    n = 5000
    out = sample(np.repeat(row[None], n, 0), params, u=(np.arange(n) + 0.5) / n)
    np.testing.assert_allclose(np.bincount(out.ids, minlength=30) / n, p, atol=2.0 / n)


# ---------------------------------------------------------------- draws against the exact distribution

def _test_logits():
    rng = np.random.default_rng(7)
    cases = {"v97": rng.normal(0, 2, 97).astype(np.float32)}
    ties = np.round(rng.normal(0, 1.5, 61)).astype(np.float32)
    ties[[3, 9, 40]] = -np.inf
    cases["ties_and_-inf"] = ties
    dominant = rng.normal(0, 1, 50).astype(np.float32)
    dominant[17] = 6.0
    cases["dominant"] = dominant
    return cases


MODES = {
    "t0.5": SamplingParams(temperature=0.5, top_k=0), "t1": SamplingParams(temperature=1.0, top_k=0),
    "t2": SamplingParams(temperature=2.0, top_k=0), "k1": SamplingParams(top_k=1), "k5": SamplingParams(top_k=5),
    "k50": SamplingParams(top_k=50), "p0.5": SamplingParams(top_k=0, top_p=0.5),
    "p0.9": SamplingParams(top_k=0, top_p=0.9), "p0.99": SamplingParams(top_k=0, top_p=0.99),
    "k50p0.9": SamplingParams(top_k=50, top_p=0.9), "minp0.05": SamplingParams(top_k=0, min_p=0.05),
    "penalties": SamplingParams(temperature=0.8, top_k=0, repetition_penalty=1.3, presence_penalty=0.5,
                                frequency_penalty=0.4),
}
HISTORY = {"prompt_ids": [2, 5, 5, 17, 30], "output_ids": [5, 7, 7, 7, 17, 44]}
DRAWS = 4000


CASES = [(mode, "v97") for mode in sorted(MODES)] + [
    (mode, case) for case in ("ties_and_-inf", "dominant") for mode in ("t1", "k5", "p0.9", "minp0.05", "penalties")]


@pytest.mark.parametrize("mode, case", CASES)
def test_draws_follow_the_exact_distribution(case, mode):
    """DRAWS draws of one row (seed fixed, positions 0..DRAWS-1) against distribution(): chi-square p >= 1e-3,
    and no id outside the kept set ever drawn."""
    row, params = _test_logits()[case], MODES[mode]
    hist = HISTORY if params.penalised else {}
    p = distribution(row, params, **hist)
    out = sample(np.repeat(row[None], DRAWS, 0), params, seeds=2024, positions=np.arange(DRAWS),
                 prompt_ids=[hist.get("prompt_ids", ())] * DRAWS if hist else None,
                 output_ids=[hist.get("output_ids", ())] * DRAWS if hist else None)
    counts = np.bincount(out.ids, minlength=len(row))
    assert counts[p == 0].sum() == 0
    stat, dof, pvalue = chi_square(counts, p)
    assert pvalue >= 1e-3, (stat, dof)


def test_the_chi_square_test_rejects_a_wrong_distribution():
    p = np.array([0.5, 0.3, 0.2])
    u = philox_uniform(5, np.arange(5000))
    good = np.bincount([draw(p, x) for x in u], minlength=3)
    bad = np.bincount([draw(np.array([0.45, 0.35, 0.2]), x) for x in u], minlength=3)
    assert chi_square(good, p)[2] >= 1e-3 and chi_square(bad, p)[2] < 1e-6


@pytest.mark.parametrize("x, k", [(3.0, 2), (30.0, 20), (50.0, 20), (120.0, 90), (1.0, 40)])
def test_the_fallback_p_value_is_close_to_scipys(x, k):
    scipy_stats = pytest.importorskip("scipy.stats")
    exact = scipy_stats.chi2.sf(x, k)
    assert abs(wilson_hilferty_sf(x, k) - exact) <= 0.02 + 0.1 * exact


# ---------------------------------------------------------------- penalties


def test_penalties_follow_the_contract():
    row = np.array([2.0, -2.0, 3.0, -1.0, 0.5, 1.0], np.float32)
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    # repetition over prompt + generated (once per id); presence / frequency over the generated ids only
    out = apply_penalties(row, params, prompt_ids=[0, 1, 1], output_ids=[4, 4, 5])
    np.testing.assert_allclose(out, [1.0, -4.0, 3.0, -1.0, 0.25 - 0.5 - 0.5, 0.5 - 0.5 - 0.25])
    np.testing.assert_array_equal(row, [2.0, -2.0, 3.0, -1.0, 0.5, 1.0])  # input untouched
    assert out.dtype == np.float32


def test_penalties_are_per_row_and_change_greedy():
    logits = np.array([[3.0, 2.0], [3.0, 2.0]], np.float32)
    out = sample(logits, SamplingParams(temperature=0, repetition_penalty=2.0), prompt_ids=[[0], [1]])
    np.testing.assert_array_equal(out.ids, [1, 0])  # row 0: 3/2 < 2; row 1 keeps its argmax
    out = sample(logits, SamplingParams(temperature=0, frequency_penalty=0.6), prompt_ids=[[0], [0]],
                 output_ids=[[0, 0], [0]])
    np.testing.assert_array_equal(out.ids, [1, 0])  # 3 - 1.2 < 2; 3 - 0.6 > 2; the prompt's 0 does not count


@settings(max_examples=100, deadline=None)
@given(logits_rows(max_b=1), st.floats(1.01, 5.0), st.lists(st.integers(0, 39), max_size=10))
def test_repetition_penalty_never_favours_a_seen_token(logits, penalty, seen):
    seen = [s for s in seen if s < logits.shape[1]]
    out = apply_penalties(logits[0], SamplingParams(repetition_penalty=penalty), prompt_ids=seen)
    for i in range(logits.shape[1]):
        if i in seen:
            assert out[i] <= logits[0, i]
        else:
            assert out[i] == logits[0, i]


# ---------------------------------------------------------------- outputs, batches, seeds


def test_logprobs_are_the_raw_distributions():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, (3, 70)).astype(np.float32)
    logits[1, [5, 9, 11]] = 20.0  # a three-way tie at the top: lower ids first
    params = SamplingParams(temperature=0.6, top_k=5, repetition_penalty=1.5)
    out = sample(logits, params, seeds=1, positions=[4, 5, 6], prompt_ids=[[1, 2]] * 3, top_logprobs=4)
    for b in range(3):
        raw = raw_logprobs(logits[b])
        assert out.logprobs[b] == pytest.approx(raw[out.ids[b]], abs=1e-6)
        order = np.argsort(-raw, kind="stable")[:4]
        np.testing.assert_array_equal(out.top_ids[b], order)
        np.testing.assert_allclose(out.top_logprobs[b], raw[order], atol=1e-6)
    assert out.top_ids[1][:3].tolist() == [5, 9, 11]
    assert sample(logits, params, seeds=1, positions=[4, 5, 6]).top_ids is None
    lean = sample(logits, params, seeds=1, positions=[4, 5, 6], prompt_ids=[[1, 2]] * 3, logprobs=False)
    assert lean.logprobs is None and lean.ids.tolist() == out.ids.tolist()
    with pytest.raises(SamplingError, match="top_logprobs must be in"):
        sample(logits, params, seeds=1, positions=[4, 5, 6], top_logprobs=MAX_TOP_LOGPROBS + 1)


def test_rows_with_their_own_params_and_seeds_equal_each_row_alone():
    rng = np.random.default_rng(11)
    logits = rng.normal(0, 2, (4, 90)).astype(np.float32)
    params = [SamplingParams(temperature=0), SamplingParams(top_k=5), SamplingParams(top_k=0, top_p=0.8, min_p=0.1),
              SamplingParams(temperature=1.7, frequency_penalty=1.0)]
    seeds, pos, idx = [3, 2**64 - 1, 0, 99], [10, 11, 12, 13], [0, 1, 2, 3]
    outputs = [[], [], [], [1, 2, 2]]
    together = sample(logits, params, seeds=seeds, positions=pos, sample_indices=idx, output_ids=outputs)
    for b in range(4):
        alone = sample(logits[b:b + 1], params[b], seeds=seeds[b], positions=pos[b], sample_indices=idx[b],
                       output_ids=[outputs[b]])
        assert alone.ids[0] == together.ids[b]


def test_same_seed_same_ids_and_another_seed_differs():
    logits = np.random.default_rng(1).normal(0, 1, (3, 200)).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_k=100, top_p=0.95)

    def run(seed):
        return np.stack([sample(logits, params, seeds=seed, positions=[t] * 3, sample_indices=[0, 1, 2]).ids
                         for t in range(20)])

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


def test_a_sampling_batch_draws_with_its_rows_state():
    logits = np.random.default_rng(2).normal(0, 1, (2, 50)).astype(np.float32)
    batch = SamplingBatch([SamplingParams(), SamplingParams(temperature=0.5)], [4, 4], [0, 1], [[1], [2]])
    assert batch.output_ids == [[], []] and batch.seeds.dtype == np.uint64
    out = batch.draw(logits, np.array([7, 9]))
    want = sample(logits, batch.params, seeds=4, positions=[7, 9], sample_indices=[0, 1])
    np.testing.assert_array_equal(out.ids, want.ids)
    with pytest.raises(SamplingError, match="needs 2 prompt and output histories"):
        SamplingBatch([SamplingParams()] * 2, [1, 1], [0, 1], [[1]])


def test_bad_inputs_are_refused_by_name():
    p = SamplingParams()
    z = np.zeros((1, 3), np.float32)
    with pytest.raises(SamplingError, match="row 0 contain NaN"):
        sample(np.array([[0.0, np.nan]]), p, u=[0.5])
    with pytest.raises(SamplingError, match=r"row 1 contain \+inf"):
        sample(np.array([[0.0, 1.0], [0.0, np.inf]]), p, u=[0.5, 0.5])
    with pytest.raises(SamplingError, match="-inf"):
        sample(np.full((1, 3), -np.inf), p, u=[0.1])
    with pytest.raises(SamplingError, match=r"u\[0\] is NaN"):
        sample(z, p, u=[np.nan])
    with pytest.raises(SamplingError, match=r"u\[0\] = 1.0; random numbers must lie in \[0, 1\)"):
        sample(z, p, u=[1.0])
    with pytest.raises(SamplingError, match=r"u\[0\] = -0.1"):
        sample(z, p, u=[-0.1])
    with pytest.raises(TypeError, match="u must hold numbers"):
        sample(z, p, u=["a"])
    with pytest.raises(SamplingError, match=r"2 random numbers \(u\) for 1 rows"):
        sample(z, p, u=[0.1, 0.2])
    with pytest.raises(SamplingError, match=r"\[batch, vocab\]"):
        sample(np.zeros(3), p, u=[0.1])
    with pytest.raises(SamplingError, match="need u, or seeds and positions"):
        sample(z, p)
    with pytest.raises(SamplingError, match="got 2 SamplingParams for 1 rows"):
        sample(z, [p, p], u=[0.1])
    with pytest.raises(TypeError, match=r"params\[0\] must be a SamplingParams"):
        sample(z, [{"temperature": 1}], u=[0.1])
    with pytest.raises(SamplingError, match="output_ids holds token id 3, outside the vocabulary"):
        sample(z, SamplingParams(frequency_penalty=1), u=[0.1], output_ids=[[3]])
    with pytest.raises(SamplingError, match="prompt_ids must hold one sequence per row"):
        sample(z, p, u=[0.1], prompt_ids=[[0], [1]])
    assert sample(z, SamplingParams(temperature=0)).ids.tolist() == [0]  # greedy needs no random numbers


def test_masked_tokens_are_never_drawn():
    logits = np.array([[-np.inf, 0.0, -np.inf, 1.0]], np.float32)
    for u in (0.0, 0.3, 0.999999):
        assert sample(logits, SamplingParams(top_k=4), u=[u]).ids.item() in (1, 3)
    assert math.isinf(sample(logits, SamplingParams(), u=[0.5], top_logprobs=4).top_logprobs[0, -1])

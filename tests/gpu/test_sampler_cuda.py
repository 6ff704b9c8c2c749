"""The device sampler (kernels/sampler.cu through backends/cuda/sampler.py) against the NumPy reference:
each mode drawn 10^6 times from fixed logits and compared with sampler.distribution()'s exact
probabilities (chi-square, p >= 1e-3, fixed seeds), ids outside the kept set never drawn, the Philox
uniforms bit for bit, the same seed the same ids, and CudaRunner.sample_prefill / sample_step against the
NumPy sampler on the same logits. About 30 s on an H200 (10^6 draws: ~1 s a mode at V = 50257, a tenth
of that at V = 1000)."""

import numpy as np
import pytest

from chi_square import chi_square
from gpt2block.sampler import SamplingBatch, SamplingParams, distribution, philox_uniform, raw_logprobs, sample

N_DRAWS = 10**6
P_MIN = 1e-3
CHECKED = []  # (what, draws, chi-square, degrees of freedom, p) of every distribution test: the summary's


@pytest.fixture(scope="module", autouse=True)
def p_value_summary():
    """After the module: one line per distribution case and the worst p-value (visible with pytest -s)."""
    yield
    if CHECKED:
        for what, n, stat, dof, p in CHECKED:
            print(f"\nchi-square {what}: {n} draws, {stat:.1f} on {dof} dof, p = {p:.3g}", end="")
        what, n, stat, dof, p = min(CHECKED, key=lambda c: c[4])
        print(f"\nSAMPLER SUMMARY: {len(CHECKED)} distribution cases, {sum(c[1] for c in CHECKED)} draws in all; "
              f"worst p = {p:.3g} ({what}: {n} draws, chi-square {stat:.1f} on {dof} dof)")


@pytest.fixture(scope="module")
def ds_mod():
    from gpt2block.backends.cuda import sampler as ds

    return ds


def _logits_1000():
    """V = 1000: 30 ids tied at the maximum, 20 tied lower down, 100 at -inf."""
    rng = np.random.default_rng(1000)
    l = (rng.standard_normal(1000) * 2.0).astype(np.float32)
    ids = rng.permutation(1000)
    l[ids[:30]] = l.max()
    l[ids[30:50]] = np.sort(l)[-200]
    l[ids[50:150]] = -np.inf
    return l


def _logits_50257():
    """V = 50257: spread logits, a few ties at the top, some -inf."""
    rng = np.random.default_rng(50257)
    l = (rng.standard_normal(50257) * 2.5).astype(np.float32)
    ids = rng.permutation(50257)
    l[ids[:5]] = l.max()
    l[ids[5:2005]] = -np.inf
    return l


def _dominant(V):
    rng = np.random.default_rng(V + 1)
    l = rng.standard_normal(V).astype(np.float32)
    l[V // 3] = l.max() + 9.0
    return l


PROMPT = [3, 4, 5, 17, 17, 900, 42]
OUTPUT = [42, 42, 42, 7, 8, 8, 999, 3]

MODES = {  # name -> (SamplingParams, with the penalties' history)
    "t0.5": (SamplingParams(temperature=0.5, top_k=0), False),
    "t1": (SamplingParams(temperature=1.0, top_k=0), False),
    "t2": (SamplingParams(temperature=2.0, top_k=0), False),
    "k1": (SamplingParams(top_k=1), False),
    "k5": (SamplingParams(top_k=5), False),
    "k50": (SamplingParams(top_k=50), False),
    "k200": (SamplingParams(top_k=200), False),  # top-k's candidates in groups of 4 threads
    "k1000": (SamplingParams(top_k=1000), False),  # V = 50257: too many candidates, the whole row (V = 1000: off)
    "p0.5": (SamplingParams(top_k=0, top_p=0.5), False),
    "p0.9": (SamplingParams(top_k=0, top_p=0.9), False),
    "p0.99": (SamplingParams(top_k=0, top_p=0.99), False),
    "k50p0.5": (SamplingParams(top_k=50, top_p=0.5), False),
    "k50p0.9": (SamplingParams(top_k=50, top_p=0.9), False),
    "k50p0.99": (SamplingParams(top_k=50, top_p=0.99), False),
    "minp0.05": (SamplingParams(top_k=0, min_p=0.05), False),
    "repetition": (SamplingParams(top_k=0, repetition_penalty=1.5), True),
    "presence": (SamplingParams(top_k=0, presence_penalty=1.5), True),
    "frequency": (SamplingParams(top_k=0, frequency_penalty=0.7), True),
    "all": (SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.3,
                           presence_penalty=0.5, frequency_penalty=0.5), True),
}
WIDE_MODES = ["t1", "k50", "k200", "k1000", "p0.9", "k50p0.99", "minp0.05", "all"]  # also at V = 50257


def _counts(cp, ds, row, params, history, n=N_DRAWS, seed0=0):
    """n draws of one row's distribution on the device: many rows of the same logits a launch, each row its
    own seed (seed0 + draw index). -> (counts [V], ids of the last launch, their seeds)."""
    V = row.shape[0]
    rows = (16384 if history else 65536) if V <= 4096 else 8192  # (a history is written per row once)
    rows = min(rows, n)
    prompt, output = (PROMPT, OUTPUT) if history else ([], [])
    batch = SamplingBatch([params] * rows, np.zeros(rows, np.uint64), np.zeros(rows, np.int64),
                          [list(prompt) for _ in range(rows)], [list(output) for _ in range(rows)])
    dev = ds.DeviceSampler(rows, V)
    logits = cp.ascontiguousarray(cp.broadcast_to(cp.asarray(row), (rows, V)))
    positions = np.full(rows, 11, np.int64)
    counts = np.zeros(V, np.int64)
    stream = cp.cuda.Stream()
    done = 0
    while done < n:
        batch.seeds[:] = np.arange(seed0 + done, seed0 + done + rows, dtype=np.uint64)
        dev.launch(logits, batch, positions, stream)
        ids = dev.result(stream).ids
        take = min(rows, n - done)
        counts += np.bincount(ids[:take], minlength=V)
        done += take
    return counts, ids, batch.seeds.copy()


def _check(counts, probs, what):
    outside = counts[probs == 0].sum()
    first = np.flatnonzero(counts * (probs == 0))[:5]
    assert outside == 0, f"{what}: {outside} draws of ids outside the kept set (ids {first} ...)"
    stat, dof, p = chi_square(counts, probs)
    CHECKED.append((what, int(counts.sum()), stat, dof, p))
    assert p >= P_MIN, f"{what}: chi-square {stat:.1f} on {dof} degrees of freedom, p = {p:.2e} < {P_MIN}"


@pytest.mark.parametrize("mode", list(MODES))
def test_distribution_v1000(cp, ds_mod, mode):
    params, history = MODES[mode]
    row = _logits_1000()
    probs = distribution(row, params, *((PROMPT, OUTPUT) if history else ()))
    counts, _, _ = _counts(cp, ds_mod, row, params, history, seed0=1)
    _check(counts, probs, f"V = 1000, {mode}")


@pytest.mark.parametrize("mode", WIDE_MODES)
def test_distribution_v50257(cp, ds_mod, mode):
    params, history = MODES[mode]
    row = _logits_50257()
    probs = distribution(row, params, *((PROMPT, OUTPUT) if history else ()))
    counts, _, _ = _counts(cp, ds_mod, row, params, history, seed0=2)
    _check(counts, probs, f"V = 50257, {mode}")


@pytest.mark.parametrize("V", [1000, 50257])
@pytest.mark.parametrize("mode", ["t1", "k50p0.9"])
def test_distribution_dominant_logit(cp, ds_mod, V, mode):
    params, _ = MODES[mode]
    row = _dominant(V)
    probs = distribution(row, params)
    counts, _, _ = _counts(cp, ds_mod, row, params, False, n=N_DRAWS // 4, seed0=3)
    _check(counts, probs, f"V = {V}, one dominant logit, {mode}")


def test_greedy_rows_take_the_lowest_id_of_the_penalised_maximum(cp, ds_mod):
    row = _logits_1000()
    for params, history in ((SamplingParams(temperature=0.0), False), (SamplingParams(temperature=1e-6), False),
                            (SamplingParams(temperature=0.0, repetition_penalty=2.0, presence_penalty=1.0), True)):
        probs = distribution(row, params, *((PROMPT, OUTPUT) if history else ()))
        counts, _, _ = _counts(cp, ds_mod, row, params, history, n=4096)
        assert counts[int(np.argmax(probs))] == 4096, f"{params}: greedy draws {np.flatnonzero(counts)}"


def test_same_seed_same_ids_and_other_seeds_differ(cp, ds_mod):
    row = _logits_50257()
    params = MODES["t1"][0]
    a = _counts(cp, ds_mod, row, params, False, n=8192, seed0=77)[1]
    b = _counts(cp, ds_mod, row, params, False, n=8192, seed0=77)[1]
    c = _counts(cp, ds_mod, row, params, False, n=8192, seed0=78)[1]
    assert np.array_equal(a, b), f"the same seeds drew different ids in {(a != b).sum()} of 8192 rows"
    assert (a[1:] != c[:-1]).sum() == 0, "seed s + 1 at row i must draw what seed s + 1 drew at row i + 1"
    assert (a != c).mean() > 0.9, f"other seeds drew the same id in {(a == c).mean():.1%} of rows"


def test_uniforms_equal_philox_uniform_bit_for_bit(cp, ds_mod):
    B, V = 4096, 1000
    rng = np.random.default_rng(9)
    seeds = rng.integers(0, 2**64 - 1, B, dtype=np.uint64, endpoint=True)
    seeds[:3] = [0, 2**64 - 1, 2**32]
    positions = rng.integers(0, 2**32, B, dtype=np.int64)
    positions[:2] = [0, 2**32 - 1]
    samples = rng.integers(0, 2**32, B, dtype=np.int64)
    batch = SamplingBatch([SamplingParams()] * B, seeds, samples, [[]] * B)
    dev = ds_mod.DeviceSampler(B, V)
    u = cp.full(B, -1.0, cp.float32)
    stream = cp.cuda.Stream()
    dev.launch(cp.asarray(np.tile(_logits_1000(), (B, 1))), batch, positions, stream, u_out=u)
    dev.result(stream)
    ref = philox_uniform(seeds, positions, samples)
    got = cp.asnumpy(u).astype(np.float64)
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, f"{bad.size} rows differ; first row {bad[:1]}: device {got[bad[:1]]}, NumPy {ref[bad[:1]]}"


def _near_boundary(probs, u, params, eps=1e-6):
    """Whether a draw lies within eps of a CDF boundary, or the row's top-p mass within eps of top_p: there
    float rounding may pick the neighbouring id."""
    cdf = np.cumsum(probs)
    if np.min(np.abs(cdf - u * cdf[-1])) < eps:
        return True
    return params.top_p < 1 and np.min(np.abs(np.cumsum(np.sort(probs)[::-1]) - params.top_p)) < eps


def test_ids_and_logprobs_equal_the_numpy_sampler(cp, ds_mod):
    """Many rows of different logits and parameters: the device's ids equal sample()'s wherever the draw is
    not within rounding of a boundary (and nearly all are), log-probabilities and top-n alike."""
    B, V = 512, 50257
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((B, V)) * rng.uniform(0.5, 4.0, (B, 1))).astype(np.float32)
    logits[rng.random((B, V)) < 0.01] = -np.inf
    names = list(MODES)
    params = [MODES[names[b % len(names)]][0] for b in range(B)]
    prompts = [list(rng.integers(0, V, 20)) for _ in range(B)]
    outputs = [list(rng.integers(0, V, 10)) for _ in range(B)]
    seeds = rng.integers(0, 2**63, B, dtype=np.uint64)
    positions = rng.integers(30, 1000, B)
    batch = SamplingBatch(params, seeds, np.arange(B) % 3, prompts, outputs, logprobs=True, top_logprobs=5)
    dev = ds_mod.DeviceSampler(B, V)
    stream = cp.cuda.Stream()
    dev.launch(cp.asarray(logits), batch, positions, stream)
    got = dev.result(stream)
    ref = sample(logits, params, seeds=seeds, positions=positions, sample_indices=np.arange(B) % 3,
                 prompt_ids=prompts, output_ids=outputs, logprobs=True, top_logprobs=5)
    u = philox_uniform(seeds, positions, np.arange(B) % 3)
    differ = [b for b in range(B) if got.ids[b] != ref.ids[b]]
    unexplained = [b for b in differ if not _near_boundary(
        distribution(logits[b], params[b], prompts[b], outputs[b]), u[b], params[b])]
    assert not unexplained, f"rows {unexplained[:5]} draw {got.ids[unexplained[:5]]}, NumPy {ref.ids[unexplained[:5]]}"
    assert len(differ) <= max(1, B // 1000), f"{len(differ)} of {B} rows differ from the NumPy sampler"
    lp = np.array([raw_logprobs(logits[b])[got.ids[b]] for b in range(B)])
    np.testing.assert_allclose(got.logprobs, lp, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got.top_ids, ref.top_ids)
    np.testing.assert_allclose(got.top_logprobs, ref.top_logprobs, rtol=0, atol=1e-5)


def test_bad_rows_and_sizes_are_refused(cp, ds_mod):
    from gpt2block.sampler import SamplingError

    B, V = 3, 1000
    batch = SamplingBatch([SamplingParams()] * B, [1, 2, 3], [0, 0, 0], [[]] * B)
    dev = ds_mod.DeviceSampler(B, V)
    stream = cp.cuda.Stream()
    for bad in (np.nan, np.inf):
        logits = np.tile(_logits_1000(), (B, 1))
        logits[1, 17] = bad
        dev.launch(cp.asarray(logits), batch, np.zeros(B, np.int64), stream)
        with pytest.raises(SamplingError, match="row 1"):
            dev.result(stream)
    logits = np.tile(_logits_1000(), (B, 1))
    logits[2] = -np.inf
    dev.launch(cp.asarray(logits), batch, np.zeros(B, np.int64), stream)
    with pytest.raises(SamplingError, match="row 2"):
        dev.result(stream)
    with pytest.raises(ValueError, match="float32"):
        dev.launch(cp.zeros((B, V), cp.float64), batch, np.zeros(B, np.int64), stream)
    with pytest.raises(ds_mod.SamplerTooWide, match="at most"):
        ds_mod.DeviceSampler(1, ds_mod.max_vocab() + 1)


# ---------------------------------------------------------------- the runner


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    from hf_checkpoints import make_hf_checkpoint

    from gpt2block.backends import make_runner
    from gpt2block.checkpoint import load_weights

    ckpt = make_hf_checkpoint(tmp_path_factory.mktemp("sampler") / "ckpt", 2, 768, 12, vocab_size=50257,
                              n_positions=1024, seed=44)
    return make_runner(load_weights(ckpt.path), "cuda")


def test_runner_samples_on_the_device_like_the_numpy_sampler(runner):
    """sample_prefill then sample_step (the loop appending each id it takes) on one cache; the same tokens
    decoded on a second cache give the host logits the NumPy sampler draws from: the same ids (away from
    boundaries), the same log-probabilities."""
    B, steps = 6, 8
    rng = np.random.default_rng(12)
    prompts = [list(rng.integers(0, 50257, n)) for n in (1, 5, 9, 2, 30, 3)]
    params = [SamplingParams(temperature=0.9), SamplingParams(temperature=0), MODES["all"][0],
              SamplingParams(temperature=1.3, top_k=0, top_p=0.9), SamplingParams(repetition_penalty=1.4),
              SamplingParams(top_k=0, presence_penalty=1.0, frequency_penalty=1.0)]
    batch = SamplingBatch(params, list(range(100, 100 + B)), [0, 1, 0, 2, 0, 0], prompts, logprobs=True,
                          top_logprobs=3)
    twin = SamplingBatch(params, list(range(100, 100 + B)), [0, 1, 0, 2, 0, 0], prompts, logprobs=True,
                         top_logprobs=3)
    cache, ref_cache = runner.new_cache(B), runner.new_cache(B)
    out = runner.sample_prefill(cache, prompts, batch)
    logits = runner.prefill_batch(ref_cache, range(B), prompts)
    checked = skipped = 0
    for step in range(steps + 1):
        ref = twin.draw(logits, ref_cache.pos.copy())
        u = philox_uniform(twin.seeds, ref_cache.pos, twin.sample_indices)
        for b in range(B):
            if out.ids[b] != ref.ids[b]:
                probs = distribution(logits[b], params[b], twin.prompt_ids[b], twin.output_ids[b])
                assert _near_boundary(probs, u[b], params[b]), (
                    f"step {step} row {b}: device drew {out.ids[b]}, NumPy {ref.ids[b]}")
                skipped += 1
            checked += 1
        same = out.ids == ref.ids  # the drawn ids' log-probabilities where the ids agree; the top-n everywhere
        np.testing.assert_allclose(out.logprobs[same], ref.logprobs[same], rtol=0, atol=1e-5)
        np.testing.assert_array_equal(out.top_ids, ref.top_ids)
        np.testing.assert_allclose(out.top_logprobs, ref.top_logprobs, rtol=0, atol=1e-5)
        if step == steps:
            break
        feed = out.ids  # both caches are fed the device's ids, as the generation loop feeds them
        for b in range(B):
            batch.output_ids[b].append(int(feed[b]))
            twin.output_ids[b].append(int(feed[b]))
        out = runner.sample_step(cache, feed, batch)
        logits = runner.decode(ref_cache, feed)
    assert skipped <= 1, f"{skipped} of {checked} draws differed from the NumPy sampler (near a boundary)"
    assert np.array_equal(cache.pos, ref_cache.pos)


def _chain_batch(prompts):
    params = [SamplingParams(temperature=0.9), SamplingParams(temperature=0), MODES["all"][0],
              SamplingParams(temperature=0.8, top_k=0, top_p=0.95)]
    return SamplingBatch(params, [7, 8, 9, 10], [0, 1, 0, 2], prompts)


def test_sample_steps_draw_what_sample_step_draws(runner):
    """The step stream (decode and draw in one graph, the draws fed forward and counted in the history on the
    device, one step queued ahead) gives exactly the ids of sample_step called step by step with the host's
    lists, and the same ids again on a second run (the same seed)."""
    rng = np.random.default_rng(31)
    prompts = [list(rng.integers(0, 50257, n)) for n in (3, 17, 8, 40)]
    steps = 12

    def stream():
        batch = _chain_batch(prompts)
        cache = runner.new_cache(4)
        out = runner.sample_prefill(cache, prompts, batch)
        for b in range(4):
            batch.output_ids[b].append(int(out.ids[b]))
        got = [out.ids]
        it = runner.sample_steps(cache, out.ids, batch, max_steps=steps)
        for ids in it:
            got.append(ids)
            for b in range(4):
                batch.output_ids[b].append(int(ids[b]))
        return np.stack(got), cache.pos.copy()

    def stepwise():
        batch = _chain_batch(prompts)
        cache = runner.new_cache(4)
        out = runner.sample_prefill(cache, prompts, batch)
        got = [out.ids]
        for _ in range(steps):
            for b in range(4):
                batch.output_ids[b].append(int(out.ids[b]))
            out = runner.sample_step(cache, out.ids, batch)
            got.append(out.ids)
        return np.stack(got), cache.pos.copy()

    a, pos_a = stream()
    b, pos_b = stepwise()
    c, _ = stream()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(pos_a, pos_b)


def test_sample_prefill_prefills_a_prompt_once_for_its_samples(runner, cp):
    """Rows with the same prompt take the first row's keys, values and logits: bit for bit what prefilling
    each row gives."""
    rng = np.random.default_rng(32)
    p, q = list(rng.integers(0, 50257, 11)), list(rng.integers(0, 50257, 5))
    prompts = [p, p, p, q, q]
    batch = SamplingBatch([SamplingParams()] * 5, [1] * 5, [0, 1, 2, 0, 1], prompts)
    cache, ref = runner.new_cache(5), runner.new_cache(5)
    runner.sample_prefill(cache, prompts, batch)
    logits = runner.prefill_batch(ref, range(5), prompts)
    np.testing.assert_array_equal(cp.asnumpy(cache.prefill_logits), logits)
    for r, ids in enumerate(prompts):
        np.testing.assert_array_equal(cp.asnumpy(cache.kv[r, :, :, :len(ids)]), cp.asnumpy(ref.kv[r, :, :, :len(ids)]))
    np.testing.assert_array_equal(cache.pos, ref.pos)

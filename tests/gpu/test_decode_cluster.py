"""The batch-1 decode step in thread block clusters (kernels/decode_cluster.cu): one step's logits
against a float64 run of the NumPy reference on weights that bf16 holds exactly (so the judge has the
very weights the kernel reads), across attention lengths (1, 2, 30, 100, 1024 and the 16- and
128-key boundaries of its key split), judged against the five-kernel path's error; bit-repeatability
between eager runs and graph replays with poisoned scratch; greedy decoding as the five kernels
decode; where it does not run."""

import numpy as np
import pytest

from gpt2block.backends import make_runner
from gpt2block.config import GPT2Config
from gpt2block.weights import ModelWeights

VOCAB = 4096  # the LM head is not what is tested here


def _bf16_exact(a: np.ndarray) -> np.ndarray:
    """a rounded to the nearest bf16 value (ties to even), kept as float32."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def _weights(d: int = 768, n_layer: int = 2, vocab: int = VOCAB) -> ModelWeights:
    seed = int(np.random.default_rng().integers(0, 2**31))
    w = ModelWeights.random(GPT2Config(n_layer=n_layer, n_embd=d, n_head=d // 64, vocab_size=vocab), seed=seed)
    return ModelWeights(w.config, _bf16_exact(w.blocks), _bf16_exact(w.wte), w.wpe, w.ln_f_g, w.ln_f_b)


def _runner(weights, precision="bf16", cluster=True, graphs=True):
    r = make_runner(weights, "cuda", precision)
    r.cluster_decode, r.use_graphs = cluster, graphs
    return r


def _require_cluster(runner):
    """The runner's batch-1 steps must run the cluster kernel on a Hopper GPU (compute capability 9.0, the
    kernel's sm_90a build); on any other GPU the test is skipped."""
    if runner._path(1).blocks == "cluster":
        return
    import cupy

    assert cupy.cuda.Device().compute_capability != "90", "the cluster kernel should run on this Hopper GPU"
    pytest.skip("the cluster kernel runs on compute capability 9.0 only")


def _decode_once(runner, prompt, token):
    cache = runner.new_cache(1)
    if len(prompt):
        runner.prefill(cache, 0, prompt)
    return runner.decode(cache, np.array([token])).astype(np.float64)[0]


@pytest.mark.parametrize("length", [1, 2, 16, 17, 30, 100, 128, 129, 1024])
def test_cluster_step_matches_fp64(length):
    w = _weights()
    rng = np.random.default_rng()
    seq = rng.integers(0, VOCAB, length)
    ours_runner = _runner(w)
    _require_cluster(ours_runner)
    ours = _decode_once(ours_runner, seq[:-1], seq[-1])
    peer_runner = _runner(w, cluster=False)
    assert peer_runner._path(1).blocks != "cluster"
    peer = _decode_once(peer_runner, seq[:-1], seq[-1])
    judge = make_runner(w, "numpy", "fp64").forward(seq)[-1]
    assert np.isfinite(ours).all()
    e_ours, e_peer = np.abs(ours - judge).max(), np.abs(peer - judge).max()
    print(f"length {length}: error vs fp64 cluster {e_ours:.3g}, five-kernel path {e_peer:.3g}")
    assert e_ours <= 2 * e_peer + 1e-6, f"cluster error {e_ours:.3g} > 2 x the five-kernel path's {e_peer:.3g}"
    assert ours.argmax() == judge.argmax()


def test_cluster_repeats_bit_for_bit_and_ignores_poisoned_scratch(cp):
    """Eager steps, graph replays and a second runner give identical bits; NaN in the partials
    (written before they are read) changes nothing; the grid counter is zero after every step."""
    w = _weights(n_layer=3)
    rng = np.random.default_rng()
    prompt = rng.integers(0, VOCAB, 70)
    toks = rng.integers(0, VOCAB, 5)
    results = []
    for graphs in (False, True, True):
        r = _runner(w, graphs=graphs)
        _require_cluster(r)
        cache = r.new_cache(1)
        r.prefill(cache, 0, prompt)
        steps = []
        for t in toks:
            r._cluster.part1.fill(cp.nan)
            r._cluster.part2.fill(cp.nan)
            steps.append(r.decode(cache, np.array([t])))
            assert int(r._cluster.sync.max()) == 0
        results.append(np.stack(steps))
    assert np.isfinite(results[0]).all()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_cluster_greedy_tokens_match_the_five_kernels():
    """gpt2's shape (12 layers, the full vocabulary): greedy_steps (chained steps, the screened head)
    give the five-kernel path's tokens, and the step's KV cache rows agree with it closely."""
    w = _weights(n_layer=12, vocab=50257)
    rng = np.random.default_rng()
    prompt = rng.integers(0, 50257, 16)
    out = {}
    for cluster in (True, False):
        r = _runner(w, cluster=cluster)
        if cluster:
            _require_cluster(r)
        cache = r.new_cache(1)
        first = r.prefill(cache, 0, prompt).argmax()
        out[cluster] = [int(t[0]) for t in r.greedy_steps(cache, np.array([first]), max_steps=40)]
        out[cluster, "kv"] = cache.kv[0, :, :, : int(cache.pos[0])].get()
    assert out[True] == out[False]
    np.testing.assert_allclose(out[True, "kv"], out[False, "kv"], atol=2e-4, rtol=0)


@pytest.mark.parametrize("d, precision, batch, want", [
    (768, "bf16", 1, True), (768, "bf16", 2, False), (768, "fp32", 1, False), (768, "tf32", 1, False),
    (1024, "bf16", 1, False),
])
def test_cluster_runs_only_where_built(d, precision, batch, want):
    r = _runner(_weights(d, n_layer=1), precision)
    if want:
        _require_cluster(r)
    assert (r._path(batch).blocks == "cluster") == want
    r.cluster_decode = False
    assert r._path(batch).blocks != "cluster"


@pytest.mark.parametrize("length, pos", [(0, 5), (-3, 5), (1025, 5), (1 << 30, 5), (6, 1024), (6, -1)])
def test_cluster_step_out_of_range_gives_nan_and_leaves_the_cache(cp, length, pos):
    """A length outside [1, n_ctx] or a position outside [0, n_ctx) (the runner never passes one:
    Cache.check_room) reads no key, writes no cache row and gives NaN, and the next step is unharmed."""
    w = _weights(n_layer=2)
    r = _runner(w, graphs=False)
    _require_cluster(r)
    rng = np.random.default_rng()
    cache = r.new_cache(1)
    cache.kv[...] = cp.asarray(rng.standard_normal(cache.kv.shape, dtype=np.float32))
    kv_before = cache.kv.copy()
    x = cp.asarray(rng.standard_normal((1, 768), dtype=np.float32))

    def i32(v):
        return cp.asarray([v], dtype=cp.int32)

    r._cluster.launch(x, cache.kv, i32(0), i32(pos), i32(length))
    cp.cuda.Device().synchronize()
    assert bool(cp.isnan(x).all()), "an out-of-range step must give NaN everywhere"
    assert bool((cache.kv == kv_before).all()), "an out-of-range step must not write the cache"
    assert int(r._cluster.sync.max()) == 0
    x2 = cp.asarray(rng.standard_normal((1, 768), dtype=np.float32))
    r._cluster.launch(x2, cache.kv, i32(0), i32(6), i32(7))
    assert bool(cp.isfinite(x2).all())

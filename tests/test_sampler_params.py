"""The device sampler's host side that needs no GPU (backends/cuda/sampler_params.py): its word layout
against kernels/sampler.cu's enums, the words it packs, the history rows and what a launch appends."""

import re

import numpy as np
import pytest

from gpt2block.backends.cuda import sampler_params as sp
from gpt2block.kernel_source import kernels_dir
from gpt2block.sampler import SamplingBatch, SamplingParams


def _enum(name: str) -> dict:
    text = (kernels_dir() / "sampler.cu").read_text()
    body = re.search(r"enum\s+" + name + r"\s*\{(.*?)\};", text, re.S).group(1)
    return {k: int(v, 0) for k, v in re.findall(r"(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", body)}


def test_word_layout_mirrors_the_kernel():
    words = _enum("SamplerWord")
    assert words, "kernels/sampler.cu has no enum SamplerWord"
    for k, v in words.items():
        assert getattr(sp, k) == v, f"{k}: kernel {v}, host {getattr(sp, k)}"
    for k, v in _enum("SamplerHistory").items():
        assert getattr(sp, k) == v, f"{k}: kernel {v:#x}, host {getattr(sp, k):#x}"


def _batch():
    params = [SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.3,
                             presence_penalty=-0.5, frequency_penalty=1.25),
              SamplingParams(temperature=0.0), SamplingParams(temperature=3e-6, top_k=0)]
    return SamplingBatch(params, [2**64 - 1, 5, 2**32 + 7], [0, 3, 2**32 - 1], [[1, 2], [], [9]],
                         [[4, 4], [], []])


def test_pack_params_words_decode_to_the_batch():
    b = _batch()
    out = np.zeros((sp.SW_WORDS, 3), np.uint32)
    sp.pack_params(b, np.array([10, 0, 2**32 - 1]), out, append=[4, -1, 7])

    def f64(w):
        return (out[w].astype(np.uint64) | (out[w + 1].astype(np.uint64) << np.uint64(32))).view(np.float64)

    np.testing.assert_array_equal(f64(sp.SW_TEMPERATURE), [0.7, 0.0, 0.0])  # greedy rows: 0
    np.testing.assert_array_equal(f64(sp.SW_TOP_P), [0.9, 1.0, 1.0])
    np.testing.assert_array_equal(f64(sp.SW_MIN_P), [0.05, 0.0, 0.0])
    f32 = out[sp.SW_REPETITION:sp.SW_FREQUENCY + 1].view(np.float32)
    np.testing.assert_array_equal(f32, np.float32([[1.3, 1, 1], [-0.5, 0, 0], [1.25, 0, 0]]))
    np.testing.assert_array_equal(out[sp.SW_TOP_K], [40, 50, 0])
    seeds = out[sp.SW_SEED].astype(np.uint64) | (out[sp.SW_SEED + 1].astype(np.uint64) << np.uint64(32))
    np.testing.assert_array_equal(seeds, np.array([2**64 - 1, 5, 2**32 + 7], np.uint64))
    np.testing.assert_array_equal(out[sp.SW_POSITION], [10, 0, 2**32 - 1])
    np.testing.assert_array_equal(out[sp.SW_SAMPLE], [0, 3, 2**32 - 1])
    np.testing.assert_array_equal(out[sp.SW_APPEND].view(np.int32), [4, -1, 7])


def test_pack_params_refuses_bad_shapes_and_positions():
    b = _batch()
    with pytest.raises(ValueError, match="uint32"):
        sp.pack_params(b, [0, 0, 0], np.zeros((sp.SW_WORDS, 3), np.int32))
    out = np.zeros((sp.SW_WORDS, 3), np.uint32)
    with pytest.raises(ValueError, match="one value per row"):
        sp.pack_params(b, [0, 0], out)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32 - 1\]"):
        sp.pack_params(b, [0, -1, 0], out)
    with pytest.raises(TypeError, match="integers"):
        sp.pack_params(b, [0.5, 1, 2], out)


def test_history_row_marks_the_prompt_and_counts_the_output():
    row = sp.history_row([3, 5, 3], [5, 7, 7, 7], 10)
    want = np.zeros(10, np.int32)
    want[[3, 5]] = sp.HISTORY_PROMPT
    want[5] += 1
    want[7] += 3
    np.testing.assert_array_equal(row, want)
    with pytest.raises(ValueError, match="output_ids holds an id outside"):
        sp.history_row([], [10], 10)


def test_tracker_appends_the_one_id_taken_and_rewrites_other_changes():
    b = _batch()
    t = sp.HistoryTracker(b)
    append, stale = t.step(b)
    assert list(append) == [-1, -1, -1] and stale == []
    b.output_ids[0].append(8)  # one id taken by row 0; row 1 finished (takes none)
    b.output_ids[2].append(1)
    append, stale = t.step(b)
    assert list(append) == [8, -1, 1] and stale == []
    b.output_ids[1].extend([1, 2])  # two at once: written afresh
    b.output_ids[0][-1] = 9  # the last id known changed: written afresh
    b.output_ids[0].append(3)
    append, stale = t.step(b)
    assert list(append) == [-1, -1, -1] and stale == [0, 1]
    with pytest.raises(ValueError, match="different batch"):
        t.step(_batch())

"""The benchmark's figure (gpt2block.bench.plot) renders from the committed benchmark, and its decode floors
count the bytes a step reads."""

import json
from pathlib import Path

import pytest

from gpt2block import bench

BENCH_JSON = Path(__file__).resolve().parent.parent / "docs" / "bench" / "2026-11-28" / "bench.json"


def test_decode_step_bytes_gpt2():
    # gpt2 (D 768, 12 layers, V 50257), fp32, batch 1, 128 steps after 16 prompt tokens, counted by hand:
    d, v = 768, 50257
    blocks = 12 * (12 * d * d * 4 + 13 * d * 4)  # float32 decode matrices, biases, LayerNorm gains
    screen = v * d + 16 * v  # the int8 LM head screen and its row parameters
    kv = 12 * 2 * (16 + 129 / 2) * d * 4  # float32 keys and values, positions 16 to 143
    small = 2 * d * 4 + 2 * d * 4  # the embedding rows, ln_f
    assert bench.decode_step_bytes("gpt2", "fp32", 1, 128) == pytest.approx(blocks + screen + kv + small)
    # bf16 halves the matrices; at batch 8 the head is the whole of wte at the step's precision
    assert bench.decode_step_bytes("gpt2", "bf16", 1, 128) == pytest.approx(blocks / 2 + 12 * 13 * d * 2 + screen
                                                                           + kv + small)
    b8 = bench.decode_step_bytes("gpt2", "fp32", 8, 128)
    assert b8 == pytest.approx(blocks + v * d * 4 + 8 * kv + 8 * 2 * d * 4 + 2 * d * 4)


def test_decode_floors_above_measured_rates():
    r = json.loads(BENCH_JSON.read_text())
    copy = r["ceilings"]["copy_TBps"] * 1e12
    for key in ("decode", "decode_xl"):
        dd = r[key]
        for name, rate in dd.items():
            if name.startswith("ours_") and name.endswith("_tok_s"):
                _, prec, b, _, _ = name.split("_")
                batch = int(b[1:])
                floor = copy * batch / bench.decode_step_bytes(dd["size"], prec, batch, dd["steps"])
                assert rate < floor, (key, name, rate, floor)


def test_plot_renders_committed_benchmark(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    r = json.loads(BENCH_JSON.read_text())
    out = tmp_path / "bench.png"
    assert bench.plot(r, out) is True
    img = matplotlib.image.imread(out)
    assert img.shape[0] > 400 and img.shape[1] > 1000  # two panels side by side


def test_plot_without_solve_or_decode_writes_nothing(tmp_path):
    pytest.importorskip("matplotlib")
    assert bench.plot({"ceilings": {"copy_TBps": 4.0}, "layernorm": {}}, tmp_path / "bench.png") is False
    assert not (tmp_path / "bench.png").exists()

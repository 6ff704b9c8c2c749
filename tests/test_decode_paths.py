"""The decode-path table (backends/cuda/decode_paths.decode_path) without a GPU: every row and every
boundary of its conditions, the runner's flags, and the device check asked only for a row it takes."""

import pytest

from gpt2block.backends.cuda import build
from gpt2block.backends.cuda.decode_paths import BLOCKS, HEADS, DecodePath, decode_path


def _blocks(batch, d=768, precision="bf16", cc=90, **kw):
    return decode_path(batch, d, precision, cc, **kw).blocks


def test_every_row_cites_its_measurement():
    assert [r.kind for r in BLOCKS] == ["cluster", "gemv", "gemm"]
    assert [r.kind for r in HEADS] == ["screen", "gemv_argmax", "plain"]
    for row in BLOCKS[:1] + HEADS[:2]:
        assert "version" in row.measured and "tok/s" in row.measured, row.kind
    for row in BLOCKS + HEADS:
        assert row.condition and row.measured


def test_cluster_row():
    assert _blocks(1) == "cluster"  # gpt2 bf16 b1 on an H100 / H200
    assert _blocks(2) == "gemv"
    assert _blocks(1, precision="fp32") == "gemv"
    assert _blocks(1, precision="tf32") == "gemv"
    assert _blocks(1, d=1024) == "gemv"
    assert _blocks(1, d=build.DC_D) == "cluster"
    assert _blocks(1, cc=89) == "gemv" and _blocks(1, cc=100) == "gemv"  # sm_90a only
    assert _blocks(1, runs=lambda kind: kind != "cluster") == "gemv"  # clusters not all resident
    assert _blocks(1, cluster=False) == "gemv"


def test_gpt2_xl_runs_the_five_kernels():
    """decode_layers, the fused path gpt2-xl bf16 took until version 37, measured slower and left."""
    for b in range(1, 9):
        for precision in ("fp32", "bf16"):
            assert _blocks(b, d=1600, precision=precision) == "gemv"
    assert _blocks(9, d=1600) == "gemm"


def test_gemv_and_gemm_rows():
    for precision in ("fp32", "tf32", "bf16"):
        assert _blocks(build.GEMV_MAX_M, precision=precision) == "gemv"
        assert _blocks(build.GEMV_MAX_M + 1, precision=precision) == "gemm"
    assert _blocks(64, cc=80) == "gemm"


def test_head_rows():
    def head(batch, d=768, logits=False, vocab=50257):
        return decode_path(batch, d, "fp32", 90, logits=logits, vocab=vocab).head

    assert head(1) == "screen"
    assert head(1, logits=True) == "gemv_argmax"
    assert head(2) == "plain" and head(2, logits=True) == "plain" and head(9) == "plain"
    assert head(1, d=2048) == "screen" and head(1, d=2056) == "gemv_argmax"  # K up to LM_SCREEN_MAX_K
    assert head(1, d=100) == "gemv_argmax"  # K a multiple of 8
    assert head(1, vocab=7) == "screen"


def test_the_device_check_is_asked_only_for_a_row_taken():
    asked = []

    def runs(kind):
        asked.append(kind)
        return True

    decode_path(1, 768, "fp32", 90, runs=runs)
    decode_path(4, 1280, "bf16", 90, runs=runs)
    assert asked == []
    assert decode_path(1, 768, "bf16", 90, runs=runs) == DecodePath("cluster", "gemv_argmax")
    assert decode_path(2, 1600, "bf16", 90, runs=runs) == DecodePath("gemv", "plain")
    assert asked == ["cluster"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one row"):
        decode_path(0, 768, "fp32", 90)
    with pytest.raises(ValueError, match="precision"):
        decode_path(1, 768, "fp16", 90)
    with pytest.raises(ValueError, match="cluster must be"):
        decode_path(1, 768, "fp32", 90, cluster="auto")

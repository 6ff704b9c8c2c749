"""`gpt2block bench` where no GPU is present: a clear error, nothing written; bad options refused."""

from click.testing import CliRunner

from gpt2block.backends import cuda_status
from gpt2block.cli import main


def test_bench_without_gpu_is_a_clear_error(tmp_path):
    if cuda_status()[0]:
        import pytest

        pytest.skip("a GPU is present: the benchmark would run")
    r = CliRunner().invoke(main, ["bench", "-o", str(tmp_path / "b")])
    assert r.exit_code == 1
    assert "the benchmark needs a GPU" in r.output
    assert not (tmp_path / "b").exists()


def test_bench_rejects_too_few_reps(tmp_path):
    r = CliRunner().invoke(main, ["bench", "--reps", "5", "-o", str(tmp_path / "b")])
    assert r.exit_code == 2
    assert "--reps" in r.output


def test_bench_rejects_unknown_section(tmp_path):
    r = CliRunner().invoke(main, ["bench", "--section", "everything"])
    assert r.exit_code == 2
    assert "--section" in r.output

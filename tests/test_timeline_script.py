"""scripts/timeline_decode.py's table on made-up kernel records (no GPU): the steps are cut at the embedding,
and each kernel's end after the end of the kernel before it adds up to the step's span."""

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "timeline_decode.py"


@pytest.fixture(scope="module")
def tl():
    spec = importlib.util.spec_from_file_location("timeline_decode", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _records(periods=(20.0, 21.0, 19.0)):
    """Three steps, and the start of a fourth: an embedding, then two kernels launched before the one
    ahead of them ends (as programmatic launch starts them); (start us, duration us, name)."""
    recs, t = [], 100.0
    for p in periods:
        recs += [(t, 2.0, "embedding_f32"), (t + 1.0, 5.0, "gemv_qkv"), (t + 3.0, 6.5, "attention")]
        t += p
    return recs + [(t, 2.0, "embedding_f32")]


def test_end_after_end_adds_up_to_the_span(tl):
    steps = tl.split_steps(_records(), "embedding")
    assert len(steps) == 3
    lines = tl.summarize(steps)
    rows = {ln.split()[0]: [float(v) for v in ln.split()[1:]] for ln in lines[2:5]}
    # start, duration, gap to next, end after the end before
    assert rows["embedding_f32"] == [0.0, 2.0, -1.0, 2.0]
    assert rows["gemv_qkv"] == [1.0, 5.0, -3.0, 4.0]
    assert rows["attention"][3] == 3.5  # ends at 9.5, the kernel before at 6.0
    assert sum(r[3] for r in rows.values()) == 9.5
    assert "step span 9.5 us" in lines[-1] and "period 20.5 us" in lines[-1]  # the median of 20 and 21


def test_too_few_steps_is_an_error(tl):
    with pytest.raises(SystemExit, match="whole steps"):
        tl.summarize(tl.split_steps(_records((20.0,)), "embedding"))

"""The benchmark's generate section without a GPU: its prompts encode to exactly their ids through the byte
tokenizer the section writes into the checkpoint, and its rows hold the issue's targets and verdicts."""

import numpy as np

from gpt2block import bench
from gpt2block.tokenizer import Tokenizer


def test_prompts_encode_to_their_ids(tmp_path):
    bench.byte_tokenizer(50257).save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.from_dir(tmp_path)
    assert tok.vocab_size == 50257 and tok.eot_id == 50256
    ids = bench.generate_prompts(4)
    assert ids == bench.generate_prompts(4)  # a fixed seed
    assert all(len(x) == bench.GENERATE_PROMPT_LEN for x in ids)
    for x in ids:
        assert tok.encode(tok.decode(x)) == x


def _results():
    runs = []
    for b, greedy_dec in ((1, 5000.0), (8, 20000.0), (64, 60000.0)):
        for mode in bench.GENERATE_MODES:
            dec = greedy_dec * (1.0 if mode == "greedy" else 0.9)
            runs.append({"batch": b, "mode": mode, "wall_tok_s": dec * 0.9, "decode_tok_s": dec,
                         "prefill_ms": 12.0 if b == 64 else 3.0, "new_tokens": b * 128, "asked_tokens": b * 128})
    peer = {"greedy|1": {"wall_tok_s": 150.0}, "t=1 top-k 50|1": {"wall_tok_s": 130.0},
            "t=1 top-k 50|8": {"wall_tok_s": 2000.0}, "t=1 top-k 50|64": {"skipped": "skipped: too long"}}
    return {"prompt_len": 128, "new_tokens": 128, "reps": 3, "runs": runs, "peer": peer,
            "runner_greedy_b1_tok_s": 5100.0}


def test_rows_carry_the_targets():
    rows = {r.what: r for r in bench.generate_rows(_results())}
    wall1 = rows["generate() b1, t=1 top-k 50, wall"]
    assert wall1.target == ">= 4000" and wall1.verdict() == "met"  # 0.9 * 0.9 * 5000 = 4050
    assert rows["generate() b8, t=1 top-k 50, wall"].verdict() == "MISSED"  # 16,200 < 20,000
    vs = rows["generate() b8, t=1 top-k 50, wall, against transformers"]
    assert vs.target == "peer_x>= 8" and vs.verdict() == "met"  # 16,200 >= 8 x 2,000
    skipped = rows["generate() b64, t=1 top-k 50, wall, against transformers"]
    assert skipped.target == "" and "skipped" in skipped.note
    r1 = rows["generate() b1, t=0.8 top-p 0.95: decode rate / greedy's"]
    assert r1.target == "ratio>= 0.85" and r1.verdict() == "met"
    r8 = rows["generate() b8, repetition 1.2: decode rate / greedy's"]
    assert r8.target == "ratio>= 0.95" and r8.verdict() == "MISSED"
    pre = rows["generate() prefill of 64 prompts x 128 tokens"]
    assert pre.target == "<= 20.0" and pre.verdict() == "met"
    k = rows["generate() b1 greedy decode / the runner's greedy stream"]
    assert k.verdict() == "met"  # 5000 / 5100 = 0.98


def test_markdown_has_the_table():
    g = _results()
    r = {"ceilings": {"copy_TBps": 4.0, "sgemm_fp32_TFLOPs": 50.0, "gemm_tf32_TFLOPs": 400.0}, "generate": g}
    md = bench.markdown(r, bench.make_rows(r))
    assert "| 1 | t=1 top-k 50 | 4,050 | 4,500 | 3.0 | 128 | 130 | 31.2x |" in md
    assert "skipped: too long" in md
    assert "ratio>= 0.95 | MISSED" in md


def test_greedy_stream_rate_feeds_each_rows_argmax_and_times_the_steps():
    """bench._greedy_stream_rate (the decode rows and generate's runner comparison) on a stand-in runner: each
    row's first token is the argmax of its prefill logits, the stream runs `steps` steps, tokens/s is
    batch * steps over the median loop time."""
    import types

    fed = []

    class Cache:
        def reset(self):
            pass

    class Runner:
        def new_cache(self, batch):
            return Cache()

        def prefill(self, cache, row, ids):
            logits = np.zeros(7, np.float32)
            logits[(row + len(ids)) % 7] = 1.0
            return logits

        def greedy_steps(self, cache, tok, max_steps):
            fed.append(np.asarray(tok).tolist())
            for _ in range(max_steps):
                yield tok

    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
    rate = bench._greedy_stream_rate(torch, Runner(), [np.arange(3), np.arange(5)], steps=4, reps=3)
    assert fed == [[3, 6]] * 5  # 2 warm-up runs + 3 timed
    assert rate > 0 and np.isfinite(rate)

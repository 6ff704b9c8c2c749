#!/usr/bin/env python3
"""What generate() makes through the Python API, greedy against sampled, on a random gpt2 checkpoint.

python3 dev/generate_rate.py [--batches 1,8,64] [--prompt-len 128] [--new 128] [--precision fp32]

For each batch B: B prompts of about --prompt-len tokens (random ids, decoded, re-encoded and cut), --new tokens each, through
gpt2block.load(DIR, backend="cuda").generate(...), greedy (t=0) and the CLI default (t=1, top-k 50);
prints wall tok/s, prefill ms and decode tok/s (median of 3 after a warm-up). Needs a GPU, CuPy, torch and
transformers (to write the checkpoint); about a minute.
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gpt2block  # noqa: E402
from hf_checkpoints import make_hf_checkpoint  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--precision", default="fp32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ckpt = make_hf_checkpoint(Path(d) / "gpt2", 12, 768, 12, vocab_size=50257, n_positions=1024, seed=0)
        model = gpt2block.load(str(ckpt.path), backend="cuda", precision=a.precision)
        rng = np.random.default_rng(0)
        print(f"{'B':>4} {'mode':>14} {'wall tok/s':>11} {'prefill ms':>11} {'decode tok/s':>13}")
        for b in map(int, a.batches.split(",")):
            # random ids decoded, re-encoded and cut: texts of about --prompt-len tokens
            prompts = [model.tokenizer.decode(model.tokenizer.encode(model.tokenizer.decode(
                [int(t) for t in rng.integers(0, 50000, a.prompt_len)]))[:a.prompt_len]) for _ in range(b)]
            for mode, kw in (("greedy", dict(temperature=0)), ("t=1 top-k 50", dict(temperature=1.0, top_k=50))):
                rows = []
                for rep in range(4):
                    out = model.generate(prompts, a.new, seed=rep, **kw)
                    t = out[0].timing
                    rows.append((t.new_tokens / t.wall_s, t.prefill_ms, t.decode_tokens_per_s))
                w, p, dec = (statistics.median(x) for x in zip(*rows[1:]))
                print(f"{b:>4} {mode:>14} {w:>11,.0f} {p:>11.1f} {dec:>13,.0f}", flush=True)


if __name__ == "__main__":
    main()

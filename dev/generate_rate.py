#!/usr/bin/env python3
"""What generate() makes through the Python API, greedy against sampled, on a random gpt2 checkpoint.

python3 dev/generate_rate.py [--batches 1,8,64] [--prompt-len 128] [--new 128] [--precision fp32]

For each batch B: B prompts of exactly --prompt-len tokens (random ASCII letters from a fixed seed, each one
token of bench.byte_tokenizer, which the checkpoint carries), --new tokens each, through
gpt2block.load(DIR, backend="cuda").generate(...), in each of bench.GENERATE_MODES (greedy, t=1 top-k 50,
t=0.8 top-p 0.95, repetition penalty 1.2); prints wall tok/s, prefill ms, decode tok/s (median of 3 after a
warm-up) and each sampled mode's decode rate over greedy's. Needs a GPU, CuPy, torch and transformers (to
write the checkpoint); about a minute. (Until this version the prompts were random ids of the whole
vocabulary decoded by the tests' small tokenizer: most were filler entries, ~900 tokens a prompt.)
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gpt2block  # noqa: E402
from gpt2block.bench import GENERATE_MODES, byte_tokenizer, generate_prompts  # noqa: E402
from hf_checkpoints import make_hf_checkpoint  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--precision", default="fp32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ckpt = make_hf_checkpoint(Path(d) / "gpt2", 12, 768, 12, vocab_size=50257, n_positions=1024, seed=0,
                                  tokenizer=None)
        byte_tokenizer(50257).save(str(Path(ckpt.path) / "tokenizer.json"))
        model = gpt2block.load(str(ckpt.path), backend="cuda", precision=a.precision)
        print(f"{'B':>4} {'mode':>17} {'wall tok/s':>11} {'prefill ms':>11} {'decode tok/s':>13} {'/ greedy':>9}")
        for b in map(int, a.batches.split(",")):
            ids = generate_prompts(b, a.prompt_len)
            prompts = [model.tokenizer.decode(x) for x in ids]
            assert all(len(model.tokenizer.encode(p)) == a.prompt_len for p in prompts)
            greedy = None
            for mode, kw in GENERATE_MODES.items():
                rows = []
                for rep in range(4):
                    out = model.generate(prompts, a.new, seed=rep, **kw)
                    t = out[0].timing
                    rows.append((t.new_tokens / t.wall_s, t.prefill_ms, t.decode_tokens_per_s))
                w, p, dec = (statistics.median(x) for x in zip(*rows[1:]))
                greedy = dec if mode == "greedy" else greedy
                print(f"{b:>4} {mode:>17} {w:>11,.0f} {p:>11.1f} {dec:>13,.0f} {dec / greedy:>9.3f}", flush=True)


if __name__ == "__main__":
    main()

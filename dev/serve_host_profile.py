"""The server's host ceiling: `gpt2block serve`'s engine and HTTP side over a stub runner whose decode step takes
--step-ms of sleep (no model, no GPU), so that what limits tokens/s and latency is Python: the engine loop's
per-row work, the sampler batch, detokenization, the event loop's SSE. Drive it with scripts/bench_serve.py --url.

    python dev/serve_host_profile.py --tokenizer T.json --port 8123 --step-ms 1.0 [--profile out.prof] &
    python scripts/bench_serve.py --url http://127.0.0.1:8123 --model M --no-offline --concurrency 64

M: any checkpoint with GPT-2's tokenizer (bench_serve reads the tokenizer from it). --profile: cProfile of the
engine thread, written when the server exits (SIGTERM).
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpt2block.backends.base import Cache, Runner  # noqa: E402
from gpt2block.config import GPT2Config  # noqa: E402
from gpt2block.engine import Limits  # noqa: E402
from gpt2block.sampler import SampleOutput  # noqa: E402
from gpt2block.server import serve  # noqa: E402
from gpt2block.tokenizer import Tokenizer  # noqa: E402


class StubRunner(Runner):
    backend, precision = "stub", "fp32"

    def __init__(self, config, step_s):
        self.config, self.step_s = config, step_s
        self.rng = np.random.default_rng(0)

    def new_cache(self, batch):
        return Cache(batch, self.config.n_ctx)

    def prefill(self, cache, row, ids, all_logits=False):
        cache.pos[row] += len(ids)
        return np.zeros((len(ids), self.config.vocab_size), np.float32) if all_logits else \
            np.zeros(self.config.vocab_size, np.float32)

    def decode(self, cache, tokens):
        raise NotImplementedError

    def sample_logits(self, logits, batch, positions):  # a device backend's first token: no host sampler
        return SampleOutput(self.rng.integers(0, 50000, batch.batch), None, None, None)

    def sample_rows(self, cache, rows, tokens, batch):
        time.sleep(self.step_s)
        cache.pos[list(rows)] += 1
        ids = self.rng.integers(0, 50000, len(rows))  # never <|endoftext|>
        return SampleOutput(ids, np.zeros(len(rows), np.float32) if batch.logprobs else None, None, None)


class StubModel:
    def __init__(self, tokenizer, step_s):
        self.config = GPT2Config(n_layer=1, n_embd=64, n_head=1, vocab_size=tokenizer.vocab_size, n_positions=1024)
        self.tokenizer = tokenizer
        self.runner = StubRunner(self.config, step_s)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="a GPT-2 tokenizer.json")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    prof = cProfile.Profile() if args.profile else None

    def load():
        if prof is not None:
            prof.enable()  # the engine thread: load runs on it, and so does every step after
        return StubModel(tok, args.step_ms / 1e3)

    status = serve(load, "bench", "127.0.0.1", args.port, Limits(max_batch=args.max_batch), log_level="warning")
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    return status


if __name__ == "__main__":
    sys.exit(main())

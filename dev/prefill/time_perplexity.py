#!/usr/bin/env python3
"""Perplexity of a long token sequence: gpt2block on the CUDA backend (model.perplexity, the windows in
packed passes, the log-softmax on the device) against transformers' perplexity guide loop on the same
random checkpoint of gpt2's shape, in the same process, on the same GPU.

    python dev/prefill/time_perplexity.py [--tokens 20828] [--max-length 1024] [--stride 512] [--runs 3]

Prints both values, their relative difference and the median wall time of --runs calls of each after one
warm-up call (torch's TF32 matmuls off, as transformers leaves them: fp32 both).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import gpt2block  # noqa: E402


def timed(fn, runs: int):
    fn()
    ts, val = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        val = fn()
        ts.append(time.perf_counter() - t0)
    return val, statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=20828)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch
    from hf_checkpoints import make_hf_checkpoint
    from test_perplexity import guide_perplexity

    torch.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_hf_checkpoint(Path(tmp) / "ckpt", 12, 768, 12, vocab_size=50257, n_positions=1024, seed=11)
        model = gpt2block.load(str(ckpt.path), backend="cuda")
    hf = ckpt.model.cuda()
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 50257, args.tokens)]

    def guide():
        v = guide_perplexity(hf, ids, args.max_length, args.stride, device="cuda")
        torch.cuda.synchronize()
        return v

    ours, t_ours = timed(lambda: model.perplexity(ids, args.max_length, args.stride).ppl, args.runs)
    ref, t_ref = timed(guide, args.runs)
    row = {"tokens": args.tokens, "max_length": args.max_length, "stride": args.stride, "ppl_ours": ours,
           "ppl_guide": ref, "rel_diff": abs(ours - ref) / ref, "ours_s": round(t_ours, 4), "guide_s": round(t_ref, 4),
           "ratio": round(t_ours / t_ref, 3)}
    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The packed prefill's error figures on one random checkpoint of gpt2's shape: each row's last logits from
CudaRunner.prefill_batch against the same prompt prefilled alone and against transformers (fp32 on the GPU,
TF32 off), for rows of 1, 2, 127, 128, 129, 1000 tokens mixed, per precision.

    python dev/prefill/check_prefill_errors.py [--out FILE.json]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from gpt2block.backends import make_runner  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch
    from hf_checkpoints import make_hf_checkpoint
    from gpt2block.checkpoint import load_weights

    torch.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_hf_checkpoint(Path(tmp) / "ckpt", 12, 768, 12, vocab_size=50257, n_positions=1024, seed=3)
        weights = load_weights(ckpt.path)
    hf = ckpt.model.cuda()
    rng = np.random.default_rng(0)
    lengths = [129, 1, 1000, 2, 128, 127]
    prompts = [rng.integers(0, 50257, n) for n in lengths]
    with torch.no_grad():
        ref = np.stack([hf(torch.tensor(p, device="cuda")[None]).logits[0, -1].double().cpu().numpy() for p in prompts])
    rows = []
    for precision in ("fp32", "bf16", "tf32"):
        runner = make_runner(weights, "cuda", precision)
        got = runner.prefill_batch(runner.new_cache(8), [5, 0, 3, 7, 1, 6], prompts).astype(np.float64)
        alone = np.stack([runner.prefill(runner.new_cache(1), 0, p) for p in prompts]).astype(np.float64)
        row = {"precision": precision, "lengths": lengths,
               "max_abs_packed_vs_alone": float(np.abs(got - alone).max()),
               "max_abs_packed_vs_transformers": float(np.abs(got - ref).max()),
               "max_abs_alone_vs_transformers": float(np.abs(alone - ref).max()),
               "logit_scale": float(np.abs(ref).max())}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

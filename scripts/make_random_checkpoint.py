#!/usr/bin/env python3
"""Write a random GPT-2 checkpoint in the Hugging Face format (needs torch + transformers).

    python scripts/make_random_checkpoint.py SIZE OUT_DIR [--layers N] [--seed S]

SIZE is one of gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2 (their shapes;
--layers keeps the width and changes the depth). Every parameter is drawn fresh
(matrices and embeddings N(0, 0.02), biases N(0, 0.02), LayerNorm gains 1 + N(0, 0.1),
LayerNorm biases N(0, 0.05)), so no weight is a trivial 1 or 0. The model is written
with GPT2LMHeadModel.save_pretrained; the GPT-2 tokenizer files are copied from
--tokenizer-dir (default: ../shared/gpt2 next to the checkout) when they are there.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpt2block.config import SIZES  # noqa: E402
from gpt2block.weights import randomize_hf_model  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", choices=sorted(SIZES))
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--layers", type=int, default=None, help="number of blocks (default: the size's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", type=Path, default=REPO.parent / "shared" / "gpt2")
    args = ap.parse_args(argv)
    if args.layers is not None and args.layers < 1:
        ap.error(f"--layers must be >= 1; got {args.layers}")
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        ap.error(f"this script needs torch and transformers ({e})")

    size = SIZES[args.size]
    cfg = transformers.GPT2Config(n_layer=args.layers or size.n_layer, n_embd=size.n_embd, n_head=size.n_head,
                                  n_positions=size.n_positions, vocab_size=size.vocab_size)
    model = transformers.GPT2LMHeadModel(cfg)
    randomize_hf_model(model, args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out_dir)
    copied = [f for f in TOKENIZER_FILES if (args.tokenizer_dir / f).is_file()]
    for f in copied:
        shutil.copyfile(args.tokenizer_dir / f, args.out_dir / f)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.out_dir}: random {args.size} ({cfg.n_layer} layers, {n_params / 1e6:.1f}M parameters, "
          f"seed {args.seed})")
    if not copied:
        print(f"warning: no tokenizer files in {args.tokenizer_dir}; copy tokenizer.json (or vocab.json + "
              f"merges.txt) into {args.out_dir} before loading it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

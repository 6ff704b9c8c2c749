#!/usr/bin/env python3
"""solve() in tf32 with and without the split-K wgmma tiles, in one process (GPU):

    python dev/tune_split_k.py [--rounds 2]

For each configuration the tile favoured for tf32's split-K candidates (the others priced out) and
linear.WG_SPLIT_MIN_K are set, solve()'s graphs dropped, and the kernel times per call
(torch.profiler, as profile_prefill.py) and the back-to-back wall time printed; every replay is
checked bit-equal to the eager call before it.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import gpt2block  # noqa: E402
from gpt2block.backends.cuda import solve as cuda  # noqa: E402
from gpt2block.backends.cuda import linear as L  # noqa: E402
from gpt2block.layout import block_layout  # noqa: E402
from profile_prefill import profile  # noqa: E402

# (tile label favoured among the split-K tiles, or "none"; WG_SPLIT_MIN_K)
CONFIGS = (("none", 1024), ("128x192/3", 1024), ("128x192/3", 256))


def favour(base: dict, label: str) -> None:
    """WG_TILES with split-K tile `label` priced in (speed 5) and the other split-K tiles out."""
    L.WG_TILES.clear()
    L.WG_TILES.update({v: tuple(dataclasses.replace(t, speed=5.0 if t.label == label else 0.01)
                                if t.splitk > 1 else t for t in ts) for v, ts in base.items()})
    cuda.clear_solve_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    s = 1024
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(s, 768, device="cuda", generator=gen) * 2 - 1
    w = torch.randn(block_layout(768).numel, device="cuda", generator=gen) * 0.02
    out = torch.empty_like(x)
    base, min_k = dict(L.WG_TILES), L.WG_SPLIT_MIN_K
    try:
        for _ in range(a.rounds):
            for label, mk in CONFIGS:
                favour(base, label)
                L.WG_SPLIT_MIN_K = mk
                picks = " ".join(f"{n} {L.pick_wg_tile('tf32', s, nn, k=k).label}"
                                 for n, k, nn in (("proj", 768, 768), ("mlp", 3072, 768)))
                print(f"== {label}, WG_SPLIT_MIN_K {mk}: {picks}", flush=True)
                lines = profile(lambda: gpt2block.solve(x, out, w, s, precision="tf32"), 10)
                print("\n".join(ln for ln in lines if "residual" in ln or "in all" in ln or "wall" in ln), flush=True)
                torch.cuda.synchronize()
                got = out.clone()
                gpt2block.solve(x, out, w, s, precision="tf32")
                torch.cuda.synchronize()
                if not torch.equal(got, out):
                    print("   replay bits differ", flush=True)
                    return 1
    finally:
        L.WG_TILES.clear()
        L.WG_TILES.update(base)
        L.WG_SPLIT_MIN_K = min_k
        cuda.clear_solve_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

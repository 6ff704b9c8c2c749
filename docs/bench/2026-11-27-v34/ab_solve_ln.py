"""Version 34: solve() (seq 1024) and the gpt2 prefill with the LayerNorm's two warp sums (LN_STATS_TWO_SUMS 1)
against three (0), in one process (visit 5's benchmark had solve tf32 at 0.180 ms against 0.164 in version 30's).
solve's graphs are keyed without LN_DEFINES, so they are dropped at each switch. bench_solve / bench_prefill as
the benchmark calls them (20 reps); solve three rounds, prefill one."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from gpt2block import bench  # noqa: E402
from gpt2block.backends import cuda, cuda_ops  # noqa: E402

for rnd in range(3):
    for two in (0, 1):
        cuda_ops.LN_DEFINES = (("LN_STATS_TWO_SUMS", two),)
        cuda._solve_graphs.clear()
        r = bench.bench_solve(torch, [1024], 20)[0]
        print(f"round {rnd} two sums {two}: solve 1024 fp32 {r['ours_fp32_ms']:.3f} ms (torch {r['torch_fp32_ms']:.3f}), "
              f"tf32 {r['ours_tf32_ms']:.3f} ms (torch {r['torch_tf32_ms']:.3f}), err fp32 {r['ours_fp32_err']:.2g}",
              flush=True)
for two in (0, 1):
    cuda_ops.LN_DEFINES = (("LN_STATS_TWO_SUMS", two),)
    p = bench.bench_prefill(torch, 20)
    print(f"two sums {two}: prefill 1024 all logits {p['ours_all_logits_ms']:.3f} ms (transformers {p['hf_sdpa_ms']:.3f}), "
          f"max |logit diff| {p['max_logit_diff_vs_hf']:.2g}", flush=True)
cuda_ops.LN_DEFINES = ()

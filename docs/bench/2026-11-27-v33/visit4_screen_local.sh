#!/usr/bin/env bash
# Version 33, GPU visit 4: the screened LM head in one kernel, local candidates against the running largest lb: its tests,
# the A/B against version 32's two kernels (ab_screen_local.py), then the bf16 step's timeline.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
D=docs/bench/2026-11-27-v33
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_lm_screen.py -k "not table" 2>&1 | tail -n 4 | tee "$OUT/visit4_tests_screen.txt"
timeout 150 python3 $D/ab_screen_local.py gpt2 2>&1 | grep -v Warn | tee "$OUT/visit4_ab_screen_local.txt"
timeout 90 python3 - <<'PY' 2>&1 | grep -v -i warn > "$OUT/visit4_timeline.txt"
from gpt2block.backends import make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.timeline_decode import run_case
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
print("\n".join(run_case(r, 1, 64)))
PY
tail -n 4 "$OUT/visit4_timeline.txt"

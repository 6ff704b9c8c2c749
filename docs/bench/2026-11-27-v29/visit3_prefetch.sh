#!/usr/bin/env bash
# Version 29, GPU visit 3: the screen with its next row group's loads in flight under the current sums
# (LM_SCREEN_PREFETCH=1), A/B against the committed screen; the screen tests under each prefetch build.
# Predicted: the screen's span (14.2 us on the H200) loses 1-3 us: bf16 b1 +1-2%, fp32 b1 about the same.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
D=docs/bench/2026-11-27-v29
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 $D/ab_prefetch.py > "$OUT/ab_prefetch.txt" 2>&1; cat "$OUT/ab_prefetch.txt"
i=0
for v in "(('LM_SCREEN_PREFETCH', 1), ('LM_SCREEN_ROWS', 4))" "(('LM_SCREEN_PREFETCH', 1), ('LM_SCREEN_MIN_BLOCKS', 1))"; do
  i=$((i + 1))
  echo "== tests with SCREEN_DEFINES = $v"
  python3 -c "import sys, pytest; from gpt2block.backends import cuda_linear as L; L.SCREEN_DEFINES = $v; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/gpu/test_lm_screen.py', '-k', 'equals_full_head or underflow or h_out']))" > "$OUT/tests_prefetch$i.txt" 2>&1
  tail -n 1 "$OUT/tests_prefetch$i.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_prefetch$i.txt" | head -5
done

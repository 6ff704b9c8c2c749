#!/usr/bin/env bash
# Version 29, GPU visit 1: the screen in its own module (kernels/lm_screen.cu, one build a width) and its
# table made by a kernel. A first run with CuPy's cache empty (fp32, then bf16 in another empty cache),
# then a warm one; the screen's tests (table bit for bit against NumPy, every J); one A/B round.
# Predicted: gemv.cu back to about 13 s, lm_screen.cu about 2 s, no CuPy elementwise kernels for the
# table (-4.7 s): the cold fp32 run about 25 s (was 34.6); tok/s as version 28's (the same kernel code).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 scripts/make_random_checkpoint.py gpt2 /tmp/ck --tokenizer-dir .tok > /dev/null 2>&1 || echo "checkpoint failed"
GEN='python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 "The H200 is"'
{ echo "# CUPY_CACHE_DIR empty, then again: time $GEN [--precision bf16]"
  export CUPY_CACHE_DIR=$(mktemp -d)
  echo "## cold fp32"; ( time eval "$GEN" ) 2>&1
  echo "## warm fp32"; ( time eval "$GEN" ) 2>&1
  export CUPY_CACHE_DIR=$(mktemp -d)
  echo "## cold bf16 (another empty cache)"; ( time eval "$GEN --precision bf16" ) 2>&1
  echo "## warm bf16"; ( time eval "$GEN --precision bf16" ) 2>&1
} > "$OUT/start-up.log" 2>&1
grep -E "^##|real|compiled|tokens in" "$OUT/start-up.log"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lm_screen.py > "$OUT/tests_screen.txt" 2>&1
tail -n 2 "$OUT/tests_screen.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_screen.txt" | head -20
python3 docs/bench/2026-11-26-v28/ab_screen.py 2 > "$OUT/ab_screen.txt" 2>&1; tail -n 12 "$OUT/ab_screen.txt"

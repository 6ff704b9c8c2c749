#!/usr/bin/env bash
# Version 29, GPU visit 2: gemv.cu built by token count (GEMV_BUILD_MP: 1, 2, 4, 8, or 0 for the k-major
# kernels) on top of visit 1's lm_screen.cu. A first run with CuPy's cache empty (fp32, then bf16 in another
# empty cache) and warm ones; then the whole GPU suite and the SASS-order tests on this code.
# Predicted: gemv.cu's builds 14.5 s (fp32) and 15.0 + 16.8 s (bf16) in visit 1 -> about 3 + 4 s in each;
# cold runs about 20 s (fp32, was 25.9) and 21 s (bf16, was 45.2).
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
python3 -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/gpu > "$OUT/gpu_suite.txt" 2>&1
tail -n 2 "$OUT/gpu_suite.txt"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -20
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass.txt" 2>&1; tail -n 1 "$OUT/sass.txt"

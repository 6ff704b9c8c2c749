#!/usr/bin/env bash
# Version 36, GPU visit 9: the start-up (generate's summary, CuPy's cache empty then warm, fp32 and bf16; bf16 now
# also builds decode_cluster.cu) and the SASS-order test.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 scripts/make_random_checkpoint.py gpt2 /tmp/ck --tokenizer-dir .tok > /dev/null 2>&1 || echo "checkpoint failed"
GEN='python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 "The H200 is"'
{ echo "# CUPY_CACHE_DIR empty, then again: time $GEN [--precision bf16]"
  export CUPY_CACHE_DIR=$(mktemp -d)
  echo "## cold fp32"; ( time eval "$GEN" ) 2>&1
  echo "## warm fp32"; ( time eval "$GEN" ) 2>&1
  export CUPY_CACHE_DIR=$(mktemp -d)
  echo "## cold bf16 (another empty cache)"; ( time eval "$GEN --precision bf16" ) 2>&1
  echo "## warm bf16"; ( time eval "$GEN --precision bf16" ) 2>&1
} > "$OUT/visit9_start-up.log" 2>&1
grep -E "^##|real|first token" "$OUT/visit9_start-up.log"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py 2>&1 | tail -n 2 | tee "$OUT/visit9_sass.txt"

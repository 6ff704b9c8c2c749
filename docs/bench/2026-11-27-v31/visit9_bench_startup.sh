#!/usr/bin/env bash
# Version 31, GPU visit 9: the code is version 30's (every experiment of this version dropped). The start-up with
# generate's summary line (version 30's first_token_s, load_s, setup_s), fp32 and bf16, CuPy's cache empty then
# warm, to read the first-token item off it; then the benchmark's decode rows on this H200.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench_decode"
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
grep -E "^##|real|first token|tok/s" "$OUT/start-up.log"
python3 scripts/bench.py --out "$OUT/bench_decode" --sections ceilings,layernorm,decode > "$OUT/bench_decode/bench_log.txt" 2>&1
tail -n 14 "$OUT/bench_decode/bench_log.txt"

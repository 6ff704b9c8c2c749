#!/usr/bin/env bash
# Version 26, GPU visit 5: a first run with CuPy's cache empty (start-up, compile progress) and a second
# one (the cache), on a random gpt2 checkpoint; then the benchmark's decode and LayerNorm rows.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench"
python3 scripts/make_random_checkpoint.py gpt2 /tmp/ck --tokenizer-dir .tok > /dev/null 2>&1 || echo "checkpoint failed"
{ echo "# CUPY_CACHE_DIR empty, then again: time python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 \"The H200 is\""
  export CUPY_CACHE_DIR=$(mktemp -d)
  for run in cold warm; do echo "## $run"; ( time python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 "The H200 is" ) 2>&1; done
  echo "## warm, bf16"; ( time python3 -m gpt2block generate --backend cuda --precision bf16 -m /tmp/ck -n 24 -t 0 "The H200 is" ) 2>&1
} > "$OUT/start-up.log" 2>&1
cat "$OUT/start-up.log"
python3 scripts/bench.py --out "$OUT/bench" --sections ceilings,layernorm,decode,decode_xl > "$OUT/bench/bench_log.txt" 2>&1
tail -n 8 "$OUT/bench/bench_log.txt"

#!/usr/bin/env bash
# Version 30, GPU visits 5 and 6: version 29's code (the kernels unchanged since version 28) on an H200, the
# card the targets were set on; version 29 measured only on an H100.
#   bash visit5_bench.sh decode    ceilings, LayerNorm, decode, decode_xl
#   bash visit5_bench.sh rest      ceilings, solve, prefill; then the start-up (CuPy's cache empty, then warm)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench_$1"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
case "$1" in
  decode) S=ceilings,layernorm,decode,decode_xl ;;
  rest) S=ceilings,solve,prefill ;;
  *) echo "part: decode or rest"; exit 2 ;;
esac
python3 scripts/bench.py --out "$OUT/bench_$1" --sections $S > "$OUT/bench_$1/bench_log.txt" 2>&1
tail -n 12 "$OUT/bench_$1/bench_log.txt"
[ "$1" = rest ] || exit 0
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

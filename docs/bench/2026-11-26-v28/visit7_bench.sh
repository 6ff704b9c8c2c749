#!/usr/bin/env bash
# Version 28, GPU visit 7: the benchmark's ceilings, LayerNorm and decode rows on the final code.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench"
python3 scripts/bench.py --out "$OUT/bench" --sections ceilings,layernorm,decode,decode_xl > "$OUT/bench/bench_log.txt" 2>&1
tail -n 14 "$OUT/bench/bench_log.txt"

#!/usr/bin/env bash
# Version 28, GPU visit 3: traces of the full and the staged screened head; stages and carveout A/B.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 > "$OUT/trace_staged8.txt" 2>&1
python3 -c "import runpy,sys; from gpt2block.backends import cuda_linear; cuda_linear.SCREEN_STAGES_MAX=1; sys.argv=['t','gpt2','--cases','bf16:1']; runpy.run_path('scripts/trace_decode_step.py', run_name='__main__')" > "$OUT/trace_staged1.txt" 2>&1
python3 -c "import runpy,sys; from gpt2block.backends import cuda; cuda.SCREEN_HEAD=False; sys.argv=['t','gpt2','--cases','bf16:1']; runpy.run_path('scripts/trace_decode_step.py', run_name='__main__')" > "$OUT/trace_full.txt" 2>&1
for f in trace_full trace_staged8 trace_staged1; do echo "== $f"; grep -v "^   grid .*x12\b" "$OUT/$f.txt" | tail -n 14 | cut -c1-330; done
python3 $D/ab_stages.py > "$OUT/ab_stages.txt" 2>&1; cat "$OUT/ab_stages.txt"

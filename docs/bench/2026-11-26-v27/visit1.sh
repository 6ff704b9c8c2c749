#!/usr/bin/env bash
# Version 27, GPU visit 1: the L2-ahead tests, the SASS order check, its A/B and two traces.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v27
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py tests/test_kernels_compile.py > "$OUT/sass_order.txt" 2>&1; tail -n 3 "$OUT/sass_order.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py tests/gpu/test_model_cuda.py -k "kv or ahead or programmatic or greedy" > "$OUT/tests_ahead.txt" 2>&1
tail -n 3 "$OUT/tests_ahead.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_ahead.txt" | head -20
python3 $D/ab_ahead.py > "$OUT/ab_ahead.txt" 2>&1; cat "$OUT/ab_ahead.txt"
python3 -c "import runpy,sys; from gpt2block.backends import cuda; cuda.LM_L2_AHEAD_BYTES['bf16']=0; sys.argv=['t','gpt2','--cases','bf16:1']; runpy.run_path('scripts/trace_decode_step.py', run_name='__main__')" > "$OUT/trace_ahead0.txt" 2>&1
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 > "$OUT/trace_ahead40.txt" 2>&1
tail -n 30 "$OUT/trace_ahead0.txt" | cut -c1-250; tail -n 30 "$OUT/trace_ahead40.txt" | cut -c1-250

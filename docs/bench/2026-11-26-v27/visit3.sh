#!/usr/bin/env bash
# Version 27, GPU visit 3: proj_fc with the warp sums broadcast before they are pushed (the first run's
# FC outputs were wrong at four Wf rows a warp), its tests again; a trace of the grid-64 build that runs.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_proj_fc.py > "$OUT/tests_proj_fc.txt" 2>&1
tail -n 3 "$OUT/tests_proj_fc.txt"; grep -E "^(FAILED|ERROR)|error vs fp64|x1 error" "$OUT/tests_proj_fc.txt" | head -30
timeout 150 python3 -c "import runpy,sys; from gpt2block.backends import cuda_proj_fc as P; P.PROJ_FC_BY_WIDTH[768]=(16, 12, 64, 1); sys.argv=['t','gpt2','--cases','bf16:1']; runpy.run_path('scripts/trace_decode_step.py', run_name='__main__')" > "$OUT/trace_proj_fc64.txt" 2>&1
tail -n 12 "$OUT/trace_proj_fc64.txt" | cut -c1-330

#!/usr/bin/env bash
# Version 30, GPU visit 3 (H200, commit bc79a01, visit 2's fold): the stamped step, 12 steps, of both builds,
# kernel by kernel (trace_steps.py). The records were too large to bring back; visit3_trace_steps.txt holds the
# printed table. As run (the command given to the device, unchanged):
export PYTHONPATH=$PWD; for f in on off; do python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --fold $f --steps 12 --save $OUT/rec_$f > $OUT/trace12_$f.txt 2>&1; done; nvidia-smi --query-gpu=name --format=csv,noheader; python3 docs/bench/2026-11-27-v30/trace_steps.py $OUT/rec_on_bf16_b1.npy $OUT/rec_off_bf16_b1.npy

# Visit 1: the A/B of the head's embedding, its timeline, then the GPU tests it touches.
set -x
D=docs/bench/2026-11-27-v34
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee $OUT/visit1_gpu.txt
PYTHONPATH=. python3 $D/ab_embed.py 2>&1 | tee $OUT/visit1_ab_embed.txt
PYTHONPATH=. python3 scripts/timeline_decode.py gpt2 --cases bf16:1 --steps 64 2>&1 | grep -v Warning | tee $OUT/visit1_timeline.txt
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_embed_next.py tests/gpu/test_lm_screen.py \
  tests/gpu/test_linear.py -k "embed or screen or argmax" 2>&1 | tail -15 | tee $OUT/visit1_tests_heads.txt
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py -k "greedy or argmax or programmatic or graph" \
  2>&1 | tail -15 | tee $OUT/visit1_tests_model.txt

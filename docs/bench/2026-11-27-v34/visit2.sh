# Visit 2: the A/Bs of the L2 prefetches (LayerNorm, screen), then their kernels' GPU tests.
set -x
D=docs/bench/2026-11-27-v34
PYTHONPATH=. python3 $D/ab_prefetch.py 2>&1 | grep -v Warn | tee $OUT/visit2_ab_prefetch.txt
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lm_screen.py tests/gpu/test_model_cuda.py -k "screen or layernorm" \
  2>&1 | tail -5 | tee $OUT/visit2_tests.txt

# Visit 3: the LayerNorm's statistics in two warp sums: A/B and errors, then the LayerNorm and solve GPU tests.
set -x
D=docs/bench/2026-11-27-v34
PYTHONPATH=. python3 $D/ab_ln_sums.py 2>&1 | grep -v Warn | tee $OUT/visit3_ab_ln_sums.txt
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py -k "layernorm" 2>&1 | tail -3 | tee $OUT/visit3_tests_ln.txt

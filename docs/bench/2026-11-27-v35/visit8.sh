# Version 35, visit 8: each warp's own LayerNorm in registers (DC_LN_WARP 1) against the block's: tests, A/B, trace.
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -3 | tee $OUT/visit8_tests_cluster.txt
timeout 200 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_defines.py "ln warp" "ln block:DC_LN_WARP=0" chain 2>&1 | tail -10 | tee $OUT/visit8_ab_ln.txt
timeout 100 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/trace_cluster.py 2>&1 | tail -34 | tee $OUT/visit8_trace.txt

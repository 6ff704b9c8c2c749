# Version 35, visit 10: each slot's refill issued just after a grid arrival (DC_FETCH_AFTER_ARRIVE 1) against as
# soon as the slot is free (0, visit 7's): tests, A/B, trace.
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -3 | tee $OUT/visit10_tests_cluster.txt
timeout 200 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_defines.py "after arrive" "when free:DC_FETCH_AFTER_ARRIVE=0" chain 2>&1 | tail -10 | tee $OUT/visit10_ab_fetch.txt
timeout 100 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/trace_cluster.py 2>&1 | tail -34 | tee $OUT/visit10_trace.txt

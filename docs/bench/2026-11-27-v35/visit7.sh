# Version 35, visit 7: float partials again behind the grid counter, the first key fetched early: tests, A/B, trace.
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -3 | tee $OUT/visit7_tests_cluster.txt
timeout 150 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_cluster.py 2>&1 | tail -14 | tee $OUT/visit7_ab_cluster.txt
timeout 100 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/trace_cluster.py 2>&1 | tail -30 | tee $OUT/visit7_trace.txt

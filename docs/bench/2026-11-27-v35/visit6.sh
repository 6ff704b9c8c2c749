# Version 35, visit 6: the counter build's partials weak / relaxed, warps arriving alone, no early key; trace.
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -3 | tee $OUT/visit6_tests_cluster.txt
timeout 200 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_handoff.py visit6 2>&1 | tail -16 | tee $OUT/visit6_ab_handoff.txt
timeout 100 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/trace_cluster.py 2>&1 | tail -30 | tee $OUT/visit6_trace.txt

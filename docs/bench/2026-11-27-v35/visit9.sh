# Version 35, visit 9: the weight copies issued by thread 32, not by thread 0 that releases the arrivals: tests, A/B, trace.
cd "$(dirname "$0")/../../.."
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -3 | tee $OUT/visit9_tests_cluster.txt
timeout 200 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_defines.py "producer 32" "producer 0:DC_PRODUCER=0" chain 2>&1 | tail -10 | tee $OUT/visit9_ab_producer.txt
timeout 100 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/trace_cluster.py 2>&1 | tail -34 | tee $OUT/visit9_trace.txt

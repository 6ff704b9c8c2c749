# Version 35, visit 4: the cluster kernel with flagged global handoffs (no counter), the x write after a
# block barrier, the first key fetched early: its GPU tests, the race hunt again, its rate.
cd "$(dirname "$0")/../../.."
timeout 300 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | grep -v "^$" | tail -25 | tee $OUT/visit4_tests_cluster.txt
timeout 120 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/diag_race.py 1024 2>&1 | tail -8 | tee $OUT/visit4_diag_race.txt
timeout 150 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_cluster.py 2>&1 | tail -14 | tee $OUT/visit4_ab_cluster.txt

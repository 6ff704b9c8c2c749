# Version 35, visit 1: the cluster kernel's GPU tests, then its rate against the five-kernel chain.
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 400 python3 -m pytest -q -s -p no:cacheprovider -x tests/gpu/test_decode_cluster.py 2>&1 | tail -30 | tee $OUT/visit1_tests_cluster.txt
timeout 150 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/ab_cluster.py 2>&1 | tail -30 | tee $OUT/visit1_ab_cluster.txt

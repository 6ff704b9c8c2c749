# Version 35, visit 2: where the cluster step departs at long lengths; the same under compute-sanitizer.
cd "$(dirname "$0")/../../.."
timeout 200 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/diag_long.py 2>&1 | tail -20 | tee $OUT/visit2_diag_long.txt
timeout 200 env PYTHONPATH=. /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 docs/bench/2026-11-27-v35/diag_long.py 1024 2>&1 | tail -30 | tee $OUT/visit2_memcheck.txt

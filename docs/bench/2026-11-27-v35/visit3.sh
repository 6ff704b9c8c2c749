# Version 35, visit 3: the cluster step's departures at length 1024, by variant.
cd "$(dirname "$0")/../../.."
timeout 300 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/diag_race.py 1024 2>&1 | tail -20 | tee $OUT/visit3_diag_race.txt

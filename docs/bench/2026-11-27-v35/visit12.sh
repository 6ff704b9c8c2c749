# Version 35, visit 12 (the command as it ran; it wrote bench_b1.py on the GPU machine first, the same text as here):
cd "$(dirname "$0")/../../.."
timeout 150 env PYTHONPATH=. python3 docs/bench/2026-11-27-v35/bench_b1.py 2>&1 | tail -8 | tee $OUT/visit12_bench_b1.txt

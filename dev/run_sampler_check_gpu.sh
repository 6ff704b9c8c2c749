#!/bin/bash
# The device sampler's GPU check in one call, from the repository root of a copy of this tree:
#   bash dev/run_sampler_check_gpu.sh [BASE]
#   1. dev/time_sampler.py on this tree (us per launch, V = 50257, B 1, 8, 64, 256), and on BASE's sampler too
#      where BASE (another checkout, e.g. main's) is given: the same timing script, the same machine
#   2. tests/gpu/test_sampler_cuda.py (distributions by chi-square, the NumPy sampler's ids, the runner's draws)
#   3. a summary: the timings side by side, the tests' last line and the sampler's p-value summary
# Logs under $OUT (a temporary folder where $OUT is unset); each stage under its own timeout.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:+$(cd "$1" && pwd)}
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
echo "this tree: $HERE (kernels/sampler.cu md5 $(md5sum < "$HERE/kernels/sampler.cu" | cut -c1-12))"
[ -n "$BASE" ] && echo "base: $BASE (kernels/sampler.cu md5 $(md5sum < "$BASE/kernels/sampler.cu" | cut -c1-12))"

echo "=== time_sampler: this tree"
(cd "$HERE" && PYTHONPATH=$HERE timeout 100 python3 dev/time_sampler.py) > "$OUT/time_this.log" 2>&1
T_RC=$?
cat "$OUT/time_this.log"
B_RC=-
if [ -n "$BASE" ]; then
    echo "=== time_sampler: base"
    (cd "$BASE" && PYTHONPATH=$BASE timeout 100 python3 "$HERE/dev/time_sampler.py") > "$OUT/time_base.log" 2>&1
    B_RC=$?
    cat "$OUT/time_base.log"
fi

echo "=== tests/gpu/test_sampler_cuda.py"
(cd "$HERE" && PYTHONPATH=$HERE timeout 360 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_sampler_cuda.py) \
    > "$OUT/test_sampler_cuda.log" 2>&1
P_RC=$?
grep -E "^chi-square|FAILED|Error" "$OUT/test_sampler_cuda.log" | head -60

echo "=== summary"
python3 - "$OUT/time_this.log" "${BASE:+$OUT/time_base.log}" <<'PY'
import re, sys
def rows(path):
    got = {}
    try:
        for line in open(path):
            m = re.match(r"\s*(\d+)\s+(.+?)\s+([\d.]+)\s*$", line)
            if m:
                got[(int(m.group(1)), m.group(2))] = float(m.group(3))
    except OSError:
        pass
    return got
this = rows(sys.argv[1])
base = rows(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else {}
print(f"{'B':>4} {'mode':>17} {'base us':>9} {'this us':>9}")
for key, t in this.items():
    b = base.get(key)
    print(f"{key[0]:>4} {key[1]:>17} {b if b is not None else float('nan'):>9.1f} {t:>9.1f}")
PY
grep "SAMPLER SUMMARY" "$OUT/test_sampler_cuda.log"
echo "pytest: $(tail -1 "$OUT/test_sampler_cuda.log")"
echo "rc: time_sampler this $T_RC, base $B_RC; pytest $P_RC"

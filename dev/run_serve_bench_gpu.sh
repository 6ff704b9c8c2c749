#!/bin/bash
# The server's GPU run in one call (from a copy of the tree at G/after, the serve extra's wheels at G/.whl, uvloop's
# and httptools' among them, the GPT-2 tokenizer files at G/tok):
#   1. the wheels the machine lacks into /tmp/site (uvloop and httptools into /tmp/site_c: stage 4 runs without
#      them); a random gpt2 checkpoint (fp32)
#   2. tests/gpu/test_sample_rows_cuda.py (sample_rows, launch_rows with a prefill queued meanwhile)
#   3. scripts/bench_serve.py at concurrency 1, 16, 64, 256 (16, 32, 128, 512 requests; prompts 32-512 tokens,
#      32-256 new tokens, t 0.8, top-p 0.95, seed 0) with the offline API on the same requests: uvicorn on uvloop
#      and httptools
#   4. the same client at 64 streams (128 requests, no offline) against a server on uvicorn's pure-Python stack
#      (asyncio, h11): what uvloop and httptools give; skipped when less than 45 s of the budget is left
# Run: bash G/after/dev/run_serve_bench_gpu.sh (or a copy in G/dev). Results under $OUT; each stage under its own
# timeout; about 170 s on an H200 (the kernels' first compilation included), never past about 200; the summary last.
set -u
G=$(cd "$(dirname "$0")" && pwd)  # the nearest folder above this script that holds after/
while [ "$G" != "/" ] && [ ! -d "$G/after" ]; do G=$(dirname "$G"); done
export PYTHONUNBUFFERED=1
BUDGET=190
cd "$G"
python3 - <<'PY'
import glob, importlib.metadata as md, subprocess, sys
need, c_ext = [], []
for w in sorted(glob.glob(".whl/*.whl")):
    dist, ver = w.split("/")[-1].split("-")[:2]
    try:
        have = md.version(dist.replace("_", "-"))
    except md.PackageNotFoundError:
        have = None
    if dist in ("uvloop", "httptools"):
        c_ext.append(w)
    elif have is None or (dist == "typing_extensions" and tuple(map(int, have.split(".")[:2])) < (4, 15)):
        need.append(w)
    print(f"{dist}: machine {have}, wheel {ver}{' -> install' if w in need + c_ext else ''}")
for target, wheels in (("/tmp/site", need), ("/tmp/site_c", c_ext)):
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", target, *wheels], check=True)
PY
export PYTHONPATH=/tmp/site_c:/tmp/site
python3 -c "import fastapi, uvicorn, pydantic, prometheus_client, httpx, cupy; print('imports ok', fastapi.__version__, uvicorn.__version__, pydantic.__version__)"
python3 -c "import uvloop, httptools; print('uvloop', uvloop.__version__, 'httptools', httptools.__version__)" || echo "uvloop / httptools missing: stage 3 runs on asyncio and h11"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 40 python3 after/scripts/make_random_checkpoint.py gpt2 /tmp/gpt2r --tokenizer-dir tok > $OUT/ckpt.log 2>&1 || tail -5 $OUT/ckpt.log

cd "$G/after"
export PYTHONPATH=/tmp/site_c:/tmp/site:$G/after
echo "=== GPU tests (sample_rows, launch_rows)"
timeout 150 python3 -m pytest -q -x tests/gpu/test_sample_rows_cuda.py > $OUT/gpu_tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/gpu_tests.log

echo "=== bench: uvloop + httptools"
timeout 120 python3 scripts/bench_serve.py --model /tmp/gpt2r --backend cuda --concurrency 1,16,64,256 \
    --requests 16,32,128,512 --level-timeout 25 --start-timeout 80 -o $OUT/bench_after.json > $OUT/bench_after.log 2>&1
echo "bench rc $?"

if [ $((BUDGET - SECONDS)) -ge 45 ]; then
    echo "=== bench at 64 streams: asyncio + h11 (no uvloop, no httptools)"
    PYTHONPATH=/tmp/site:$G/after timeout $((BUDGET - SECONDS - 5)) python3 scripts/bench_serve.py --model /tmp/gpt2r \
        --backend cuda --concurrency 64 --requests 128 --no-offline --level-timeout 25 --start-timeout 40 \
        -o $OUT/bench_h11.json > $OUT/bench_h11.log 2>&1
    echo "bench (h11) rc $?"
else
    echo "=== bench at 64 streams on asyncio + h11: skipped ($SECONDS s used)"
fi

echo "=== summary ($SECONDS s)"
echo "--- uvloop + httptools, concurrency 1, 16, 64, 256:"
grep -v "^\[gpt2block\]" $OUT/bench_after.log | grep "^|" || tail -5 $OUT/bench_after.log
if [ -f $OUT/bench_h11.log ]; then
    echo "--- asyncio + h11, 64 streams:"
    grep "^|" $OUT/bench_h11.log || tail -5 $OUT/bench_h11.log
fi
echo "=== done"

#!/bin/bash
# The server's GPU run in one call (from a copy of the tree at G/after, main's at G/before, the serve extra's
# wheels at G/.whl, the GPT-2 tokenizer files at G/tok; G the folder holding this script's copy):
#   1. the wheels the machine lacks into /tmp/site; a random gpt2 checkpoint (fp32)
#   2. scripts/bench_serve.py at concurrency 1, 16, 64, 256 (prompts 32-512, 32-256 new tokens, t 0.8, top-p
#      0.95, seed 0) against this tree's server, with the offline API on the same requests
#   3. tests/gpu/test_sample_rows_cuda.py
#   4. the same client against main's server (its CUDA sample_rows the base default: the whole pool stepped)
# Results under $OUT; each stage under its own timeout.
set -u
G=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1
cd "$G"
python3 - <<'PY'
import glob, importlib.metadata as md, subprocess, sys
need = []
for w in sorted(glob.glob(".whl/*.whl")):
    dist, ver = w.split("/")[-1].split("-")[:2]
    try:
        have = md.version(dist.replace("_", "-"))
    except md.PackageNotFoundError:
        have = None
    if have is None or (dist == "typing_extensions" and tuple(map(int, have.split(".")[:2])) < (4, 15)):
        need.append(w)
    print(f"{dist}: machine {have}, wheel {ver}{' -> install' if w in need else ''}")
if need:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", "/tmp/site", *need], check=True)
PY
export PYTHONPATH=/tmp/site
python3 -c "import fastapi, uvicorn, pydantic, prometheus_client, httpx, cupy; print('imports ok', fastapi.__version__, uvicorn.__version__, pydantic.__version__)"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 40 python3 after/scripts/make_random_checkpoint.py gpt2 /tmp/gpt2r --tokenizer-dir tok > $OUT/ckpt.log 2>&1 || tail -5 $OUT/ckpt.log

echo "=== after: bench"
cd "$G/after"
export PYTHONPATH=/tmp/site:$G/after
timeout 120 python3 scripts/bench_serve.py --model /tmp/gpt2r --backend cuda --concurrency 1,16,64,256 \
    --level-timeout 25 --start-timeout 80 -o $OUT/bench_after.json > $OUT/bench_after.log 2>&1
echo "bench rc $?"; grep -v "^\[gpt2block\]" $OUT/bench_after.log | tail -12

echo "=== after: GPU tests"
timeout 50 python3 -m pytest -q -x tests/gpu/test_sample_rows_cuda.py > $OUT/gpu_tests.log 2>&1
echo "tests rc $?"; tail -4 $OUT/gpu_tests.log

echo "=== before (main): server with the pool stepped, the same client"
cd "$G/before"
PORT=8731
PYTHONPATH=/tmp/site:$G/before timeout 75 python3 -m gpt2block serve --model /tmp/gpt2r --backend cuda --port $PORT \
    --served-model-name bench --max-batch 64 --log-level warning > $OUT/server_before.log 2>&1 &
SP=$!
python3 -c "
import httpx, sys, time
end = time.time() + 40
while time.time() < end:
    try:
        if httpx.get('http://127.0.0.1:$PORT/health', timeout=1).status_code == 200: sys.exit(0)
    except httpx.TransportError: pass
    time.sleep(0.3)
sys.exit(1)" || echo "main's server not ready"
cd "$G/after"
timeout 30 python3 scripts/bench_serve.py --url http://127.0.0.1:$PORT --model /tmp/gpt2r --no-offline \
    --concurrency 1,64 --requests 16,128 --client-procs 4 -o $OUT/bench_before.json > $OUT/bench_before.log 2>&1
echo "before bench rc $?"; tail -5 $OUT/bench_before.log
kill $SP 2>/dev/null; wait $SP 2>/dev/null
echo "=== done"

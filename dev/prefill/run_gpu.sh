#!/usr/bin/env bash
# The packed prefill's GPU tests, its timings and the perplexity comparison in one run, from the repository root.
# Usage on the GPU machine: bash dev/prefill/run_gpu.sh [tests|time|time_prefill|time_ppl|errors|quick_regress|regress]...; logs in $OUT (or ./gpu-out).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
status=0
for what in "${@:-tests time errors regress}"; do
  for w in $what; do
    case "$w" in
      tests)
        timeout 170 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_prefill_batch_cuda.py \
          > "$OUT/pytest_prefill.log" 2>&1 || status=1
        grep -E "passed|failed|error" "$OUT/pytest_prefill.log" | tail -n 3
        grep -E "^(FAILED|ERROR)|Error|assert" "$OUT/pytest_prefill.log" | head -n 30 ;;
      time|time_prefill)
        timeout 80 python3 dev/prefill/time_prefill_batch.py --out "$OUT/prefill_fp32.json" > "$OUT/time_prefill.log" 2>&1 || status=1
        tail -n 6 "$OUT/time_prefill.log" ;;&
      time|time_ppl)
        timeout 80 python3 dev/prefill/time_perplexity.py --out "$OUT/perplexity.json" > "$OUT/time_perplexity.log" 2>&1 || status=1
        tail -n 4 "$OUT/time_perplexity.log" ;;
      errors)
        timeout 80 python3 dev/prefill/check_prefill_errors.py --out "$OUT/errors.json" > "$OUT/errors.log" 2>&1 || status=1
        tail -n 4 "$OUT/errors.log" ;;
      quick_regress)
        timeout 60 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_api_cuda.py \
          "tests/gpu/test_sampler_cuda.py::test_runner_samples_on_the_device_like_the_numpy_sampler" \
          tests/gpu/test_attention.py -k "prefill" > "$OUT/pytest_quick_regress.log" 2>&1 || status=1
        grep -E "passed|failed|error" "$OUT/pytest_quick_regress.log" | tail -n 3
        grep -E "^(FAILED|ERROR)" "$OUT/pytest_quick_regress.log" | head -n 30 ;;
      regress)
        timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_api_cuda.py tests/gpu/test_attention.py \
          "tests/gpu/test_sampler_cuda.py::test_runner_samples_on_the_device_like_the_numpy_sampler" \
          tests/gpu/test_model_cuda.py -k "not layernorm and not greedy_steps_run_ahead" > "$OUT/pytest_regress.log" 2>&1 || status=1
        grep -E "passed|failed|error" "$OUT/pytest_regress.log" | tail -n 3
        grep -E "^(FAILED|ERROR)" "$OUT/pytest_regress.log" | head -n 30 ;;
    esac
  done
done
exit $status

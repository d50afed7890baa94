#!/usr/bin/env bash
# The one GPU command: CUDA tests, the node suite on device "CUDA" (eager, then with every
# case's replays checked byte for byte against eager), parity on the demo transformer and the
# CUDA benchmarks, with a summary table at the end.
#
#   bash scripts/gpu-check.sh [--quick]
#
# Logs go to $OUT (default /tmp/onnx-ep-gpu-check). Wheels for packages the GPU machine
# lacks (nvmath-python, pytest, hypothesis) are installed from .whl/ when that folder exists.
# --quick skips the benchmarks.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/onnx-ep-gpu-check}
mkdir -p "$OUT"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/onnx-ep-site .whl/*.whl || exit 2
  export PYTHONPATH="/tmp/onnx-ep-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export ONNX_EP_CACHE_DIR="${ONNX_EP_CACHE_DIR:-/tmp/onnx-ep-cache}"

declare -A RESULT
step() {  # step NAME LOGFILE COMMAND...
  local name=$1 log=$2; shift 2
  echo "=== $name"
  local t0=$SECONDS
  "$@" > "$OUT/$log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/$log"
  RESULT[$name]="rc=$rc $((SECONDS - t0))s $(grep -E 'passed|failed|node suite|ok:|exit' "$OUT/$log" | tail -n 1)"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import onnx_ep, cuda.bindings; print('providers', onnx_ep.available_providers(), \
'cuda-bindings', cuda.bindings.__version__)" > "$OUT/env.txt" 2>&1
cat "$OUT/gpu.txt" "$OUT/env.txt"

# each step has a time limit (seconds), so one hang cannot eat the whole run
T=${STEP_TIMEOUT:-240}
step kernels-compile kernels.log timeout "$T" python3 scripts/check_kernels.py --load
step cuda-tests pytest_cuda.log timeout "$T" python3 -m pytest -q -m cuda tests/providers/cuda \
  tests/core -p no:cacheprovider -rf --maxfail=300
step node-suite-cuda node_suite_cuda.log timeout "$T" python3 -m onnx_ep.testing.node_suite \
  --device CUDA --jobs 8 --failures --json "$OUT/node_suite_cuda.json"
step node-suite-capture node_suite_capture.log timeout "$T" python3 -m onnx_ep.testing.node_suite \
  --device CUDA --capture --jobs 8 --failures --json "$OUT/node_suite_cuda_capture.json"
step parity-demo parity.log timeout "$T" python3 -m onnx_ep.cli parity --provider cuda --per-node
if [ "$QUICK" = 0 ] && [ -f benchmarks/cuda_kernels.py ]; then
  step bench-cuda bench_cuda.log timeout "$T" python3 benchmarks/cuda_kernels.py \
    --budget "${BENCH_BUDGET:-150}"
fi

echo
echo "| step | result |"
echo "|---|---|"
for k in kernels-compile cuda-tests node-suite-cuda node-suite-capture parity-demo bench-cuda; do
  [ -n "${RESULT[$k]:-}" ] && echo "| $k | ${RESULT[$k]} |"
done
python3 - "$OUT/node_suite_cuda.json" <<'EOF'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["summary"]
except (OSError, KeyError, ValueError):
    sys.exit(0)
print(f"node suite on CUDA: {s['passed']} passed of {s['total']} "
      f"({100 * s['pass_rate']:.1f}%), {s['passed_on_device_only']} entirely on cuda")
try:
    c = json.load(open(sys.argv[1].replace(".json", "_capture.json")))["summary"]
    print(f"node suite on CUDA with capture: {c['passed']} passed of {c['total']}, "
          f"{c['captured']} replayed byte-identical to eager")
except (OSError, KeyError, ValueError):
    pass
EOF
echo "(to record the node-suite run in docs/OPERATORS.md: python -m onnx_ep.testing.docs \
--import-cuda-results $OUT/node_suite_cuda.json --cuda-source 'GPU, date, commit' && \
python -m onnx_ep.testing.docs)"

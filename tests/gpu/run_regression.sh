#!/usr/bin/env bash
# The GPU regression gate, run on the GPU host from the repository root:
#   tests/gpu/run_regression.sh DIST OUT
# DIST is the relocatable bundle (scripts/package.sh, built with -DPROFD_BUILD_GPU_TESTS=ON). One
# profd, then tests/gpu/regression.py's checks: the coexistence matrix (agent absent / default /
# counters off / CUPTI counters x torch.profiler CUDA-only / CPU+CUDA / Kineto on-demand through
# profd x ResNet-50 with pageable copies and .item(), a cuBLASLt GEMM loop, a torch.compile'd block,
# a CUDA-graph replay, a two-stream loop), profd's counts against torch.profiler's for the same
# steps, the operator table against key_averages(), a 10 s launch-loop capture, a --gpu-metrics
# capture, and the always-on numbers (NVML utilization, the launch counter) against the truth of
# bursty serving. One PASS/FAIL line per check, then "N passed, M failed"; exit 0 only if none
# failed. OUT gets summary.txt, regression.json and logs.txt (profd's log, the workers' stderr).
set -u
DIST=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH PYTHONUNBUFFERED=1
RT=/tmp/profd-gate
rm -rf "$RT"
mkdir -p "$RT"
PORT=${PROFD_GATE_METRICS_PORT:-19477}
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
start=$SECONDS
profd --runtime_dir="$RT" --grpc_address=none --capture_dir="$RT/captures" \
  --spool_dir="$RT/spool" --store="file://$RT/store" --metrics_address=127.0.0.1:$PORT \
  > "$RT/profd.log" 2>&1 &
PROFD=$!
for _ in $(seq 100); do [ -S "$RT/profd.sock" ] && break; sleep 0.05; done
{
  echo "# GPU regression gate, $(date -u +%FT%TZ), commit ${PROFD_GATE_COMMIT:-$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
} | tee "$OUT/summary.txt"
python3 "$HERE/regression.py" --dist "$DIST" --rt "$RT" --out "$OUT" --profd-pid "$PROFD" \
  --metrics-port "$PORT" --phases "${PHASES:-a b c}" 2>&1 | tee -a "$OUT/summary.txt"
kill "$PROFD" 2>/dev/null
wait "$PROFD" 2>/dev/null
# What to read when a check fails, in one file (the device returns few files).
{
  for f in "$RT"/operators.txt "$RT"/worker_*.err "$RT/profd.log"; do
    [ -f "$f" ] && { echo "=== $f (last 150 lines)"; tail -n 150 "$f"; }
  done
} > "$OUT/logs.txt"
passed=$(grep -c '^PASS ' "$OUT/summary.txt")
failed=$(grep -c '^FAIL ' "$OUT/summary.txt")
echo "$passed passed, $failed failed ($((SECONDS - start)) s)" | tee -a "$OUT/summary.txt"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

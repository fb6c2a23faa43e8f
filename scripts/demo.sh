#!/usr/bin/env bash
# The main job on one machine: install, build, start profd, start a small CUDA workload with the
# agent injected, capture 2 s of it with profctl and print the summary. On a machine without a
# GPU it says so and captures a process that replays a real capture recorded on an H200 instead.
# Traces are kept in ./profd-demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' &&
   [ -x /usr/local/cuda/bin/nvcc ]; then
  gpu=1
fi
BUILD_DIR=${BUILD_DIR:-build}
if [ "$gpu" = 1 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DPROFD_BUILD_GPU_TESTS=ON >/dev/null
fi
bash scripts/build.sh >/dev/null
B=$BUILD_DIR
OUT=$PWD/profd-demo
mkdir -p "$OUT"
RT=$(mktemp -d /tmp/profd-demo.XXXXXX)
# Everything it writes stays in ./profd-demo (captures, spool, the local store), never in
# profd's production defaults under /var/lib/profd.
"$B/daemon/profd" --runtime_dir="$RT" --grpc_address=none --capture_dir="$OUT/captures" \
  --spool_dir="$OUT/spool" --store="file://$OUT/store" 2>"$OUT/profd.log" &
PROFD=$!
WORKLOAD=""
cleanup() {
  [ -n "$WORKLOAD" ] && kill "$WORKLOAD" 2>/dev/null
  kill "$PROFD" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$RT"
}
trap cleanup EXIT
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
for _ in $(seq 100); do "$B/client/profctl" status >/dev/null 2>&1 && break; sleep 0.05; done

if [ "$gpu" = 1 ]; then
  echo "GPU found: $(nvidia-smi -L | head -1)"
  echo "Starting a launch-bound CUDA loop with the agent injected (CUDA_INJECTION64_PATH)..."
  CUDA_INJECTION64_PATH=$PWD/$B/agent/libprofagent.so \
    "$B/tests/gpu/cuda_workload" loop --launches 100000 --windows 100000 >/dev/null &
else
  echo "No GPU on this machine (nvidia-smi shows none): capturing a process that replays a real"
  echo "capture recorded on an H200 (tests/fixtures/), through the same agent channel, profd and"
  echo "trace writer. Run this on a GPU host to profile a live CUDA process."
  "$B/tests/integration/replay_agent" tests/fixtures/burst_1000_kernels.batches.pb &
fi
WORKLOAD=$!
for _ in $(seq 100); do
  "$B/client/profctl" agents 2>/dev/null | grep -q "^ *$WORKLOAD " && break; sleep 0.1
done
"$B/client/profctl" agents
echo
"$B/client/profctl" capture --pid "$WORKLOAD" --duration 2s
echo
# The headline: the bottleneck report of that capture (the same numbers as its summary.json).
id=$("$B/client/profctl" --json captures --limit 1 | sed -n 's/.*"capture_id": "\([^"]*\)".*/\1/p' | head -1)
echo "\$ profctl report $id"
"$B/client/profctl" report "$id"
echo
echo "Captures are in $OUT/captures (open a trace-*.json.gz in https://ui.perfetto.dev or"
echo "chrome://tracing), stored copies in $OUT/store; profctl report ID|FILE, profctl list."

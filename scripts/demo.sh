#!/usr/bin/env bash
# The main job on one machine: build profd, profctl and the agent, start profd, start a small
# CUDA workload with the agent injected, capture 2 s of it with profctl and print the summary and
# the bottleneck report. On a machine without a GPU it says so and captures a process that
# replays a real capture recorded on an H200 instead.
#
# Everything it writes stays in ./profd-demo/ (captures, spool, store, profd's log); profd listens
# on a private socket and a free metrics port, so a production profd on the same host (sockets in
# /run/profd, metrics on :9477) is left alone. profd keeps running afterwards so that the commands
# the demo suggests work; `bash scripts/demo.sh --stop` stops it.
#
#   bash scripts/demo.sh            build what the demo needs into ${BUILD_DIR:-build}, then run
#   bash scripts/demo.sh --stop     stop the profd a previous run left running
#   PROFD_DEMO_BUILD_DIR=DIR        build in (and run from) DIR, an existing build folder
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/profd-demo
PIDFILE=$OUT/profd.pid

stop_previous() {
  [ -f "$PIDFILE" ] || return 0
  local pid
  pid=$(cat "$PIDFILE")
  # Only a profd this demo started: the pid file names it, and /proc says it is profd still.
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = profd ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "Stopped the demo's profd (pid $pid)."
  fi
  rm -f "$PIDFILE"
  # Its private runtime folder (sockets, lock) goes with it.
  if [ -f "$OUT/runtime_dir" ]; then
    local rt
    rt=$(cat "$OUT/runtime_dir")
    case "$rt" in /tmp/profd-demo.*) rm -rf "$rt" ;; esac
    rm -f "$OUT/runtime_dir"
  fi
}

if [ "${1:-}" = --stop ]; then
  stop_previous
  exit 0
elif [ -n "${1:-}" ]; then
  echo "demo: unknown option $1 (--stop stops the profd a previous run left running)" >&2
  exit 2
fi
stop_previous

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' &&
  [ -x /usr/local/cuda/bin/nvcc ]; then
  gpu=1
fi

mkdir -p "$OUT"
# Only the Debian packages the build needs: no npm, nothing outside this checkout.
bash scripts/setup.sh --build >/dev/null
if [ -n "${PROFD_DEMO_BUILD_DIR:-}" ]; then
  B=$(cd "$PROFD_DEMO_BUILD_DIR" && pwd)
else
  B=$ROOT/${BUILD_DIR:-build}
  [ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=(profd profctl profagent)
if [ "$gpu" = 1 ]; then
  cmake "$B" -DPROFD_BUILD_GPU_TESTS=ON >/dev/null  # the build folder's own sources
  targets+=(cuda_workload)
else
  targets+=(replay_agent)
fi
# What the demo runs, not the tests (the first build takes a few minutes on 2 cores).
echo "Building ${targets[*]} in $B..."
cmake --build "$B" -j "$(nproc)" --target "${targets[@]}" >"$OUT/build.log" 2>&1 || {
  tail -n 40 "$OUT/build.log" >&2
  echo "demo: the build failed (whole log: $OUT/build.log)" >&2
  exit 1
}
rm -f "$OUT/build.log"
PROFCTL=$B/client/profctl
for f in "$B/daemon/profd" "$PROFCTL" "$B/agent/libprofagent.so"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "demo: $f is missing: build it first" >&2; exit 1; }
done

RT=$(mktemp -d /tmp/profd-demo.XXXXXX)
# Captures, spool and the local store stay in ./profd-demo, never in profd's production defaults
# under /var/lib/profd; metrics on a port the kernel picks (profctl status says which).
"$B/daemon/profd" --runtime_dir="$RT" --grpc_address=none --metrics_address=127.0.0.1:0 \
  --capture_dir="$OUT/captures" --spool_dir="$OUT/spool" --store="file://$OUT/store" \
  </dev/null >"$OUT/profd.log" 2>&1 &
PROFD=$!
echo "$PROFD" >"$PIDFILE"
echo "$RT" >"$OUT/runtime_dir"
WORKLOAD=""
ok=0
cleanup() {
  [ -n "$WORKLOAD" ] && kill "$WORKLOAD" 2>/dev/null
  if [ "$ok" != 1 ]; then
    kill "$PROFD" 2>/dev/null
    rm -f "$PIDFILE" "$OUT/runtime_dir"
    rm -rf "$RT"
  fi
  [ -z "$WORKLOAD" ] || wait "$WORKLOAD" 2>/dev/null || true
  true
}
trap cleanup EXIT
profd_died() {
  echo "demo: profd exited; the end of its log ($OUT/profd.log):" >&2
  tail -n 20 "$OUT/profd.log" >&2
  exit 1
}
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
for _ in $(seq 200); do
  "$PROFCTL" status >/dev/null 2>&1 && break
  kill -0 "$PROFD" 2>/dev/null || profd_died
  sleep 0.05
done
kill -0 "$PROFD" 2>/dev/null || profd_died
metrics=$("$PROFCTL" status 2>/dev/null | sed -n 's/^ *metrics: *//p')

if [ "$gpu" = 1 ]; then
  echo "GPU found: $(nvidia-smi -L | head -1)"
  echo "Starting a launch-bound CUDA loop with the agent injected (CUDA_INJECTION64_PATH)..."
  CUDA_INJECTION64_PATH=$B/agent/libprofagent.so \
    "$B/tests/gpu/cuda_workload" loop --launches 100000 --windows 100000 >/dev/null &
else
  echo "No GPU on this machine (nvidia-smi shows none): capturing a process that replays a real"
  echo "capture recorded on an H200 (tests/fixtures/), through the same agent channel, profd and"
  echo "trace writer. Run this on a GPU host to profile a live CUDA process."
  "$B/tests/integration/replay_agent" tests/fixtures/burst_1000_kernels.batches.pb &
fi
WORKLOAD=$!
for _ in $(seq 100); do
  "$PROFCTL" agents 2>/dev/null | grep -q "^ *$WORKLOAD " && break
  kill -0 "$PROFD" 2>/dev/null || profd_died
  sleep 0.1
done
echo
echo "\$ profctl agents"
"$PROFCTL" agents
echo
echo "\$ profctl capture --pid $WORKLOAD --duration 2s"
"$PROFCTL" capture --pid "$WORKLOAD" --duration 2s || { kill -0 "$PROFD" 2>/dev/null || profd_died; exit 1; }
echo
# The headline: the bottleneck report of that capture (the same numbers as its summary.json).
id=$("$PROFCTL" --json captures --limit 1 | sed -n 's/.*"capture_id": "\([^"]*\)".*/\1/p' | head -1)
echo "\$ profctl report $id"
"$PROFCTL" report "$id"
ok=1
echo
echo "Captures are in $OUT/captures (open a trace-*.json.gz in https://ui.perfetto.dev or"
echo "chrome://tracing), stored copies in $OUT/store, profd's log in $OUT/profd.log."
echo
echo "profd keeps running (pid $PROFD), so you can go on in this shell:"
echo "  export PATH=\"$B/client:\$PATH\" PROFD_TARGET=$PROFD_TARGET"
echo "  export PROFD_AGENT_SOCKET=$PROFD_AGENT_SOCKET   # for CUDA processes you start with the agent"
echo "  profctl list"
echo "  profctl report $id --html report.html"
echo "  profctl capture --pid PID --duration 5s --format perfetto"
[ -n "$metrics" ] && echo "  curl -s $metrics | grep '^profd_'"
echo "Stop it with: bash scripts/demo.sh --stop"

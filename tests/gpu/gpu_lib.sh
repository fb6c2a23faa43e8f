# Shared by the GPU scripts (source it after setting OUT): a summary line, waiting for a line in a
# workload's output, waiting for a running capture, and the trace of a `profctl --json capture`.
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
wait_line() {  # file pattern seconds
  for _ in $(seq $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  say "TIMEOUT waiting for '$2' in $1"; return 1
}
wait_running() {
  for _ in $(seq 300); do
    profctl --json captures --limit 1 | grep -q CAPTURE_PHASE_RUNNING && return 0; sleep 0.02
  done
  say "TIMEOUT waiting for a running capture"; return 1
}
trace_of() { python3 -c "import json,sys; d=json.load(open('$1')); print(d['files'][0]['path'] if d.get('files') else '')"; }
# profd from $DIST (bin/, lib/ put first on PATH and LD_LIBRARY_PATH) in a fresh runtime folder
# RT=/tmp/profd-NAME: no TCP, a local store there, the log in $RT/profd.log; more flags after NAME.
# Sets RT, PROFD_PID, and PROFD_TARGET/PROFD_AGENT_SOCKET for profctl and the agents.
start_profd() {  # NAME [flag ...]
  local name=$1
  shift
  export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
  export PATH=$DIST/bin:$PATH
  RT=/tmp/profd-$name; rm -rf "$RT"; mkdir -p "$RT"
  export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
  profd --runtime_dir="$RT" --grpc_address=none --capture_dir="$RT/captures" \
    --spool_dir="$RT/spool" --store="file://$RT/store" "$@" > "$RT/profd.log" 2>&1 &
  PROFD_PID=$!
  sleep 0.5
}

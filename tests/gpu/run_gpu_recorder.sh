#!/usr/bin/env bash
# The flight recorder on the GPU host, from the repository root:
#   tests/gpu/run_gpu_recorder.sh DIST OUT [WINDOWS]
# 1. An alert-triggered capture of a bf16 GEMM loop that marks time with NVTX ranges: profd's
#    alert listener gets the notification Alertmanager sends; the capture must begin 10 s before
#    the alert fired, with every GEMM and NVTX mark of those seconds (recorder_workload.py alert).
# 2. What the recorder costs GPT-2 fp16 b8, on all the time and duty-cycled, in windows
#    interleaved in one process: 30 steps (off, on, off, 10 ms of every 100 ms); and 100 ms of
#    every second from every step's time (phase: each window against the steps on either side of
#    it, and 10 s blocks off and on; tests/bench/duty_cost.py).
# Results: OUT/summary.txt, OUT/alert{1,2,3}.json, OUT/cost.txt, OUT/phase.steps.gz.
set -u
DIST=$(cd "$1" && pwd); OUT=$2; WINDOWS=${3:-320}
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
PORT=${PROFD_RECORDER_ALERT_PORT:-19478}
TOKEN=$(mktemp); echo "recorder-check-$RANDOM$RANDOM" > "$TOKEN"
start_profd recorder --metrics_address=none --alert_address=127.0.0.1:$PORT \
  --alert_token_file="$TOKEN"
say "# flight recorder, $(date -u +%FT%TZ), commit ${PROFD_GATE_COMMIT:-unknown}"

# Three processes, one alert each (the recorder stays on until each process exits).
for i in 1 2 3; do
  LD_PRELOAD=${WORKLOAD_PRELOAD-$DIST/share/profd/tests/libsegv_backtrace.so} \
    CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so python3 tests/gpu/recorder_workload.py alert \
    --port "$PORT" --token-file "$TOKEN" --seconds 15 --alertname "GpuRecorderCheck$i" \
    > "$OUT/alert$i.json" 2> "$OUT/alert$i.err"
  rc=$?
  say "alert-triggered capture $i, 10 s before the alert: $([ $rc -eq 0 ] && echo PASS || echo "FAIL (exit $rc)") $(cat "$OUT/alert$i.json")"
done

# Cost: short windows, the recorder turned on and off by the process itself between them.
cost() {  # NAME recorder_workload.py-cost-flags...
  local name=$1
  shift
  LD_PRELOAD=${WORKLOAD_PRELOAD-$DIST/share/profd/tests/libsegv_backtrace.so} \
    CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so python3 tests/gpu/recorder_workload.py cost \
    "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  say "GPT-2, $name ($*; ms/step per condition, overhead over off): $(python3 tests/bench/overhead_report.py "$OUT/$name.txt")"
}
cost cost --windows "$WINDOWS" --steps 30 --mix off,rec,off,duty:10/100
LD_PRELOAD=${WORKLOAD_PRELOAD-$DIST/share/profd/tests/libsegv_backtrace.so} \
  CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so python3 tests/gpu/recorder_workload.py phase \
  --mix off,duty:100/1000 --block 10 --blocks 24 --gap 0.5 --steps-file "$OUT/phase.steps.gz" \
  > "$OUT/phase.err" 2>&1
say "GPT-2, 100 ms of every second, every step timed (duty_cost.py): $(python3 tests/bench/duty_cost.py "$OUT/phase.steps.gz")"
tail -20 "$RT/profd.log" > "$OUT/profd.log.tail"
kill $PROFD_PID 2>/dev/null
rm -f "$TOKEN"

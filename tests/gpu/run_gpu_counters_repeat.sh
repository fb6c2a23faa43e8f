#!/usr/bin/env bash
# The application's segmentation fault seen once during a --gpu-metrics capture (issue 11,
# docs/HARDWARE_COUNTERS.md): profd without --gpu_counters, so each capture starts and stops
# PM sampling (before the fix, with CUPTI's profiler initialised and torn down each time), and a
# GEMM loop under the agent (core dumps on) taking N 2 s --gpu-metrics captures at 1 ms, half of
# them back to back.
#   tests/gpu/run_gpu_counters_repeat.sh DIST OUT [N]
# Env: CAPTURE_FLAGS (default --gpu-metrics; empty for the control), PROFD_FLAGS (e.g.
# --gpu_counters), WORKLOAD_PRELOAD (an LD_PRELOAD for the workload; default: the package's
# SIGSEGV backtracer, tests/gpu/segv_backtrace.c).
set -u
DIST=$(cd "$1" && pwd); OUT=$2; N=${3:-8}
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
start_profd repeat --metrics_address=none ${PROFD_FLAGS:-}
ulimit -c unlimited
cd "$OUT" || exit 1
LD_PRELOAD=${WORKLOAD_PRELOAD-$DIST/share/profd/tests/libsegv_backtrace.so} CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so python3 \
  "$OLDPWD/tests/gpu/bound_workload.py" --phases gemm --seconds $((N * 3 + 25)) > w.txt 2>&1 &
W=$!
for _ in $(seq 120); do grep -q '"ready"' w.txt && break; sleep 0.5; done
WPID=$(python3 -c "import json;print([json.loads(l)['pid'] for l in open('w.txt') if '\"ready\"' in l][0])")
for i in $(seq "$N"); do
  profctl capture --pid "$WPID" --duration 2s ${CAPTURE_FLAGS---gpu-metrics} --no-progress > "cap$i.txt" 2>&1
  echo "capture $i rc $? $(grep -m1 'GPU counters' "cap$i.txt") $(grep -m1 -o '[0-9,]* events' "cap$i.txt")"
  kill -0 "$WPID" 2>/dev/null || { echo "the workload is gone after capture $i"; break; }
  [ $((i % 2)) = 0 ] && sleep 0.5  # half of them back to back
done
# profd restarted under the running workload (its profiler session ends with the process), then
# two more captures once the agent is back.
if kill -0 "$WPID" 2>/dev/null; then
  kill $PROFD_PID; wait $PROFD_PID 2>/dev/null
  start_profd repeat --metrics_address=none ${PROFD_FLAGS:-}
  for _ in $(seq 40); do profctl agents 2>/dev/null | grep -qw "$WPID" && break; sleep 0.5; done
  for i in 1 2; do
    profctl capture --pid "$WPID" --duration 2s ${CAPTURE_FLAGS---gpu-metrics} --no-progress \
      > "restarted$i.txt" 2>&1
    echo "after the restart: capture $i rc $? $(grep -m1 'GPU counters' "restarted$i.txt")"
    grep -m1 "events" "restarted$i.txt"
  done
fi
wait $W; echo "workload rc $?"
tail -30 w.txt
ls core* 2>/dev/null && command -v gdb >/dev/null && gdb -batch -ex "thread apply all bt" python3 core* > bt.txt 2>&1
cp "$RT/profd.log" profd.log
kill $PROFD_PID; wait $PROFD_PID 2>/dev/null

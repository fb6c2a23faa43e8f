#!/usr/bin/env bash
# The quick exactness check of a capture on the GPU host (a subset of run_gpu_e2e.sh):
#   tests/gpu/run_gpu_burst.sh DIST OUT
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-} PATH=$DIST/bin:$PATH
RT=/tmp/profd-burst; rm -rf $RT; mkdir -p $RT
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
profd --runtime_dir=$RT --grpc_address=none --capture_dir=$RT/captures --metrics_address=none \
  --spool_dir=$RT/spool --store=file://$RT/store > $RT/profd.log 2>&1 &
P=$!
sleep 0.5
CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so $DIST/share/profd/tests/cuda_workload burst --kernels 1000 --bytes 8388608 > $RT/w.out 2>&1 &
W=$!
for _ in $(seq 300); do grep -q ready $RT/w.out && break; sleep 0.1; done
sleep 1.2
for n in 1 2; do
  profctl --json capture --pid $W --duration 2s > $RT/c$n.json 2>&1 &
  C=$!
  for _ in $(seq 200); do profctl --json captures --limit 1 | grep -q CAPTURE_PHASE_RUNNING && break; sleep 0.02; done
  kill -USR1 $W
  wait $C
  t=$(python3 -c "import json; print(json.load(open('$RT/c$n.json'))['files'][0]['path'])")
  echo "burst capture $n: $(python3 tests/gpu/check_trace.py $t profd_test_kernel)" | tee -a "$OUT/burst.txt"
done
kill $W $P
wait $P 2>/dev/null

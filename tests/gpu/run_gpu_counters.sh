#!/usr/bin/env bash
# The agent's always-on counters against known work, on the GPU host:
#   tests/gpu/run_gpu_counters.sh DIST OUT
# A process makes exactly 1000 launches per burst and holds 4 + 8 MiB of device memory; the
# counters profd receives (profctl agents --json) must show exactly that.
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH
RT=/tmp/profd-counters; rm -rf $RT; mkdir -p $RT
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
profd --runtime_dir=$RT --grpc_address=none --capture_dir=$RT/captures --heartbeat_interval=200ms \
  --metrics_address=none --spool_dir=$RT/spool --store=file://$RT/store > $RT/profd.log 2>&1 &
P=$!
sleep 0.5
PROFD_AGENT_COUNTERS=exact CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so $DIST/share/profd/tests/cuda_workload burst --kernels 1000 --bytes 8388608 > $RT/w.out 2>&1 &
W=$!
for _ in $(seq 300); do grep -q ready $RT/w.out && break; sleep 0.1; done
sleep 1
counters() {
  profctl --json agents | python3 -c "
import json,sys
a=[x for x in json.load(sys.stdin)['agents'] if x['pid']==$W][0]
c=(a['counters'] or [{}])[0]
print(int(c.get('kernel_launches',0)), int(c.get('graph_launches',0)), int(c.get('memory_allocated_bytes',0)), int(c.get('memory_peak_bytes',0)))"
}
before=$(counters)
for i in 1 2 3; do kill -USR1 $W; for _ in $(seq 100); do [ "$(grep -c 'burst done' $RT/w.out)" -ge $i ] && break; sleep 0.05; done; done
sleep 1
after=$(counters)
echo "counters before: launches graphs allocated peak = $before" | tee -a "$OUT/counters.txt"
echo "counters after 3 bursts of 1000 launches: $after" | tee -a "$OUT/counters.txt"
python3 - "$before" "$after" <<'PY' | tee -a "$OUT/counters.txt"
import sys
b = list(map(int, sys.argv[1].split())); a = list(map(int, sys.argv[2].split()))
print("launch delta %d (expected 3000): %s; allocated %d, peak %d (expected 8388612 = 4 B + 8 MiB): %s"
      % (a[0] - b[0], "EXACT" if a[0] - b[0] == 3000 else "MISMATCH", a[2], a[3],
         "EXACT" if a[2] == 8388612 and a[3] == 8388612 else "MISMATCH"))
PY
kill $W $P
wait $P 2>/dev/null

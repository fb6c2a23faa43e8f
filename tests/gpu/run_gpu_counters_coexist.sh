#!/usr/bin/env bash
# tests/gpu/run_gpu_counters_coexist.sh DIST OUT (GPU host, repository root):
# profd with --gpu_counters and /metrics; a GEMM loop under the agent; a --gpu-metrics capture in
# between two scrapes: /metrics keeps its counters before, during and after the capture.
DIST=$(cd "$1" && pwd); D=$DIST; OUT=$2; source tests/gpu/gpu_lib.sh
start_profd coexist --gpu_counters --metrics_address=127.0.0.1:9479
CUDA_INJECTION64_PATH=$D/lib/libprofagent.so timeout 60 python3 tests/gpu/bound_workload.py --phases gemm --seconds 25 > $OUT/w.txt 2>&1 &
sleep 8
scrape() { python3 -c "
import urllib.request
t=urllib.request.urlopen('http://127.0.0.1:9479/metrics').read().decode()
print('\n'.join(l.split('{')[0]+' '+l.split()[-1] for l in t.splitlines() if l.startswith('profd_gpu_') and not l.startswith('#') and ('ratio' in l or 'bytes_per' in l or 'available' in l)))"; }
echo "== scrape before"; scrape; echo "profd RSS $(awk '/VmRSS/{print $2}' /proc/$PROFD_PID/status) kB"
WPID=$(python3 -c "import json;print([json.loads(l)['pid'] for l in open('$OUT/w.txt') if '\"ready\"' in l][0])")
profctl capture --pid $WPID --duration 3s --gpu-metrics --gpu-metrics-interval 100us --no-progress > $OUT/cap.txt 2>&1 &
sleep 1.5; echo "== scrape during"; scrape; wait %2 2>/dev/null; sleep 0.5; cat $OUT/cap.txt | head -8
grep -A3 "What bounds" $OUT/cap.txt; profctl report $(awk '/^Capture /{print $2; exit}' $OUT/cap.txt | tr -d :) --top 3 | grep -A2 "What bounds"
sleep 2.5; echo "== scrape after"; scrape
echo "profd RSS $(awk '/VmRSS/{print $2}' /proc/$PROFD_PID/status) kB, peak $(awk '/VmHWM/{print $2}' /proc/$PROFD_PID/status) kB"
kill $PROFD_PID; wait
# Without --gpu_counters: RSS before, after a --gpu-metrics capture (CUPTI let go of).
start_profd lazy --metrics_address=none
CUDA_INJECTION64_PATH=$D/lib/libprofagent.so timeout 60 python3 tests/gpu/bound_workload.py --phases gemm --seconds 20 > $OUT/w2.txt 2>&1 &
sleep 8; echo "lazy: profd RSS $(awk '/VmRSS/{print $2}' /proc/$PROFD_PID/status) kB before"
WPID=$(python3 -c "import json;print([json.loads(l)['pid'] for l in open('$OUT/w2.txt') if '\"ready\"' in l][0])")
profctl capture --pid $WPID --duration 2s --gpu-metrics --no-progress | head -3; sleep 1
echo "lazy: profd RSS $(awk '/VmRSS/{print $2}' /proc/$PROFD_PID/status) kB after, peak $(awk '/VmHWM/{print $2}' /proc/$PROFD_PID/status) kB"
kill $PROFD_PID; wait

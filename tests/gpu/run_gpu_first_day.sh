#!/usr/bin/env bash
# Issue 10's GPU items on the GPU host, one process with the agent at default settings:
#   tests/gpu/run_gpu_first_day.sh DIST OUT
# - /metrics scraped every 0.5 s while a launch-only loop runs 12 s (it allocates nothing after
#   CUDA starts): when each profd_process_* series and the GPU's utilization first appear;
# - a 2 s capture of it, started with RANK/WORLD_SIZE/LOCAL_RANK as torchrun sets them: the
#   trace's distributedInfo, and its host thread ids against the process's OS thread id.
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
start_profd firstday --metrics_address=127.0.0.1:19477
RANK=3 WORLD_SIZE=8 LOCAL_RANK=3 CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so \
  $DIST/share/profd/tests/cuda_workload pulse --on-ms 1000 --off-ms 0 --cycles 12 \
  > "$OUT/workload.txt" 2>&1 &
W=$!
wait_line "$OUT/workload.txt" ready 30
: > "$OUT/scrapes.txt"
(sleep 4; profctl --json capture --pid $W --duration 2s --no-progress > "$OUT/capture.json") &
C=$!
while kill -0 $W 2>/dev/null; do
  now=$(date +%s%N)
  python3 -c "
import urllib.request
body = urllib.request.urlopen('http://127.0.0.1:19477/metrics', timeout=5).read().decode()
lines = [l for l in body.splitlines() if not l.startswith('#')]
pid = 'pid=\"$W\"'
def has(name): return sum(1 for l in lines if l.startswith(name) and pid in l)
util = [l.split()[-1] for l in lines if l.startswith('profd_gpu_utilization_ratio')]
print($now, has('profd_process_info'), has('profd_process_kernel_launches_total'),
      has('profd_process_gpu_memory_used_bytes'), has('profd_process_sm_utilization_ratio'),
      ','.join(util) or '-')" >> "$OUT/scrapes.txt"
  sleep 0.5
done
wait $C
trace=$(trace_of "$OUT/capture.json")
python3 - "$OUT" "$trace" "$W" <<'PY' | tee -a "$OUT/summary.txt"
import gzip, json, sys
out, trace, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
first = min(int(l.split()[2]) for l in open(out + "/workload.txt") if l.startswith("cycle "))
names = ["profd_process_info", "profd_process_kernel_launches_total",
         "profd_process_gpu_memory_used_bytes", "profd_process_sm_utilization_ratio"]
rows = [l.split() for l in open(out + "/scrapes.txt")]
for i, name in enumerate(names):
    seen = [int(r[0]) for r in rows if int(r[1 + i]) > 0]
    missing_after = sum(1 for r in rows if int(r[0]) > (seen[0] if seen else 0) and int(r[1 + i]) == 0)
    print("%s: first in a scrape %s after the first launch; absent in %d of %d later scrapes"
          % (name, "%.2f s" % ((seen[0] - first) / 1e9) if seen else "NEVER", missing_after,
             len(rows)))
busy = [float(v) for r in rows if int(r[0]) > first + 2e9 for v in r[5].split(",") if v != "-"]
print("profd_gpu_utilization_ratio from 2 s after the first launch: min %s, max %s (%d scrapes)"
      % (min(busy) if busy else "-", max(busy) if busy else "-", len(busy)))
if trace:
    opener = gzip.open if trace.endswith(".gz") else open
    d = json.load(opener(trace, "rt"))
    print("distributedInfo:", d.get("distributedInfo"))
    tids = sorted({e.get("tid") for e in d["traceEvents"]
                   if e.get("cat") == "cuda_runtime" and e.get("pid") == pid})
    print("host thread ids of runtime calls:", tids, "(the process's main thread is", pid, ")",
          "MATCH" if tids == [pid] else "DIFFERENT")
else:
    print("no trace:", open(out + "/capture.json").read()[:500])
PY
kill $PROFD_PID 2>/dev/null
wait $PROFD_PID 2>/dev/null

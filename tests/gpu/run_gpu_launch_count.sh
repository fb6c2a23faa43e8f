#!/usr/bin/env bash
# The default (sampled) launch counter against known launch counts, and what it costs, on the GPU
# host:
#   tests/gpu/run_gpu_launch_count.sh DIST OUT [SECONDS]
# Two processes with the agent injected at default settings, side by side for SECONDS (75): a
# steady launch loop and a bursty one (1 s of launches, 4 s idle). Each prints its exact launches
# per cycle; profctl agents --json is read every 0.5 s. For every span of 60 s between two
# heartbeats, the counter's increase is compared with the launches made in that span.
# Then the cost: the launch-bound loop with the counters toggled on and off in alternate windows
# (profagent_set_counters), in sampled and in exact mode.
set -u
DIST=$(cd "$1" && pwd); OUT=$2; SECONDS_RUN=${3:-75}
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
start_profd launches --heartbeat_interval=200ms --metrics_address=none
W=$DIST/share/profd/tests/cuda_workload
AGENT=$DIST/lib/libprofagent.so
CUDA_INJECTION64_PATH=$AGENT $W pulse --on-ms 1000 --off-ms 0 --cycles "$SECONDS_RUN" \
  > "$OUT/steady.txt" 2>&1 &
S=$!
CUDA_INJECTION64_PATH=$AGENT $W pulse --on-ms 1000 --off-ms 4000 --cycles $((SECONDS_RUN / 5)) \
  > "$OUT/bursty.txt" 2>&1 &
B=$!
wait_line "$OUT/steady.txt" ready 30
wait_line "$OUT/bursty.txt" ready 30
: > "$OUT/counters.txt"
while kill -0 $S 2>/dev/null || kill -0 $B 2>/dev/null; do
  profctl --json agents | python3 -c "
import json, sys
for a in json.load(sys.stdin)['agents']:
    for c in a.get('counters') or []:
        print(a['pid'], a.get('last_heartbeat_unix_ns', 0), c.get('kernel_launches', 0),
              a.get('launch_sample_every', 0))" >> "$OUT/counters.txt"
  sleep 0.5
done
python3 - "$OUT" $S $B <<'PY' | tee -a "$OUT/summary.txt"
import sys
out, pids = sys.argv[1], {"steady": int(sys.argv[2]), "bursty": int(sys.argv[3])}
samples = {}
for line in open(out + "/counters.txt"):
    pid, t, n, every = map(int, line.split())
    samples.setdefault(pid, {})[t] = n  # one value per heartbeat
for name, pid in pids.items():
    cycles = [tuple(map(int, l.split()[2:5])) for l in open("%s/%s.txt" % (out, name))
              if l.startswith("cycle ")]
    def launched(t):  # launches made before t: spread evenly over each cycle's launching
        n = 0
        for start, end, k in cycles:
            if t >= end: n += k
            elif t > start: n += k * (t - start) / (end - start)
        return n
    points = sorted(samples.get(pid, {}).items())
    errors = []
    for i, (t0, n0) in enumerate(points):
        later = [(t, n) for t, n in points[i:] if t - t0 >= 60e9]
        if not later: break
        t1, n1 = later[0]
        truth = launched(t1) - launched(t0)
        if truth > 0: errors.append((n1 - n0 - truth) / truth)
    total = sum(k for _, _, k in cycles)
    if not errors:
        print("%s: no 60 s span (%d heartbeats)" % (name, len(points))); continue
    errors.sort()
    worst = max(errors, key=abs)
    print("%s: %d launches in %d cycles; over %d spans of 60 s the sampled counter was off by "
          "median %+.2f %%, min %+.2f %%, max %+.2f %% (worst %+.2f %%): %s"
          % (name, total, len(cycles), len(errors), 100 * errors[len(errors) // 2],
             100 * errors[0], 100 * errors[-1], 100 * worst,
             "WITHIN 5 %" if abs(worst) <= 0.05 else "OUTSIDE 5 %"))
PY
for mode in sampled exact; do
  for run in 1 2; do
    PROFD_AGENT_COUNTERS=$mode CUDA_INJECTION64_PATH=$AGENT $W loop --launches 50000 \
      --windows 40 --toggle counters > "$OUT/cost_${mode}_$run.txt" 2>&1
    say "cost of $mode counting, launch-bound loop, run $run (ns/launch off vs on):" \
      "$(python3 tests/bench/overhead_report.py "$OUT/cost_${mode}_$run.txt")"
  done
done
kill $PROFD_PID 2>/dev/null
wait $PROFD_PID 2>/dev/null

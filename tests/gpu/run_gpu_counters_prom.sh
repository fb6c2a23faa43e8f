#!/usr/bin/env bash
# profd's GPU hardware counters in /metrics (issue 11), on the GPU host:
#  1. a known duty cycle: duty_workload.py GEMM 500 ms / idle 500 ms for 20 s, then copy 500 ms /
#     idle 500 ms for 10 s, /metrics scraped every second (scrape_counters.py);
#  2. the cost: GPT-2 (no agent) in windows of 200 steps while profd runs with --gpu_counters for
#     10 s and is stopped for 10 s, in turn; overhead_report.py classifies the windows by profd's
#     lifetimes (started .. stopped; a window that straddles an edge is left out).
#   tests/gpu/run_gpu_counters_prom.sh DIST OUT
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
PORT=19478
start_profd counters --metrics_address=127.0.0.1:$PORT --gpu_counters
sleep 2
python3 tests/gpu/duty_workload.py --phases gemm,idle --phase-ms 500 --cycles 20 > "$OUT/duty_gemm.txt" &
W=$!
for _ in $(seq 120); do grep -q ready "$OUT/duty_gemm.txt" && break; sleep 0.5; done
python3 tests/gpu/scrape_counters.py http://127.0.0.1:$PORT/metrics --seconds 19 > "$OUT/scrapes_gemm.txt"
wait $W
python3 tests/gpu/duty_workload.py --phases copy,idle --phase-ms 500 --cycles 10 > "$OUT/duty_copy.txt" &
W=$!
for _ in $(seq 120); do grep -q ready "$OUT/duty_copy.txt" && break; sleep 0.5; done
python3 tests/gpu/scrape_counters.py http://127.0.0.1:$PORT/metrics --seconds 9 > "$OUT/scrapes_copy.txt"
wait $W
cp $RT/profd.log "$OUT/profd_counters.log"
kill $PROFD_PID; wait $PROFD_PID 2>/dev/null

# Cost: profd (with its counters) on and off in turn beside a GPT-2 process without the agent.
python3 tests/gpu/gpt2_workload.py loop --windows ${COST_WINDOWS:-60} --steps 200 --toggle none \
  > "$OUT/gpt2.txt" 2> "$OUT/gpt2.err" &
G=$!
echo '{"processes": [' > "$OUT/on_intervals.json"
sep=""
while kill -0 $G 2>/dev/null; do
  on=$(date +%s%N)  # profd's whole life counts as "on", its start-up included
  start_profd counters_cost --metrics_address=none --gpu_counters
  sleep 10
  off=$(date +%s%N)
  kill $PROFD_PID; wait $PROFD_PID 2>/dev/null
  echo "$sep{\"enabled_unix_ns\": \"$on\", \"disabled_unix_ns\": \"$off\"}" >> "$OUT/on_intervals.json"
  sep=","
  sleep 10
done
echo ']}' >> "$OUT/on_intervals.json"
say "gpt2 with profd's counters on/off: $(python3 tests/bench/overhead_report.py "$OUT/gpt2.txt" "$OUT/on_intervals.json")"

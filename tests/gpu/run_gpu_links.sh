#!/usr/bin/env bash
# Issue 11's link counters, on the GPU host with two GPUs (nvidia-h200-x2): which PM-sampling
# metrics GH100 has for NVLink, PCIe and L2, and whether they read what a copy over each link
# moves. pm_sampling_probe samples both GPUs (one probe each, their own processes) while
# duty_workload.py copies host->device, device->host and GPU 0->GPU 1 (256 MiB copies, 1 s
# phases with idle between); pm_phases.py sets each phase's means beside its bytes moved.
# Then profd itself, with --gpu_counters: the same phases (3 s each, under the agent) with
# /metrics scraped every second on both GPUs, `profctl status`, and a --gpu-metrics capture
# across them (its trace kept for the counter tracks).
#   tests/gpu/run_gpu_links.sh DIST OUT
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
P=$DIST/share/profd/tests/pm_sampling_probe
$P --list > "$OUT/list.txt" 2> "$OUT/list.err"; echo "list rc $?"
grep -E '^(nvl|pcie|lts__t_)' "$OUT/list.txt" > "$OUT/link_names.txt"
wc -l < "$OUT/link_names.txt"
# The NVLink byte counters first, then PCIe and L2: the probe keeps what fits in one pass.
METRICS=$(
  {
    grep -E '^nvl[a-z]*__[a-z_]*bytes[a-z_]*\.sum\.per_second$' "$OUT/list.txt" | head -8
    echo pcie__read_bytes.sum.per_second
    echo pcie__write_bytes.sum.per_second
    echo lts__t_bytes.sum.per_second
  } | paste -sd,
)
echo "metrics: $METRICS"
python3 tests/gpu/duty_workload.py --phases htod,idle,dtoh,idle,p2p,idle --cycles 2 \
  > "$OUT/duty.txt" 2>&1 &
W=$!
for _ in $(seq 120); do grep -q ready "$OUT/duty.txt" && break; sleep 0.5; done
for d in 0 1; do
  $P --device $d --interval_ns 1000000 --seconds 13 --metrics "$METRICS" \
    > "$OUT/pm$d.csv" 2> "$OUT/pm$d.err" &
done
wait
for d in 0 1; do
  echo "== GPU $d"
  python3 tests/gpu/pm_phases.py "$OUT/duty.txt" "$OUT/pm$d.csv"
  grep -E "rejected|accepted" "$OUT/pm$d.err"
done | tee "$OUT/phases.txt"
gzip -f "$OUT"/*.csv "$OUT/list.txt"

source tests/gpu/gpu_lib.sh
PORT=19479
start_profd links --metrics_address=127.0.0.1:$PORT --gpu_counters
sleep 3
profctl status > "$OUT/status_metrics.txt" 2>&1
CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so python3 tests/gpu/duty_workload.py \
  --phases htod,idle,dtoh,idle,p2p,idle --phase-ms 3000 --cycles 2 > "$OUT/duty_prom.txt" 2>&1 &
W=$!
for _ in $(seq 120); do grep -q ready "$OUT/duty_prom.txt" && break; sleep 0.5; done
S=()
for g in 0 1; do
  python3 tests/gpu/scrape_counters.py http://127.0.0.1:$PORT/metrics --gpu $g --seconds 36 \
    > "$OUT/scrapes$g.txt" &
  S+=($!)
done
sleep 12
profctl capture --pid $W --duration 8s --gpu-metrics --json > "$OUT/capture.json" 2>&1 &
C=$!
sleep 2
profctl status > "$OUT/status_capture.txt" 2>&1
profctl --json status > "$OUT/status_capture.json" 2>&1
wait $W $C "${S[@]}"  # not profd
cp "$(python3 -c "import json;print(json.load(open('$OUT/capture.json'))['files'][0]['path'])")" \
  "$OUT/capture_trace.json.gz"
cp $RT/profd.log "$OUT/profd_links.log"
kill $PROFD_PID; wait $PROFD_PID 2>/dev/null

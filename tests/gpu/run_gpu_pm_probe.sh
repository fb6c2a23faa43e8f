#!/usr/bin/env bash
# Issue 11's first question, on the GPU host: can profd sample device-wide PM counters (CUPTI PM
# sampling) from its own process while the work runs in another, and what does it cost? Runs
# pm_sampling_probe (its own process, no CUDA context) next to duty_workload.py (GEMM, idle, copy,
# idle, 1 s each), then idle, then the PCIe metrics alone; pm_phases.py compares each phase's
# means with what the phase did.
#   tests/gpu/run_gpu_pm_probe.sh DIST OUT
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
P=$DIST/share/profd/tests/pm_sampling_probe
$P --list > "$OUT/list.txt" 2> "$OUT/list.err"; echo "list rc $?"
python3 tests/gpu/duty_workload.py --cycles 3 > "$OUT/duty.txt" 2>&1 &
W=$!
for _ in $(seq 120); do grep -q ready "$OUT/duty.txt" && break; sleep 0.5; done
$P --device 0 --interval_ns 100000 --seconds 6 ${PM_METRICS:+--metrics $PM_METRICS} \
  > "$OUT/pm.csv" 2> "$OUT/pm.err"; echo "pm rc $?"
wait $W
$P --device 0 --interval_ns 100000 --seconds 2 > "$OUT/idle.csv" 2> "$OUT/idle.err"; echo "idle rc $?"
$P --no_avail_image --seconds 2 --metrics \
  pcie__read_bytes.sum.per_second,pcie__write_bytes.sum.per_second \
  > "$OUT/pcie.csv" 2> "$OUT/pcie.err"; echo "pcie rc $?"
python3 tests/gpu/pm_phases.py "$OUT/duty.txt" "$OUT/pm.csv" | tee "$OUT/phases.txt"
grep -E "rejected|mem\[|summary: (samples|decode_total|sampleinfo|clock_first_sample_after_realtime)" \
  "$OUT/pm.err" | tee -a "$OUT/phases.txt"
gzip -f "$OUT"/*.csv

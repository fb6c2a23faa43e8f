#!/usr/bin/env bash
# What a capture costs the profiled process, side by side in one GPT-2 process (small fp16,
# batch 8x128, windows of 200 steps, interleaved: off, profd capture, off, profd capture without
# sync records, off, torch.profiler CUDA, off, torch.profiler CPU+CUDA, ...), agent injected with
# counters off (as the issue measured):
#   tests/gpu/run_gpu_capture_cost.sh DIST OUT [WINDOWS]
# Results: OUT/summary.txt (median/min/max ms per step per condition, overhead over "off").
set -u
DIST=$(cd "$1" && pwd); OUT=$2; WINDOWS=${3:-24}
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
start_profd cost --metrics_address=none

# One real 10 s capture of a launch-bound loop (empty kernels, counters off): profd's peak RSS
# before and after, the time from the end of the window to `profctl capture` returning, and the
# trace's bytes per event.
hwm() { awk '/VmHWM/{print $2/1024}' /proc/$PROFD_PID/status; }
PROFD_AGENT_COUNTERS=off CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so \
  $DIST/share/profd/tests/cuda_workload loop --launches 50000 --windows 100000 --toggle none \
  > $RT/loop.txt 2>&1 &
L=$!
sleep 3
before=$(hwm)
profctl --json capture --pid $L --duration 10s --no-progress > "$OUT/loop_capture.json"
returned=$(date +%s%N)
after=$(hwm)
kill $L
python3 - "$OUT/loop_capture.json" "$returned" "$before" "$after" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
c = json.load(open(sys.argv[1]))
p = c["processes"][0]
end = int(p["disabled_unix_ns"])
events = int(p["events"])
size = sum(int(f["bytes"]) for f in c.get("files", []))
print("launch loop, 10 s capture: %d events, %s dropped, trace %.1f MB (%.1f B/event), profd VmHWM "
      "%s MiB before, %s MiB after; window end -> profctl returned %.3f s; summary: window %.2f s, "
      "events %s" % (events, p.get("dropped_records", 0), size / 1e6, size / max(events, 1),
                     sys.argv[3], sys.argv[4], (int(sys.argv[2]) - end) / 1e9,
                     int(c["summary"]["window_ns"]) / 1e9, c["summary"]["events"]))
PY
PROFD_AGENT_COUNTERS=off CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so \
  python3 tests/gpu/gpt2_workload.py loop --windows "$WINDOWS" --steps 200 --toggle mix \
  > "$OUT/gpt2_mix.txt" 2> "$OUT/gpt2_mix.err"
say "gpt2 mix (ms/step per condition, overhead over off): $(python3 tests/bench/overhead_report.py "$OUT/gpt2_mix.txt")"
profctl --json captures --limit 8 > "$OUT/captures.json"
python3 - "$OUT/captures.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for c in json.load(open(sys.argv[1]))["captures"]:
    p = c["processes"][0] if c.get("processes") else {}
    print("capture", c["capture_id"], c["phase"], "events", p.get("events"), "dropped",
          p.get("dropped_records", 0), "kinds", c.get("kinds"))
PY
tail -3 $RT/profd.log >> "$OUT/summary.txt"
kill %1 2>/dev/null

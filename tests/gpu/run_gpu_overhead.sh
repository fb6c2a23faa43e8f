#!/usr/bin/env bash
# Overhead benchmark on the GPU host, every comparison inside one process with interleaved
# windows (off, on, off, on, ...), as ../shared/gpu.md asks:
#   tests/gpu/run_gpu_overhead.sh DIST OUT
# Results: OUT/overhead.txt (one JSON line per comparison: median, min, max per condition).
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH
AGENT=$DIST/lib/libprofagent.so
WORKLOAD=$DIST/share/profd/tests/cuda_workload
REPORT="python3 tests/bench/overhead_report.py"
RT=/tmp/profd-bench; rm -rf $RT; mkdir -p $RT
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
res() { echo "$1: $2" | tee -a "$OUT/overhead.txt"; }

# Captures of ~1 s, 0.8 s apart, for as long as the process runs; their JSON says when CUPTI was on.
drive_captures() {  # pid prefix
  local i=0
  while kill -0 "$1" 2>/dev/null; do
    i=$((i + 1))
    profctl --json capture --pid "$1" --duration 1s > "$RT/$2.cap$i.json" 2>/dev/null
    sleep 0.8
  done
}

profd --runtime_dir=$RT --grpc_address=none --capture_dir=$RT/captures --metrics_address=none \
  --spool_dir=$RT/spool --store=file://$RT/store > "$RT/profd.log" 2>&1 &
sleep 0.5

# Launch-bound loop: 50 000 empty-kernel launches per window.
for mode in exact memory sampled; do
  PROFD_AGENT_COUNTERS=$mode CUDA_INJECTION64_PATH=$AGENT $WORKLOAD loop --launches 50000 --windows 21 --toggle counters > $RT/loop_counters_$mode.txt
  res "launch loop, agent counters ($mode) off/on" "$($REPORT $RT/loop_counters_$mode.txt)"
done
$WORKLOAD loop --launches 50000 --windows 21 --toggle raw-cupti > $RT/loop_raw.txt
res "launch loop, raw CUPTI kernel+memcpy+memset+runtime off/on (no agent)" "$($REPORT $RT/loop_raw.txt)"
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD loop --launches 50000 --windows 61 --toggle none > $RT/loop_cap.txt &
W=$!
sleep 1.5
drive_captures $W loop
wait $W
res "launch loop, profd capture (default kinds) outside/inside" "$($REPORT $RT/loop_cap.txt $RT/loop.cap*.json)"

# GPT-2 small fp16 inference, 15 steps per window.
for mode in exact memory; do
  PROFD_AGENT_COUNTERS=$mode CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py loop --windows 21 --steps 15 --toggle counters > $RT/gpt2_counters_$mode.txt
  res "gpt2, agent counters ($mode) off/on" "$($REPORT $RT/gpt2_counters_$mode.txt)"
done
python3 tests/gpu/gpt2_workload.py loop --windows 21 --steps 15 --toggle torch > $RT/gpt2_torch.txt 2>/dev/null
res "gpt2, torch.profiler (CUDA activities) off/on (no agent)" "$($REPORT $RT/gpt2_torch.txt)"
CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py loop --windows 81 --steps 15 --toggle none > $RT/gpt2_cap.txt &
G=$!
for _ in $(seq 600); do grep -q "^window 2 " $RT/gpt2_cap.txt 2>/dev/null && break; sleep 0.1; done
drive_captures $G gpt2
wait $G
res "gpt2, profd capture (default kinds) outside/inside" "$($REPORT $RT/gpt2_cap.txt $RT/gpt2.cap*.json)"
ls $RT/*.cap*.json 2>/dev/null | wc -l | xargs echo "captures driven:" | tee -a "$OUT/overhead.txt"
tail -2 $RT/profd.log >> "$OUT/overhead.txt"
kill %1 2>/dev/null
wait

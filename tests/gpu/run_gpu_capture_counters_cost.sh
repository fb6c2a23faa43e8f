#!/usr/bin/env bash
# What 100 us PM sampling (a --gpu-metrics capture's) costs the application, on the GPU host:
#   tests/gpu/run_gpu_capture_counters_cost.sh DIST OUT
# GPT-2 fp16 b8x128 in one process (tests/gpu/gpt2_workload.py, windows of 200 steps, no agent:
# the counters are device-wide), next to pm_sampling_probe sampling the GPU at 100 us into a
# 32 MiB buffer decoded every 20 ms (profd's capture settings, pm_sampler.cc) for 10 s, then
# nothing for 10 s, in turn. INTERVAL_NS (100000) sets the sampling interval.
set -u
DIST=$(cd "$1" && pwd); mkdir -p "$2"; OUT=$(cd "$2" && pwd)
source tests/gpu/gpu_lib.sh
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
P=$DIST/share/profd/tests/pm_sampling_probe
M=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gr__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second,pcie__read_bytes.sum.per_second,pcie__write_bytes.sum.per_second
python3 tests/gpu/gpt2_workload.py loop --windows ${COST_WINDOWS:-60} --steps 200 --toggle none \
  > "$OUT/gpt2.txt" 2> "$OUT/gpt2.err" &
G=$!
sleep 15  # model load
echo '{"processes": [' > "$OUT/on_intervals.json"
sep=""
while kill -0 $G 2>/dev/null; do
  on=$(date +%s%N)
  timeout 20 "$P" --interval_ns ${INTERVAL_NS:-100000} --seconds 10 --decode_ms 20 --hw_buffer_mib 32 \
    --max_samples 416 --metrics "$M" > /dev/null 2> "$OUT/probe_last.txt"
  off=$(date +%s%N)
  echo "$sep{\"enabled_unix_ns\": \"$on\", \"disabled_unix_ns\": \"$off\"}" >> "$OUT/on_intervals.json"
  sep=","
  sleep 10
done
echo ']}' >> "$OUT/on_intervals.json"
grep -E "samples=|overflow" "$OUT/probe_last.txt" | head -3
echo "gpt2 with PM sampling every ${INTERVAL_NS:-100000} ns on/off: $(python3 tests/bench/overhead_report.py "$OUT/gpt2.txt" "$OUT/on_intervals.json")"

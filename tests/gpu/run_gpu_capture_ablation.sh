#!/usr/bin/env bash
# Where a profd capture's cost goes in a GPT-2 process (small fp16, batch 8x128, windows of 200
# steps, interleaved in one process): capture kinds (default, without sync records, kernels only)
# next to torch.profiler CUDA-only in the same process, and in a process where torch.profiler
# never ran (CUPTI keeps its own timestamp source):
#   tests/gpu/run_gpu_capture_ablation.sh DIST OUT [WINDOWS]
set -u
DIST=$(cd "$1" && pwd); OUT=$2; WINDOWS=${3:-48}
mkdir -p "$OUT"
source tests/gpu/gpu_lib.sh
start_profd ablation --metrics_address=none
run() {  # name, extra environment, conditions
  env PROFD_AGENT_COUNTERS=off CUDA_INJECTION64_PATH=$DIST/lib/libprofagent.so $2 \
    python3 tests/gpu/gpt2_workload.py loop --windows "$WINDOWS" --steps 200 --toggle mix \
    --mix "$3" > "$OUT/$1.txt" 2> "$OUT/$1.err"
  say "$1 (ms/step, overhead over off): $(python3 tests/bench/overhead_report.py "$OUT/$1.txt")"
}
say "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
PHASES=${PHASES:-"kinds notorch"}
case " $PHASES " in *" kinds "*)
run kinds "" off,profd,off,profd:kernel+memcpy+memset+runtime,off,profd:kernel,off,torch_cuda ;; esac
# No torch.profiler session in the process: Kineto never sets its timestamp source, so the
# capture keeps CUPTI's own.
case " $PHASES " in *" notorch "*)
run notorch "" off,profd,off,profd:kernel ;; esac
kill $PROFD_PID 2>/dev/null

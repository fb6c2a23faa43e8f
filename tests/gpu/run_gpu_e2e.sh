#!/usr/bin/env bash
# GPU end-to-end checks, run on the GPU host from the repository root:
#   tests/gpu/run_gpu_e2e.sh DIST OUT
# DIST is the relocatable build (scripts/package.sh, with -DPROFD_BUILD_GPU_TESTS=ON so it holds
# share/profd/tests/cuda_workload); results land in OUT (summary.txt, JSON, traces, fixtures).
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH
RT=/tmp/profd-e2e; rm -rf $RT; mkdir -p $RT
AGENT=$DIST/lib/libprofagent.so
WORKLOAD=$DIST/share/profd/tests/cuda_workload
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
source "$(dirname "$0")/gpu_lib.sh"

say "# profd GPU end-to-end, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
profd --runtime_dir=$RT --grpc_address=none --capture_dir=$RT/captures --record_batches \
  --metrics_address=127.0.0.1:9477 \
  > "$RT/profd.log" 2>&1 &
PROFD=$!
sleep 0.5

# 1. A CUDA process with the agent injected registers, with its GPU.
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD burst --kernels 1000 --bytes 8388608 > $RT/w.out 2>&1 &
W=$!
wait_line $RT/w.out ready 30
sleep 1.2
profctl agents | tee -a "$OUT/summary.txt"
profctl --json agents > "$RT/agents.json"

# 2. Capture a live process: exactly 1000 kernels, 8 MiB each way, one memset, no drops.
for n in 1 2; do
  profctl --json capture --pid $W --duration 3s > "$RT/burst$n.json" 2> "$RT/burst$n.err" &
  C=$!
  wait_running && kill -USR1 $W
  wait $C; rc=$?
  wait_line $RT/w.out "burst done" 10
  t=$(trace_of "$RT/burst$n.json")
  say "burst capture $n: profctl exit $rc, trace $t"
  [ -n "$t" ] && python3 tests/gpu/check_trace.py "$t" profd_test_kernel | tee -a "$OUT/summary.txt"
  python3 -c "import json; d=json.load(open('$RT/burst$n.json')); [print('  pid', p['pid'], 'start latency ms', int(p['start_latency_ns'])/1e6, 'events', p['events'], 'dropped', p['dropped_records']) for p in d['processes']]" | tee -a "$OUT/summary.txt"
done
profctl capture --pid $W --duration 1s --no-progress > "$RT/burst_human.txt" 2>&1
kill -0 $W && say "workload still running after 3 captures: yes"
kill $W

# 3. Start latency over 20 captures (request -> CUPTI enabled in the process).
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD burst --kernels 10 --bytes 4096 > $RT/w2.out 2>&1 &
W=$!
wait_line $RT/w2.out ready 30
sleep 1.2
for i in $(seq 20); do
  profctl --json capture --pid $W --duration 200ms > "$RT/lat$i.json" 2>/dev/null
  python3 -c "import json; d=json.load(open('$RT/lat$i.json')); print(int(d['processes'][0]['start_latency_ns']))" >> "$RT/start_latency_ns.txt"
done
python3 -c "
import statistics as s; v=sorted(int(x)/1e6 for x in open('$RT/start_latency_ns.txt'))
print('start latency ms over %d captures: median %.2f min %.2f max %.2f p95 %.2f' % (len(v), s.median(v), v[0], v[-1], v[int(len(v)*0.95)-1]))" | tee -a "$OUT/summary.txt"
kill $W

# 4. GPT-2 small fp16: our capture of 20 steps vs torch.profiler of 20 steps (separate process).
CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py serve --steps 20 > $RT/g.out 2>&1 &
G=$!
wait_line $RT/g.out ready 120
sleep 1.2
profctl --json capture --pid $G --duration 4s > "$RT/gpt2.json" 2> "$RT/gpt2.err" &
C=$!
wait_running && kill -USR1 $G
wait $C
wait_line $RT/g.out "steps done" 30
t=$(trace_of "$RT/gpt2.json")
cp "$t" "$RT/gpt2_profd_trace.json.gz" 2>/dev/null
say "gpt2 profd capture: $(grep 'steps done' $RT/g.out)"
python3 tests/gpu/check_trace.py "$t" | tee -a "$OUT/summary.txt"
# Metrics while GPT-2 runs: NVML and the agent's counters on a real GPU, and a real Prometheus
# asking every dashboard query (a Prometheus binary, if carried, at $DIST/../prometheus).
( for _ in $(seq 60); do kill -USR1 $G 2>/dev/null; sleep 0.3; done ) &
SIGNALS=$!
sleep 3
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9477/metrics').read().decode())" > "$OUT/metrics_gpu.txt"
python3 - "$OUT/metrics_gpu.txt" $G <<'PY' | tee -a "$OUT/summary.txt"
import sys
text = open(sys.argv[1]).read(); pid = sys.argv[2]
for name in ["profd_nvml_available", "profd_gpu_utilization_ratio", "profd_gpu_memory_used_bytes",
             "profd_process_gpu_memory_used_bytes", "profd_process_sm_utilization_ratio",
             "profd_process_kernel_launches_total", "profd_process_memory_allocated_peak_bytes"]:
    lines = [l for l in text.splitlines() if l.startswith(name) and (("pid=" not in l) or f'pid="{pid}"' in l)]
    print("metric", name, ":", lines[0] if lines else "ABSENT")
PY
if [ -x "$DIST/../prometheus" ]; then
  python3 tests/gpu/check_dashboard.py "$DIST/../prometheus" deploy/grafana/profd-dashboard.json 127.0.0.1:9477 $RT > "$OUT/dashboard.txt" 2>&1
  say "dashboard through a real Prometheus: $(tail -1 $OUT/dashboard.txt)"
fi
wait $SIGNALS
# The bottleneck report on our capture and on torch.profiler's export of the same 20 steps.
profctl report "$RT/gpt2_profd_trace.json.gz" > "$OUT/report_profd.txt" 2>&1
profctl report --json "$RT/gpt2_profd_trace.json.gz" > "$RT/report_profd.json" 2>/dev/null
# torch.profiler holding CUPTI in a process with the agent: our capture must refuse clearly.
kill $G
python3 tests/gpu/gpt2_workload.py torchprof --steps 20 --out $RT/torch_trace.json | tee -a "$OUT/summary.txt"
gzip -c $RT/torch_trace.json > "$RT/gpt2_torch_trace.json.gz"
profctl report "$RT/torch_trace.json" > "$OUT/report_torch.txt" 2>&1
profctl report --json "$RT/torch_trace.json" > "$RT/report_torch.json" 2>/dev/null
python3 - "$RT/report_profd.json" "$RT/report_torch.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
ka = {k["name"]: k for k in a["top_kernels"]}; kb = {k["name"]: k for k in b["top_kernels"]}
top_a = [k["name"] for k in a["top_kernels"][:10]]; top_b = [k["name"] for k in b["top_kernels"][:10]]
print("report top-10 kernels same names:", top_a == top_b, "| same set:", set(top_a) == set(top_b))
worst = 0.0
for name in top_a:
    if name in kb:
        ta, tb = ka[name]["total_ns"], kb[name]["total_ns"]
        worst = max(worst, abs(ta - tb) / max(tb, 1))
        print("  %-70.70s count %6d vs %6d  total %9.1f vs %9.1f us" % (name, ka[name]["instances"], kb[name]["instances"], ta / 1e3, tb / 1e3))
print("largest total-time difference among top kernels: %.2f %%" % (100 * worst))
PY
PROFD_AGENT_COUNTERS=off CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py hold > $RT/h.out 2>&1 &
H=$!
wait_line $RT/h.out holding 120
sleep 1.2
profctl capture --pid $H --duration 1s --no-progress > "$RT/cupti_in_use.txt" 2>&1
say "capture while torch.profiler holds CUPTI: exit $? — $(tail -1 $RT/cupti_in_use.txt)"
kill $H

# 5. Launch-bound loop, agent idle vs no agent (separate processes: indicative only).
for round in 1 2 3; do
  $WORKLOAD loop --launches 50000 --windows 6 > $RT/noagent$round.txt
  CUDA_INJECTION64_PATH=$AGENT $WORKLOAD loop --launches 50000 --windows 6 > $RT/agent$round.txt
done
python3 - "$RT" <<'PY' | tee -a "$OUT/summary.txt"
import glob, statistics as s, sys
def med(pattern):
    v = [float(l.split()[4]) for f in glob.glob(sys.argv[1] + pattern) for l in open(f) if l.startswith("window")]
    return s.median(v), min(v), max(v)
a, b = med("/noagent*.txt"), med("/agent*.txt")
print("launch loop ns/launch: no agent median %.0f (%.0f-%.0f), agent idle median %.0f (%.0f-%.0f)" % (a + b))
PY
kill $PROFD
wait $PROFD 2>/dev/null
bash tests/gpu/run_gpu_counters.sh "$DIST" "$OUT"
say "done"

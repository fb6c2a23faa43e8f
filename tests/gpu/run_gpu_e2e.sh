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
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
wait_line() {  # file pattern seconds
  for _ in $(seq $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  say "TIMEOUT waiting for '$2' in $1"; return 1
}
wait_running() {
  for _ in $(seq 200); do
    profctl --json captures --limit 1 | grep -q CAPTURE_PHASE_RUNNING && return 0; sleep 0.02
  done
  say "TIMEOUT waiting for a running capture"; return 1
}
trace_of() { python3 -c "import json,sys; d=json.load(open('$1')); print(d['files'][0]['path'] if d.get('files') else '')"; }

say "# profd GPU end-to-end, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
profd --runtime_dir=$RT --grpc_address=none --capture_dir=$RT/captures --record_batches \
  > "$OUT/profd.log" 2>&1 &
PROFD=$!
sleep 0.5

# 1. A CUDA process with the agent injected registers, with its GPU.
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD burst --kernels 1000 --bytes 8388608 > $RT/w.out 2>&1 &
W=$!
wait_line $RT/w.out ready 30
sleep 1.2
profctl agents | tee -a "$OUT/summary.txt"
profctl --json agents > "$OUT/agents.json"

# 2. Capture a live process: exactly 1000 kernels, 8 MiB each way, one memset, no drops.
for n in 1 2; do
  profctl --json capture --pid $W --duration 3s > "$OUT/burst$n.json" 2> "$OUT/burst$n.err" &
  C=$!
  wait_running && kill -USR1 $W
  wait $C; rc=$?
  wait_line $RT/w.out "burst done" 10
  t=$(trace_of "$OUT/burst$n.json")
  say "burst capture $n: profctl exit $rc, trace $t"
  [ -n "$t" ] && python3 tests/gpu/check_trace.py "$t" profd_test_kernel | tee -a "$OUT/summary.txt"
  python3 -c "import json; d=json.load(open('$OUT/burst$n.json')); [print('  pid', p['pid'], 'start latency ms', int(p['start_latency_ns'])/1e6, 'events', p['events'], 'dropped', p['dropped_records']) for p in d['processes']]" | tee -a "$OUT/summary.txt"
done
cp $RT/captures/*/batches-$W.pb "$OUT/" 2>/dev/null
profctl capture --pid $W --duration 1s --no-progress > "$OUT/burst_human.txt" 2>&1
kill -0 $W && say "workload still running after 3 captures: yes"
kill $W

# 3. Start latency over 20 captures (request -> CUPTI enabled in the process).
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD burst --kernels 10 --bytes 4096 > $RT/w2.out 2>&1 &
W=$!
wait_line $RT/w2.out ready 30
sleep 1.2
for i in $(seq 20); do
  profctl --json capture --pid $W --duration 200ms > "$RT/lat$i.json" 2>/dev/null
  python3 -c "import json; d=json.load(open('$RT/lat$i.json')); print(int(d['processes'][0]['start_latency_ns']))" >> "$OUT/start_latency_ns.txt"
done
python3 -c "
import statistics as s; v=sorted(int(x)/1e6 for x in open('$OUT/start_latency_ns.txt'))
print('start latency ms over %d captures: median %.2f min %.2f max %.2f p95 %.2f' % (len(v), s.median(v), v[0], v[-1], v[int(len(v)*0.95)-1]))" | tee -a "$OUT/summary.txt"
kill $W

# 4. GPT-2 small fp16: our capture of 20 steps vs torch.profiler of 20 steps (separate process).
CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py serve --steps 20 > $RT/g.out 2>&1 &
G=$!
wait_line $RT/g.out ready 120
sleep 1.2
profctl --json capture --pid $G --duration 4s > "$OUT/gpt2.json" 2> "$OUT/gpt2.err" &
C=$!
wait_running && kill -USR1 $G
wait $C
wait_line $RT/g.out "steps done" 30
t=$(trace_of "$OUT/gpt2.json")
cp "$t" "$OUT/gpt2_profd_trace.json.gz" 2>/dev/null
say "gpt2 profd capture: $(grep 'steps done' $RT/g.out)"
python3 tests/gpu/check_trace.py "$t" | tee -a "$OUT/summary.txt"
# torch.profiler holding CUPTI in a process with the agent: our capture must refuse clearly.
kill $G
python3 tests/gpu/gpt2_workload.py torchprof --steps 20 --out $RT/torch_trace.json | tee -a "$OUT/summary.txt"
gzip -c $RT/torch_trace.json > "$OUT/gpt2_torch_trace.json.gz"
CUDA_INJECTION64_PATH=$AGENT python3 tests/gpu/gpt2_workload.py hold > $RT/h.out 2>&1 &
H=$!
wait_line $RT/h.out holding 120
sleep 1.2
profctl capture --pid $H --duration 1s --no-progress > "$OUT/cupti_in_use.txt" 2>&1
say "capture while torch.profiler holds CUPTI: exit $? — $(tail -1 $OUT/cupti_in_use.txt)"
kill $H

# 5. Launch-bound loop, agent idle vs no agent (separate processes: indicative only).
for round in 1 2 3; do
  $WORKLOAD loop --launches 50000 --windows 6 > $RT/noagent$round.txt
  CUDA_INJECTION64_PATH=$AGENT $WORKLOAD loop --launches 50000 --windows 6 > $RT/agent$round.txt
done
python3 - "$RT" <<'PY' | tee -a "$OUT/summary.txt"
import glob, statistics as s, sys
def med(pattern):
    v = [float(l.split()[2]) for f in glob.glob(sys.argv[1] + pattern) for l in open(f) if l.startswith("window")]
    return s.median(v), min(v), max(v)
a, b = med("/noagent*.txt"), med("/agent*.txt")
print("launch loop ns/launch: no agent median %.0f (%.0f-%.0f), agent idle median %.0f (%.0f-%.0f)" % (a + b))
PY
kill $PROFD
wait $PROFD 2>/dev/null
bash tests/gpu/run_gpu_counters.sh "$DIST" "$OUT"
say "done"

#!/usr/bin/env bash
# Operator-level captures through Kineto on the GPU host, run from the repository root:
#   tests/gpu/run_gpu_kineto.sh DIST OUT
# DIST: the relocatable build (scripts/package.sh, with -DPROFD_BUILD_GPU_TESTS=ON). OUT gets
# summary.txt, kineto_captures.json (start latency of each capture), windows.txt (step times),
# profd_ops.json.gz + torch_ops.json.gz + torch_ops_key_averages.json (the same 20 GPT-2 steps
# captured by profd through Kineto and by torch.profiler in the same process), profd.log.
# Needs PyTorch on the host; the process polls profd every second (<runtime_dir>/kineto.conf).
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH PYTHONUNBUFFERED=1
RT=/tmp/profd-kineto; rm -rf $RT; mkdir -p $RT
AGENT=$DIST/lib/libprofagent.so
WORKLOAD=$DIST/share/profd/tests/cuda_workload
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
source "$(dirname "$0")/gpu_lib.sh"
say "# profd through Kineto, $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
profd --runtime_dir=$RT --capture_dir=$RT/captures --store=file://$RT/store --spool_dir=$RT/spool \
  --metrics_address=none > "$RT/profd.log" 2>&1 &
PROFD=$!
sleep 0.5

PHASES=${PHASES:-burst overhead ops}  # a subset reruns only those
# 1. The agent path still exact after issue 12's limits (batches cut at 32768 events).
if [[ " $PHASES " == *" burst "* ]]; then
CUDA_INJECTION64_PATH=$AGENT $WORKLOAD burst --kernels 1000 --bytes 8388608 > $RT/w.out 2>&1 &
W=$!
wait_line $RT/w.out ready 30
sleep 1.2
profctl --json capture --pid $W --duration 3s > $RT/burst.json 2> $RT/burst.err &
C=$!
wait_running && kill -USR1 $W
wait $C
say "burst capture (agent): exit $?"
t=$(trace_of "$RT/burst.json")
[ -n "$t" ] && python3 tests/gpu/check_trace.py "$t" profd_test_kernel | tee -a "$OUT/summary.txt"
kill $W
fi

# 2. GPT-2 with the agent injected and Kineto polling profd every second.
CUDA_INJECTION64_PATH=$AGENT KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=$RT/kineto \
  KINETO_CONFIG=$RT/kineto.conf python3 -X faulthandler tests/gpu/kineto_workload.py --out "$OUT" \
  > $RT/k.out 2> $RT/k.err &
K=$!
if [[ " $PHASES " == *" repro "* ]]; then
  # The same process without the agent: does an on-demand trace that starts while the process
  # toggles torch.profiler sessions crash it (seen once with the agent)?
  mkdir -p $RT/repro
  KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=$RT/kineto KINETO_CONFIG=$RT/kineto.conf \
    python3 -X faulthandler tests/gpu/kineto_workload.py --out $RT/repro > $RT/r.out 2> $RT/r.err &
  R=$!
fi
wait_line $RT/k.out ready 120
for _ in $(seq 100); do
  profctl --json agents | python3 -c "import json,sys; a=[x for x in json.load(sys.stdin).get('agents',[]) if x['pid']==$K]; sys.exit(0 if a and a[0].get('kineto',{}).get('polling') else 1)" && break
  sleep 0.1
done
profctl agents | tee -a "$OUT/summary.txt"
# 2a. Overhead and start latency: 12 captures of 1 s, 1 s apart, while windows of steps run.
if [[ " $PHASES " == *" overhead "* ]]; then
  for i in $(seq 12); do
    profctl --json capture --pid $K --duration 1s > $RT/cap$i.json 2> $RT/cap$i.err
    sleep 1
  done
  kill -USR1 $K   # torch.profiler CPU+CUDA on every other window, same process
  sleep 20
else
  kill -USR1 $K
  sleep 1   # two signals of one kind in a row would merge into one
fi
kill -USR1 $K   # operator comparison
wait_line $RT/k.out "phase ops" 30
# 2b. The same 20 steps: profd through Kineto, then torch.profiler in the same process.
# Kineto starts tracing 1.1 s after it takes the config (the start time profd sets, one controller
# tick and a margin); the 20 steps (~0.3 s) run 3.2 s after it took it, well inside the 6 s window.
profctl --json capture --pid $K --duration 6s --record-shapes > $RT/ops.json 2> $RT/ops.err &
C=$!
wait_running
sleep 3.2
kill -USR2 $K
wait $C
say "operator capture: exit $? $(grep -c . $RT/ops.err) error lines"
kill -HUP $K
wait_line $RT/k.out "torchprof done" 120
kill $K
if [[ " $PHASES " == *" repro "* ]]; then
  wait_line $RT/r.out ready 60
  kill -USR1 $R
  sleep 2
  profctl --json capture --pid $R --duration 1s > $RT/repro.json 2> $RT/repro.err
  sleep 3
  if kill -0 $R 2>/dev/null; then say "repro without the agent: survived ($(grep -c '"CAPTURE_PHASE' $RT/repro.json) phase lines)"; kill $R
  else say "repro without the agent: CRASHED"; fi
  tail -c 3000 $RT/r.err > "$OUT/repro_stderr.txt"
fi
tail -c 3000 $RT/k.err > "$OUT/workload_stderr.txt"
python3 - "$RT" "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import glob, gzip, json, shutil, statistics as st, sys
rt, out = sys.argv[1], sys.argv[2]
def trace_window(path):
    d = json.load(gzip.open(path))
    base = d.get("baseTimeNanoseconds", 0)
    ts = [(e["ts"], e.get("dur", 0)) for e in d["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    start = min(t for t, _ in ts) * 1000 + base
    end = max(t + u for t, u in ts) * 1000 + base
    return int(start), int(end)
caps = []
for f in sorted(glob.glob(rt + "/cap*.json"), key=lambda p: int(p[len(rt) + 4:-5])):
    try:
        d = json.load(open(f))
    except Exception:
        caps.append({"file": f, "error": open(f[:-5] + ".err").read()[-300:]}); continue
    c = {"id": d["capture_id"], "phase": d["phase"], "path": d["processes"][0].get("path"),
         "requested_ns": int(d["requested_unix_ns"]), "message": d.get("message", "")}
    if d.get("files"):
        c["start_ns"], c["end_ns"] = trace_window(d["files"][0]["path"])
        c["start_latency_ms"] = (c["start_ns"] - c["requested_ns"]) / 1e6
        c["events"] = int(d["summary"]["events"])
    caps.append(c)
if caps: json.dump(caps, open(out + "/kineto_captures.json", "w"), indent=1)
lat = sorted(c["start_latency_ms"] for c in caps if "start_latency_ms" in c) if caps else []
if caps: print("captures through Kineto: %d of %d done; request -> first traced event ms: median %.0f, min %.0f, max %.0f"
      % (len(lat), len(caps), st.median(lat), lat[0], lat[-1]) if lat else "no capture through Kineto succeeded")
wins = [l.split() for l in open(rt + "/k.out") if l.startswith("window")] if caps else []
shutil.copy(rt + "/k.out", out + "/windows.txt")
inside, outside, off, torch = [], [], [], []
spans = [(c["start_ns"], c["end_ns"]) for c in caps if "start_ns" in c]
for w in wins:
    s, e, ms, mode = int(w[2]), int(w[3]), float(w[4]), w[5]
    if mode == "-":
        if any(s >= a and e <= b for a, b in spans): inside.append(ms)
        elif all(e < a or s > b for a, b in spans): outside.append(ms)
    elif mode == "off": off.append(ms)
    else: torch.append(ms)
def med(v): return "%.3f (%.3f-%.3f, n=%d)" % (st.median(v), min(v), max(v), len(v)) if v else "n/a"
if caps: print("ms/step, profd capture through Kineto: inside %s vs outside %s -> %+.1f %%" % (
    med(inside), med(outside), 100 * (st.median(inside) / st.median(outside) - 1) if inside and outside else float("nan")))
if caps: print("ms/step, torch.profiler CPU+CUDA: on %s vs off %s -> %+.1f %%" % (
    med(torch), med(off), 100 * (st.median(torch) / st.median(off) - 1) if torch and off else float("nan")))
ops = json.load(open(rt + "/ops.json"))
if ops.get("files"):
    shutil.copy(ops["files"][0]["path"], out + "/profd_ops.json.gz")
    print("operator capture:", ops["phase"], ops["summary"]["events"], "events")
PY
kill $PROFD
wait $PROFD 2>/dev/null
cp $RT/profd.log "$OUT/profd.log"
say "done"

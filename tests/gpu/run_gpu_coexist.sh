#!/usr/bin/env bash
# The coexistence matrix, run on the GPU host from the repository root:
#   tests/gpu/run_gpu_coexist.sh DIST OUT
# For each agent setting (none / default counters / PROFD_AGENT_COUNTERS=off / default with
# KINETO_USE_DAEMON=1) and each torch.profiler activity set (CUDA, CPU+CUDA), one PyTorch process
# (tests/gpu/coexist_workload.py) is captured by profd before, during and after torch.profiler
# sessions in it, and once more with a torch.profiler session starting in the middle of a profd
# capture (torch comes first: the capture is cut short). Each cell prints the kernels each tool
# recorded, the agent's cupti_sharing as `profctl agents --json` shows it, and a verdict; results
# land in OUT/coexist.txt (one JSON line per cell), OUT/coexist_summary.txt (verdicts).
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH
RT=/tmp/profd-coexist; rm -rf $RT; mkdir -p $RT
AGENT=$DIST/lib/libprofagent.so
STEPS=${STEPS:-10}
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
wait_line() {  # file pattern seconds
  for _ in $(seq $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "TIMEOUT waiting for '$2' in $1" >&2; return 1
}
# profd capture of pid $1 for ${3:-1s} -> one JSON object: exit code, kernels in the trace, the
# process's error and message.
capture() {
  local f=$RT/cap_$2.json
  profctl --json capture --pid "$1" --duration "${3:-1s}" > "$f" 2> "$f.err"
  local rc=$?
  python3 - "$f" "$f.err" $rc <<'PY'
import gzip, json, sys
rc = int(sys.argv[3]); out = {"exit": rc}
try:
    d = json.load(open(sys.argv[1]))
    out["message"] = d.get("message", "")[:300]
    procs = d.get("processes", [])
    if procs:
        out["error"] = procs[0].get("error", "")
        out["process_message"] = procs[0].get("message", "")[:300]
        en, dis = int(procs[0].get("enabled_unix_ns", 0)), int(procs[0].get("disabled_unix_ns", 0))
        if en and dis:
            out["window_s"] = round((dis - en) / 1e9, 3)
    files = d.get("files", [])
    if files:
        ev = json.load(gzip.open(files[0]["path"]))["traceEvents"]
        k = [e for e in ev if e.get("cat") == "kernel"]
        out["kernels"] = len(k)
        # CUPTI gives 0 timestamps to a kernel still running at the final forced flush: such a
        # kernel lies ~56 years before the others.
        mid = sorted(e["ts"] for e in k)[len(k) // 2] if k else 0
        out["kernels_zero_ts"] = sum(1 for e in k if e["ts"] < mid - 1e12)
        k = [e for e in k if e["ts"] >= mid - 1e12]
        if k:
            # Timestamps in CLOCK_REALTIME us: the kernels span no more than the capture window
            # (another profiler's timestamp source, e.g. TSC ticks, would stretch it).
            span = (max(e["ts"] + e.get("dur", 0) for e in k) - min(e["ts"] for e in k)) / 1e6
            out["kernel_span_s"] = round(span, 3)
            durs = sorted(e.get("dur", 0) for e in k)
            out["kernel_median_us"] = durs[len(durs) // 2]
except Exception as e:  # noqa: BLE001
    out["error_reading"] = open(sys.argv[2]).read()[-300:] or str(e)
print(json.dumps(out))
PY
}
# The agent's cupti_sharing for pid $1 (profctl agents --json), trimmed to one JSON object.
sharing() {
  profctl --json agents | python3 -c "
import json, sys
a = [a for a in json.load(sys.stdin).get('agents', []) if a['pid'] == $1]
s = a[0].get('cupti_sharing', {}) if a else {}
print(json.dumps(s))"
}

profd --runtime_dir=$RT --capture_dir=$RT/captures --metrics_address=none \
  --store=file://$RT/store --spool_dir=$RT/spool > "$RT/profd.log" 2>&1 &
PROFD=$!
sleep 0.5
: > "$OUT/coexist.txt"
for agent in ${AGENTS:-none default off kineto_daemon}; do
  for acts in ${ACTS:-cuda cpu_cuda}; do
    cell=${agent}_$acts
    dir=$RT/$cell; mkdir -p $dir
    env=()
    [ $agent != none ] && env+=(CUDA_INJECTION64_PATH=$AGENT PROFD_AGENT_LOG=2)
    [ $agent = off ] && env+=(PROFD_AGENT_COUNTERS=off)
    # KINETO_USE_DAEMON=1: Kineto starts at import (before CUDA, so before the agent)
    [ $agent = kineto_daemon ] && env+=(KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=$dir)
    env+=(KINETO_LOG_LEVEL=0)
    env "${env[@]}" python3 tests/gpu/coexist_workload.py --activities $acts --steps $STEPS \
      --out $dir > $dir/w.out 2> $dir/w.err &
    W=$!
    wait_line $dir/w.out ready 120 || { kill $W; continue; }
    sleep 1.2
    before='null'; during='null'; after='null'; cut='null'; s_start='null'; s_during='null'; s_end='null'
    [ $agent != none ] && s_start=$(sharing $W) && before=$(capture $W ${cell}_before)
    kill -USR1 $W; wait_line $dir/w.out '"session": 1' 60
    [ $agent != none ] && after=$(capture $W ${cell}_after)
    kill -USR2 $W; wait_line $dir/w.out holding 30
    [ $agent != none ] && sleep 1.2 && s_during=$(sharing $W) && during=$(capture $W ${cell}_during)
    kill -USR2 $W; wait_line $dir/w.out released 60
    if [ $agent != none ]; then
      # torch.profiler starts while a profd capture runs: torch first, the capture cut short.
      nenabled=$(grep -c "CUPTI enabled for 6000 ms" $dir/w.err)
      capture $W ${cell}_cut 6s > $dir/cut.json &
      C=$!
      for _ in $(seq 200); do
        [ "$(grep -c "CUPTI enabled for 6000 ms" $dir/w.err)" -gt "$nenabled" ] && break; sleep 0.05
      done
      sleep 0.5
      kill -USR1 $W; wait_line $dir/w.out '"session": 3' 60
      wait $C; cut=$(cat $dir/cut.json)
      sleep 1.2; s_end=$(sharing $W)
    else
      kill -USR1 $W; wait_line $dir/w.out '"session": 3' 60
    fi
    torch=$(grep '^torchprof' $dir/w.out | grep '"session": 1' | head -1 | cut -d' ' -f2-)
    torch_cut=$(grep '^torchprof' $dir/w.out | grep '"session": 3' | head -1 | cut -d' ' -f2-)
    released=$(grep '^released' $dir/w.out | head -1 | cut -d' ' -f2-)
    echo "{\"cell\": \"$cell\", \"torch\": ${torch:-null}, \"torch_held\": ${released:-null}, \"torch_during_capture\": ${torch_cut:-null}, \"profd_before\": $before, \"profd_during\": $during, \"profd_after\": $after, \"profd_cut\": $cut, \"sharing_start\": $s_start, \"sharing_during\": $s_during, \"sharing_end\": $s_end}" | tee -a "$OUT/coexist.txt"
    grep '^cupti' $dir/w.out | sed "s/^/$cell /" >> "$OUT/coexist_cupti_maps.txt"
    kill $W; wait $W 2>/dev/null
  done
done
kill $PROFD; wait $PROFD 2>/dev/null
cp $RT/profd.log $RT/profd_coexist.log
(cd $RT && tar czf "$OUT/coexist_logs.tgz" profd_coexist.log */w.err */w.out)

# Verdicts: torch.profiler records what it records without the agent, every capture before and
# after a session works, the one during is refused clearly, the one a session interrupts is cut
# short with its events kept, and the agent says it shares CUPTI.
python3 - "$OUT/coexist.txt" <<'PY' | tee "$OUT/coexist_summary.txt"
import json, sys
cells = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref = {c["cell"][len("none_"):]: c for c in cells if c["cell"].startswith("none_")}
def kernels(x):
    return (x or {}).get("kernels")
for c in cells:
    agent = "kineto_daemon" if c["cell"].startswith("kineto_daemon") else c["cell"].split("_")[0]
    acts = c["cell"][len(agent) + 1:]
    bad = []
    r = ref.get(acts)
    want = kernels(r["torch"]) if r else None
    if kernels(c["torch"]) in (None, 0):
        bad.append("torch.profiler recorded no kernels")
    elif want is not None and kernels(c["torch"]) != want:
        bad.append(f"torch.profiler {kernels(c['torch'])} kernels, {want} without the agent")
    if agent != "none":
        tc = kernels(c.get("torch_during_capture"))
        if want is not None and tc != want:
            bad.append(f"torch session started during a capture: {tc} kernels, want {want}")
        if not kernels(c.get("torch_held")):
            bad.append("held torch session recorded no kernels")
        for k in ("profd_before", "profd_after", "profd_cut"):
            p = c.get(k) or {}
            if p.get("exit") != 0 or not p.get("kernels"):
                bad.append(f"{k}: exit {p.get('exit')}, {p.get('kernels')} kernels")
            elif p.get("kernel_span_s", 0) > p.get("window_s", 0) + 0.2:
                bad.append(f"{k}: kernels span {p.get('kernel_span_s')} s in a {p.get('window_s')} s window (timestamps?)")
        d = c.get("profd_during") or {}
        if d.get("exit") != 5 or "is tracing CUDA activity" not in d.get("process_message", "") + d.get("message", ""):
            bad.append(f"profd_during not refused clearly: {d}")
        cut = c.get("profd_cut") or {}
        if cut.get("exit") != 0 or cut.get("error") != "CAPTURE_ERROR_CUT_SHORT" or not cut.get("kernels"):
            bad.append(f"profd_cut: {cut}")
        for k in ("sharing_start", "sharing_end"):
            s = c.get(k) or {}
            if s.get("mode") != "CUPTI_SHARING_SHARED":
                bad.append(f"{k}: {s.get('mode')} {s.get('detail', '')}")
        if not (c.get("sharing_during") or {}).get("other_tracing"):
            bad.append("sharing_during: other_tracing not set while torch.profiler held CUPTI")
        if (c.get("sharing_end") or {}).get("captures_cut_short") != 1:
            bad.append("sharing_end: captures_cut_short != 1")
    notes = [f"{k}: {c[k]['kernels_zero_ts']} kernel(s) without timestamps"
             for k in ("profd_before", "profd_after", "profd_cut")
             if (c.get(k) or {}).get("kernels_zero_ts")]
    print(c["cell"], "PASS" if not bad else "FAIL: " + "; ".join(bad),
          "(note: " + "; ".join(notes) + ")" if notes else "")
PY

#!/usr/bin/env bash
# The coexistence matrix, run on the GPU host from the repository root:
#   tests/gpu/run_gpu_coexist.sh DIST OUT
# For each agent setting (none / default counters / PROFD_AGENT_COUNTERS=off) and each
# torch.profiler activity set (CUDA, CPU+CUDA), one PyTorch process (tests/gpu/coexist_workload.py)
# is captured by profd before, during and after torch.profiler sessions in it. Each cell prints
# the kernels each tool recorded; results land in OUT/coexist.txt (one JSON line per cell).
set -u
DIST=$(cd "$1" && pwd); OUT=$2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$DIST/lib:${LD_LIBRARY_PATH:-}
export PATH=$DIST/bin:$PATH
RT=/tmp/profd-coexist; rm -rf $RT; mkdir -p $RT
AGENT=$DIST/lib/libprofagent.so
export PROFD_TARGET=unix:$RT/profd.sock PROFD_AGENT_SOCKET=$RT/agent.sock
wait_line() {  # file pattern seconds
  for _ in $(seq $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "TIMEOUT waiting for '$2' in $1" >&2; return 1
}
# profd capture of pid $1 for 1 s -> one JSON object: exit code, kernels in the trace, message.
capture() {
  local f=$RT/cap_$2.json
  profctl --json capture --pid "$1" --duration 1s > "$f" 2> "$f.err"
  local rc=$?
  python3 - "$f" "$f.err" $rc <<'PY'
import gzip, json, sys
rc = int(sys.argv[3]); out = {"exit": rc}
try:
    d = json.load(open(sys.argv[1]))
    out["message"] = d.get("message", "")[:300]
    files = d.get("files", [])
    if files:
        ev = json.load(gzip.open(files[0]["path"]))["traceEvents"]
        out["kernels"] = sum(1 for e in ev if e.get("cat") == "kernel")
except Exception as e:  # noqa: BLE001
    out["error"] = open(sys.argv[2]).read()[-300:] or str(e)
print(json.dumps(out))
PY
}

profd --runtime_dir=$RT --capture_dir=$RT/captures --metrics_address=none \
  --store=file://$RT/store --spool_dir=$RT/spool > "$RT/profd.log" 2>&1 &
PROFD=$!
sleep 0.5
for agent in ${AGENTS:-none default off}; do
  for acts in ${ACTS:-cuda cpu_cuda}; do
    cell=${agent}_$acts
    dir=$RT/$cell; mkdir -p $dir
    env=()
    [ $agent != none ] && env+=(CUDA_INJECTION64_PATH=$AGENT PROFD_AGENT_LOG=2)
    [ $agent = off ] && env+=(PROFD_AGENT_COUNTERS=off)
    # KINETO_USE_DAEMON=1: Kineto starts at import (before CUDA, so before the agent)
    [ $agent = kineto_daemon ] && env+=(KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=$dir KINETO_LOG_LEVEL=0)
    [ $cell = default_cuda ] && env+=(KINETO_LOG_LEVEL=0)
    env "${env[@]}" python3 tests/gpu/coexist_workload.py --activities $acts --steps 10 \
      --out $dir > $dir/w.out 2> $dir/w.err &
    W=$!
    wait_line $dir/w.out ready 120 || { kill $W; continue; }
    sleep 1.2
    before='null'; during='null'; after='null'
    [ $agent != none ] && before=$(capture $W ${cell}_before)
    kill -USR1 $W; wait_line $dir/w.out torchprof 60
    [ $agent != none ] && after=$(capture $W ${cell}_after)
    kill -USR2 $W; wait_line $dir/w.out holding 30
    [ $agent != none ] && during=$(capture $W ${cell}_during)
    kill -USR2 $W; wait_line $dir/w.out released 60
    [ $agent != none ] && agents=$(profctl --json agents | python3 -c "import json,sys; print(json.dumps([a for a in json.load(sys.stdin).get('agents', []) if a['pid']==$W]))")
    torch=$(grep '^torchprof' $dir/w.out | head -1 | cut -d' ' -f2-)
    released=$(grep '^released' $dir/w.out | head -1 | cut -d' ' -f2-)
    echo "{\"cell\": \"$cell\", \"torch\": ${torch:-null}, \"torch_held\": ${released:-null}, \"profd_before\": $before, \"profd_during\": $during, \"profd_after\": $after}" | tee -a "$OUT/coexist.txt"
    grep '^cupti' $dir/w.out | sed "s/^/$cell /" >> "$OUT/coexist_cupti_maps.txt"
    [ $agent != none ] && echo "$cell ${agents:-}" >> "$OUT/coexist_agents.txt"
    kill $W; wait $W 2>/dev/null
  done
done
kill $PROFD; wait $PROFD 2>/dev/null
cp $RT/profd.log $RT/profd_coexist.log
(cd $RT && tar czf "$OUT/coexist_logs.tgz" profd_coexist.log */w.err */w.out)

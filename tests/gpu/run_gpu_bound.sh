#!/usr/bin/env bash
# Issue 11's "must show", on the GPU host, from the repository root:
#   tests/gpu/run_gpu_bound.sh DIST OUT
# 1. bound_workload.py under the agent runs a compute-bound GEMM loop, a memory-bound elementwise
#    copy and a launch-bound loop of tiny kernels, one phase after the other; each phase is
#    captured with `profctl capture --gpu-metrics` (2 s, 100 us samples) while it runs, and the
#    capture's report (`profctl report ID --json`) is kept: per-kernel counters and bound class.
#    Around each capture: the device's used memory (nvidia-smi, every ~0.1 s), the compute apps
#    nvidia-smi lists, profd's RSS, and how long the capture took.
# 2. profd stopped, the same kernels (bound_workload.py --ncu: 3 GEMMs, 3 copies, 50 tiny
#    kernels) under ncu WITHOUT the agent: SpeedOfLight plus the PM metrics profd samples,
#    --clock-control none; the report is kept (ncu_report.ncu-rep) and exported as CSV
#    (ncu --import ... --csv --page raw --print-units base --print-kernel-base demangled).
# 3. compare_ncu.py: profd vs ncu per kernel, bound classes, the copy's DRAM bytes/s vs truth.
# Results in OUT: summary.txt, compare.txt/compare.json, capture_P.json, report_P.json,
# workload.txt (truth lines), gpu_mem_P.txt, ncu.csv, ncu.log, profd.log.
# Bounded: every command runs under `timeout`, waits included, all of it
# ends within ~7.5 min (DEADLINE_S, then a few seconds of bookkeeping).
# Knobs (environment): CAPTURE_FLAGS (default "--gpu-metrics --gpu-metrics-interval 100us"),
#   INTERVAL_US (100; what compare_ncu.py judges kernel length by), CAPTURE_DURATION (2s),
#   PROFD_FLAGS (extra profd flags), NCU (ncu binary), NCU_METRICS, NCU_EXTRA, PHASES,
#   COPY_MIB (2000), DEADLINE_S (420).
set -u
DIST=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
source tests/gpu/gpu_lib.sh
T_START=$(date +%s)
DEADLINE=$((T_START + ${DEADLINE_S:-420}))
INTERVAL_US=${INTERVAL_US:-100}
CAPTURE_FLAGS=${CAPTURE_FLAGS:---gpu-metrics --gpu-metrics-interval ${INTERVAL_US}us}
CAPTURE_DURATION=${CAPTURE_DURATION:-2s}
PHASES=${PHASES:-gemm copy tiny}
PHASES_CSV=$(echo "$PHASES" | tr ' ' ,)
COPY_MIB=${COPY_MIB:-2000}
AGENT=$DIST/lib/libprofagent.so
# A timeout of at most $1 s that ends before the deadline (at least 1 s).
tmo() {
  local left=$((DEADLINE - $(date +%s)))
  local t=$1
  [ "$left" -lt "$t" ] && t=$left
  [ "$t" -lt 1 ] && t=1
  echo "$t"
}
gpu_mem_mib() { timeout 10 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }
rss_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
now_ns() { date +%s%N; }

say "# profd per-kernel GPU counters vs ncu (run_gpu_bound.sh), $(date -u +%FT%TZ), $(timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
timeout 10 nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
MEM_BEFORE_PROFD=$(gpu_mem_mib)
# shellcheck disable=SC2086  # PROFD_FLAGS: several flags
start_profd bound ${PROFD_FLAGS:-}
sleep 1
MEM_PROFD_IDLE=$(gpu_mem_mib)
say "device memory used: ${MEM_BEFORE_PROFD} MiB before profd, ${MEM_PROFD_IDLE} MiB with profd idle; profd RSS $(rss_kb "$PROFD_PID" VmRSS) kB"
if ! kill -0 "$PROFD_PID" 2>/dev/null; then
  say "profd did not start: $(tail -3 "$RT/profd.log")"
fi

# 1. The phases under the agent, each captured while it runs.
GO=$RT/go STOP=$RT/stop
rm -f "$GO" "$STOP"
CUDA_INJECTION64_PATH=$AGENT timeout "$(tmo 330)" python3 tests/gpu/bound_workload.py \
  --phases "$PHASES_CSV" --seconds 20 --copy-mib "$COPY_MIB" \
  --wait-file "$GO" --stop-file "$STOP" --wait-timeout 120 \
  > "$OUT/workload.txt" 2> "$OUT/workload.err" &
W=$!  # timeout's pid; python's own (the one to capture) is in the ready line
WPID=""
if wait_line "$OUT/workload.txt" '"event": "ready"' "$(tmo 120)"; then
  say "workload: $(grep '"event": "ready"' "$OUT/workload.txt")"
  WPID=$(python3 -c "import json,sys; print(next(json.loads(l)['pid'] for l in open(sys.argv[1]) if '\"ready\"' in l))" "$OUT/workload.txt")
else
  say "workload not ready: $(tail -3 "$OUT/workload.err")"
fi
for ph in $PHASES; do
  if [ -z "$WPID" ] || ! kill -0 "$WPID" 2>/dev/null; then
    say "$ph: the workload is gone: $(tail -3 "$OUT/workload.err")"
    break
  fi
  wait_line "$OUT/workload.txt" "\"event\": \"waiting\", \"phase\": \"$ph\"" "$(tmo 60)" || break
  touch "$GO"
  wait_line "$OUT/workload.txt" "\"event\": \"phase_start\", \"phase\": \"$ph\"" "$(tmo 30)" || break
  sleep 0.5  # steady state before the capture
  before=""
  for _ in 1 2 3; do before="$before $(gpu_mem_mib)"; done
  rss_before=$(rss_kb "$PROFD_PID" VmRSS)
  ( while :; do echo "$(now_ns) $(gpu_mem_mib)"; sleep 0.1; done ) > "$OUT/gpu_mem_$ph.txt" 2>/dev/null &
  MS=$!
  ( sleep 1.2; timeout 10 nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory \
      --format=csv,noheader > "$OUT/compute_apps_$ph.txt" 2>&1 ) &
  CA=$!
  t0=$(now_ns)
  # shellcheck disable=SC2086
  timeout "$(tmo 60)" profctl capture --pid "$WPID" --duration "$CAPTURE_DURATION" $CAPTURE_FLAGS \
    --no-progress --json > "$OUT/capture_$ph.json" 2> "$OUT/capture_$ph.err"
  rc=$?
  t1=$(now_ns)
  kill $MS 2>/dev/null; wait $MS 2>/dev/null
  wait $CA 2>/dev/null
  rss_after=$(rss_kb "$PROFD_PID" VmRSS); hwm=$(rss_kb "$PROFD_PID" VmHWM)
  touch "$STOP"
  wait_line "$OUT/workload.txt" "\"event\": \"phase\", \"phase\": \"$ph\"" "$(tmo 60)"
  id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('capture_id',''))" \
    "$OUT/capture_$ph.json" 2>/dev/null)
  say "$ph: profctl capture exit $rc, ${id:-no capture id}, returned after $(( (t1 - t0) / 1000000 )) ms$( [ $rc -ne 0 ] && echo ": $(tail -2 "$OUT/capture_$ph.err" | tr '\n' ' ')")"
  python3 - "$OUT/capture_$ph.json" "$OUT/gpu_mem_$ph.txt" "$before" "$rss_before" "$rss_after" "$hwm" "$OUT/compute_apps_$ph.txt" "$PROFD_PID" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
cap, memf, before, rss0, rss1, hwm, apps, profd = sys.argv[1:9]
try:
    d = json.load(open(cap))
    req, st, fin = (int(d.get(k, 0) or 0) for k in ("requested_unix_ns", "started_unix_ns", "finished_unix_ns"))
    procs = d.get("processes", [])
    p = procs[0] if procs else {}
    print("  capture %s: requested->started %.0f ms, started->finished %.0f ms (asked %s ms), start latency %.1f ms, events %s, dropped %s, files %s"
          % (d.get("phase"), (st - req) / 1e6 if st and req else -1, (fin - st) / 1e6 if fin and st else -1,
             d.get("duration_ms"), int(p.get("start_latency_ns", 0) or 0) / 1e6, p.get("events"),
             p.get("dropped_records"), [f.get("path") for f in d.get("files", [])]))
except Exception as e:  # noqa: BLE001
    print("  capture JSON unreadable:", e)
b = [int(x) for x in before.split() if x.strip().isdigit()]
m = [int(l.split()[1]) for l in open(memf) if len(l.split()) == 2 and l.split()[1].isdigit()]
if b and m:
    base = sorted(b)[len(b) // 2]
    print("  device memory used: %d MiB before the capture, %d..%d MiB during it (%d readings): max %+d MiB"
          % (base, min(m), max(m), len(m), max(m) - base))
else:
    print("  device memory: no readings")
try:
    lines = [l.strip() for l in open(apps) if l.strip()]
    mine = [l for l in lines if l.split(",")[0].strip() == profd]
    print("  nvidia-smi compute apps during the capture: %d; profd (pid %s): %s" % (len(lines), profd, mine or "not listed (no CUDA context)"))
except OSError:
    pass
print("  profd RSS %s kB before, %s kB after the capture (peak VmHWM %s kB)" % (rss0 or "?", rss1 or "?", hwm or "?"))
PY
  if [ -n "$id" ]; then
    timeout "$(tmo 90)" profctl report "$id" --json --top 50 > "$OUT/report_$ph.json" 2> "$OUT/report_$ph.err"
    rrc=$?
    if [ $rrc -ne 0 ]; then  # by id failed: the trace file or capture folder the JSON names
      t=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['files'][0]['path'] if d.get('files') else d.get('location',''))" "$OUT/capture_$ph.json" 2>/dev/null)
      [ -n "$t" ] && timeout "$(tmo 90)" profctl report "$t" --json --top 50 > "$OUT/report_$ph.json" 2>> "$OUT/report_$ph.err"
      rrc=$?
    fi
    say "  profctl report exit $rrc"
    timeout "$(tmo 60)" profctl report "$id" --top 10 > "$OUT/report_$ph.txt" 2>&1
  fi
done
wait_line "$OUT/workload.txt" '"event": "done"' "$(tmo 30)"
kill $W 2>/dev/null; wait $W 2>/dev/null
timeout 10 profctl --json captures --limit 8 > "$OUT/captures.json" 2>&1
cp "$RT/profd.log" "$OUT/profd.log" 2>/dev/null
say "profd RSS at the end $(rss_kb "$PROFD_PID" VmRSS) kB, peak $(rss_kb "$PROFD_PID" VmHWM) kB"
kill "$PROFD_PID" 2>/dev/null; wait "$PROFD_PID" 2>/dev/null
grep -iE "pm|counter|sampl|cupti" "$OUT/profd.log" | head -20 | sed 's/^/  profd.log: /' | tee -a "$OUT/summary.txt"

# 2. ncu on the same kernels, without the agent and with profd stopped.
NCU=${NCU:-}
if [ -n "$NCU" ] && [ ! -x "$NCU" ]; then
  say "ncu: NCU=$NCU is not an executable; looking elsewhere"
  NCU=""
fi
for c in /usr/local/cuda/bin/ncu "$(command -v ncu 2>/dev/null)" /usr/local/cuda/nsight-compute*/ncu \
         /opt/nvidia/nsight-compute/*/ncu; do
  [ -z "$NCU" ] && [ -n "$c" ] && [ -x "$c" ] && NCU=$c
done
if [ -z "$NCU" ]; then
  say "ncu: not found (NCU=, /usr/local/cuda/bin/ncu, PATH, /usr/local/cuda/nsight-compute*, /opt/nvidia/nsight-compute/*): ncu comparison skipped"
else
  say "ncu: $NCU, $(timeout 30 "$NCU" --version 2>&1 | tail -1)"
  WANT=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second
  # Tensor-pipe alternatives, kept only if this ncu knows their base name (an unknown metric
  # makes ncu profile nothing): which one the chip has is not known here.
  ALT=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
  timeout "$(tmo 60)" "$NCU" --query-metrics --devices 0 > "$OUT/ncu_query_metrics.txt" 2>&1
  if [ -n "${NCU_METRICS:-}" ]; then
    METRICS=$NCU_METRICS
  else
    METRICS=$(python3 - "$OUT/ncu_query_metrics.txt" "$WANT" "$ALT" 2> "$OUT/ncu_metrics_left_out.txt" <<'PY'
import sys
known = {l.split()[0] for l in open(sys.argv[1], errors="replace") if l.strip() and "__" in l.split()[0]}
want, alt = sys.argv[2].split(","), sys.argv[3].split(",")
if len(known) < 50:  # the query failed: ask for what was asked
    print(",".join(want))
    print("(--query-metrics failed: nothing checked)", file=sys.stderr)
    sys.exit()
keep = [m for m in want + alt if m.split(".")[0] in known]
print(",".join(keep))
print(" ".join(m for m in want + alt if m not in keep) or "none", file=sys.stderr)
PY
)
  fi
  say "ncu metrics: $METRICS (unknown to this ncu, left out: $(cat "$OUT/ncu_metrics_left_out.txt" 2>/dev/null))"
  t0=$(now_ns)
  # shellcheck disable=SC2086
  timeout "$(tmo 240)" "$NCU" --log-file "$OUT/ncu.log" -f -o "$OUT/ncu_report" \
    --profile-from-start off --target-processes all --clock-control none \
    --section SpeedOfLight --metrics "$METRICS" ${NCU_EXTRA:-} \
    python3 tests/gpu/bound_workload.py --ncu --phases "$PHASES_CSV" --copy-mib "$COPY_MIB" \
    > "$OUT/ncu_app.txt" 2> "$OUT/ncu_app.err"
  nrc=$?
  if [ ! -f "$OUT/ncu_report.ncu-rep" ] && cat "$OUT/ncu.log" "$OUT/ncu_app.txt" "$OUT/ncu_app.err" 2>/dev/null | grep -qi "metric"; then
    # A metric it refused: once more with what every recent ncu has (the section's own metrics).
    say "ncu refused a metric ($(cat "$OUT/ncu.log" "$OUT/ncu_app.txt" "$OUT/ncu_app.err" 2>/dev/null | grep -m1 -i 'error')): again with the basic ones"
    cat "$OUT/ncu.log" "$OUT/ncu_app.txt" "$OUT/ncu_app.err" > "$OUT/ncu_first_try.log" 2>/dev/null
    METRICS=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second
    # shellcheck disable=SC2086
    timeout "$(tmo 240)" "$NCU" --log-file "$OUT/ncu.log" -f -o "$OUT/ncu_report" \
      --profile-from-start off --target-processes all --clock-control none \
      --section SpeedOfLight --metrics "$METRICS" ${NCU_EXTRA:-} \
      python3 tests/gpu/bound_workload.py --ncu --phases "$PHASES_CSV" --copy-mib "$COPY_MIB" \
      > "$OUT/ncu_app.txt" 2> "$OUT/ncu_app.err"
    nrc=$?
  fi
  say "ncu profile: exit $nrc after $(( ($(now_ns) - t0) / 1000000 )) ms; $(grep -c '==PROF== Profiling' "$OUT/ncu.log" 2>/dev/null) kernels profiled; $(grep -m2 -E '==(ERROR|WARNING)==' "$OUT/ncu.log" | tr '\n' ' ')"
  if [ -f "$OUT/ncu_report.ncu-rep" ]; then
    timeout "$(tmo 60)" "$NCU" --import "$OUT/ncu_report.ncu-rep" --csv --page raw --print-units base \
      --print-kernel-base demangled > "$OUT/ncu.csv" 2> "$OUT/ncu_import.err"
    irc=$?
    if [ $irc -ne 0 ] || ! grep -q '^"ID"' "$OUT/ncu.csv"; then  # the plainest form this ncu takes
      timeout "$(tmo 60)" "$NCU" --import "$OUT/ncu_report.ncu-rep" --csv --page raw \
        > "$OUT/ncu.csv" 2>> "$OUT/ncu_import.err"
      irc=$?
    fi
    say "ncu CSV: exit $irc, $(($(grep -c '^"' "$OUT/ncu.csv") - 2)) kernel rows (raw page: header + units rows)"
  fi
fi

# 3. The comparison.
python3 tests/gpu/compare_ncu.py "$OUT" --interval-us "$INTERVAL_US" > "$OUT/compare.txt" 2>&1
tee -a "$OUT/summary.txt" < "$OUT/compare.txt"
say "run_gpu_bound.sh done in $(( $(date +%s) - T_START )) s"

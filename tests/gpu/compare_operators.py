"""Compares profd's operator table with torch.profiler's key_averages for the same steps:
  compare_operators.py PROFD_REPORT.json TORCH_KEY_AVERAGES.json [--calls-only] [--torch-trace T]
(--calls-only: as many steps of another run, whose kernel times differ; only the calls must.)
PROFD_REPORT.json is `profctl report --json --top 1000 TRACE` of a profd capture; the key_averages
file is what tests/gpu/regression_worker.py (or record_torch_fixtures.py) wrote. Prints, per aten
operator, calls and total CUDA time side by side, and the worst difference.

--torch-trace T: the report is of T, the trace torch.profiler exported for those very steps. torch
counts some GPU time twice there (docs/ANALYSIS.md, "Operator table"): the profiler's overhead
event ("Activity Buffer Request") gets the kernels of the operator it interrupted, and every
operator around it adds them again to its CUDA total; profd keeps the true sum. For the operators
that enclose an overhead event in T, up to torch's device time of the overhead row is that known
double count: it is shown in its own column and taken out before the difference is judged."""
import argparse
import gzip
import json

ap = argparse.ArgumentParser()
ap.add_argument("report")
ap.add_argument("key_averages")
ap.add_argument("--calls-only", action="store_true")
ap.add_argument("--torch-trace")
args = ap.parse_args()

OVERHEAD = "Activity Buffer Request"
report = json.load(open(args.report))
ours = {o["name"]: o for o in report["operators"]}
rows = json.load(open(args.key_averages))["operators"]
torch_ops = [o for o in rows if o["device_type"] == "CPU" and o["key"].startswith("aten::")]
double_us = sum(o["device_time_total_us"] for o in rows if o["key"] == OVERHEAD)

# Operators around an overhead event: on the thread with most operators (where torch puts it).
around = set()
if args.torch_trace and double_us > 0:
    opener = gzip.open if args.torch_trace.endswith(".gz") else open
    with opener(args.torch_trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    per_thread = {}
    for e in cpu_ops:
        per_thread[(e["pid"], e["tid"])] = per_thread.get((e["pid"], e["tid"]), 0) + 1
    main = max(per_thread, key=per_thread.get) if per_thread else None
    for o in (e for e in events if e.get("cat") == "overhead" and e.get("name") == OVERHEAD):
        around.update(e["name"] for e in cpu_ops if (e["pid"], e["tid"]) == main and
                      e["ts"] <= o["ts"] and e["ts"] + e["dur"] >= o["ts"] + o["dur"])

worst, calls_differ, missing = 0.0, [], []
print("%-44s %7s %7s %11s %11s %9s %7s" % ("operator", "calls", "profd", "CUDA us", "profd us",
                                           "torch 2x", "diff"))
for o in sorted(torch_ops, key=lambda o: -o["device_time_total_us"]):
    p = ours.get(o["key"])
    if p is None:
        missing.append(o["key"])
        continue
    if p["calls"] != o["count"]:
        calls_differ.append(o["key"])
    t, q = o["device_time_total_us"], p["cuda_total_ns"] / 1e3
    twice = min(double_us, max(0.0, t - q)) if o["key"] in around else 0.0
    diff = 100 * (q - (t - twice)) / (t - twice) if t - twice > 0 else 0.0
    worst = max(worst, abs(diff))
    if t > 0:
        print("%-44s %7d %7d %11.1f %11.1f %9.1f %+6.2f%%" % (o["key"][:44], o["count"], p["calls"],
                                                           t, q, twice, diff))
print("%d operators: calls equal for %d; worst CUDA-time difference %.2f %%%s; missing: %s"
      % (len(torch_ops), len(torch_ops) - len(calls_differ) - len(missing), worst,
         " (torch's overhead double count of %.1f us taken out of %d operators around it)"
         % (double_us, len(around)) if around else "", ", ".join(missing) or "none"))
raise SystemExit(1 if calls_differ or missing or (worst > 2.0 and not args.calls_only) else 0)

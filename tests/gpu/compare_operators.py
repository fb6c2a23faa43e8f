"""Compares profd's operator table with torch.profiler's key_averages for the same steps:
  compare_operators.py PROFD_REPORT.json TORCH_KEY_AVERAGES.json [--calls-only]
(--calls-only: as many steps of another run, whose kernel times differ; only the calls must.)
PROFD_REPORT.json is `profctl report --json --top 1000 TRACE` of a profd capture; the key_averages
file is what tests/gpu/kineto_workload.py (or record_torch_fixtures.py) wrote. Prints, per aten
operator, calls and total CUDA time side by side, and the worst difference."""
import json
import sys

report = json.load(open(sys.argv[1]))
ours = {o["name"]: o for o in report["operators"]}
torch_ops = [o for o in json.load(open(sys.argv[2]))["operators"]
             if o["device_type"] == "CPU" and o["key"].startswith("aten::")]
worst, calls_differ, missing = 0.0, [], []
print("%-44s %7s %7s %11s %11s %7s" % ("operator", "calls", "profd", "CUDA us", "profd us", "diff"))
for o in sorted(torch_ops, key=lambda o: -o["device_time_total_us"]):
    p = ours.get(o["key"])
    if p is None:
        missing.append(o["key"])
        continue
    if p["calls"] != o["count"]:
        calls_differ.append(o["key"])
    t, q = o["device_time_total_us"], p["cuda_total_ns"] / 1e3
    diff = 100 * (q - t) / t if t > 0 else 0.0
    worst = max(worst, abs(diff))
    if t > 0:
        print("%-44s %7d %7d %11.1f %11.1f %+6.2f%%" % (o["key"][:44], o["count"], p["calls"], t, q,
                                                      diff))
print("%d operators: calls equal for %d; worst CUDA-time difference %.2f %%; missing: %s"
      % (len(torch_ops), len(torch_ops) - len(calls_differ) - len(missing), worst,
         ", ".join(missing) or "none"))
calls_only = "--calls-only" in sys.argv[3:]
sys.exit(1 if calls_differ or missing or (worst > 2.0 and not calls_only) else 0)

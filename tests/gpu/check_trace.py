"""Reads a profd capture's trace (.json.gz) and prints what the GPU tests compare, as JSON:
kernel count (all, and by a name filter), kernel time, memcpy bytes by direction, memsets,
flows, dropped records."""
import gzip
import json
import sys

path = sys.argv[1]
name_filter = sys.argv[2] if len(sys.argv) > 2 else ""
with gzip.open(path, "rt") as f:
    trace = json.load(f)
ev = trace["traceEvents"]
kernels = [e for e in ev if e.get("cat") == "kernel"]
matching = [e for e in kernels if name_filter in e["name"]]
copies = {}
for e in ev:
    if e.get("cat") == "gpu_memcpy":
        k = e["args"]["copy kind"]
        copies[k] = copies.get(k, 0) + e["args"]["bytes"]
out = {
    "kernels": len(kernels),
    "kernels_matching": len(matching),
    "kernel_us": sum(e["dur"] for e in kernels),
    "memcpy_bytes": copies,
    "memsets": sum(1 for e in ev if e.get("cat") == "gpu_memset"),
    "runtime_calls": sum(1 for e in ev if e.get("cat") == "cuda_runtime"),
    "launch_calls": sum(1 for e in ev if e.get("cat") == "cuda_runtime" and "Launch" in e["name"]),
    "flows_start": sum(1 for e in ev if e.get("ph") == "s"),
    "flows_end": sum(1 for e in ev if e.get("ph") == "f"),
    "syncs": sum(1 for e in ev if e.get("cat") == "cuda_sync"),
    "dropped_records": trace["profd"]["dropped_records"],
    "truncated": trace["profd"]["truncated"],
    "devices": [d["name"] for d in trace.get("deviceProperties", [])],
    "runtime_names": sorted({e["name"] for e in ev if e.get("cat") == "cuda_runtime"})[:20],
}
print(json.dumps(out))

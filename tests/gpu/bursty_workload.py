"""Serving-shaped GPU work with its own truth, for the always-on numbers check of the GPU gate
(tests/gpu/regression.py, phase C). Driven on stdin; answers one "@ {json}" line per command.

  calibrate                    kernels per bf16 GEMM and per 1-element add_ (torch.profiler),
                               and one GEMM's GPU time
  periodic PERIOD DUTY SECONDS GEMMs for DUTY of every PERIOD seconds, idle the rest
  burst SECONDS                20 GEMMs then synchronize, again and again
  tiny SECONDS                 a loop of 1-element add_ (launch-bound)
  quit

Each workload answers {"busy": fraction of the wall time a kernel ran (CUDA events around the GPU
work; for `tiny`, the kernels' mean duration from the calibration times their count),
"launches": kernel launches made (the operations done times the kernels per operation)}.
"""
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
one = torch.zeros(1, device="cuda")
cal = {}


def answer(obj):
    sys.stdout.write("@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def kernels_of(fn, n):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
          and not e.name.startswith(("Memcpy", "Memset"))]
    return len(ks) / n, (sum(e.device_time for e in ks) / len(ks) if ks else 0.0)


def calibrate():
    for _ in range(20):
        torch.matmul(a, a)
        one.add_(1)
    torch.cuda.synchronize()
    cal["gemm_kernels"], _ = kernels_of(lambda: torch.matmul(a, a), 20)
    cal["add_kernels"], cal["add_us"] = kernels_of(lambda: one.add_(1), 2000)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(50):
        torch.matmul(a, a)
    e1.record()
    torch.cuda.synchronize()
    cal["gemm_ms"] = e0.elapsed_time(e1) / 50
    return cal


def periodic(period, duty, seconds):
    per_period = max(1, round(duty * period * 1000 / cal["gemm_ms"]))
    busy_ms, gemms = 0.0, 0
    start = time.perf_counter()
    k = 0
    while time.perf_counter() - start < seconds:
        t = start + k * period
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(per_period):
            torch.matmul(a, a)
        e1.record()
        e1.synchronize()
        busy_ms += e0.elapsed_time(e1)
        gemms += per_period
        k += 1
        time.sleep(max(0.0, start + k * period - time.perf_counter()))
    wall = time.perf_counter() - start
    return {"busy": busy_ms / 1000 / wall, "launches": round(gemms * cal["gemm_kernels"]),
            "wall_s": wall, "gemms_per_period": per_period}


def burst(seconds):
    busy_ms, gemms = 0.0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            torch.matmul(a, a)
        e1.record()
        torch.cuda.synchronize()
        busy_ms += e0.elapsed_time(e1)
        gemms += 20
    wall = time.perf_counter() - start
    return {"busy": busy_ms / 1000 / wall, "launches": round(gemms * cal["gemm_kernels"]),
            "wall_s": wall}


def tiny(seconds):
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(1000):
            one.add_(1)
        n += 1000
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return {"busy": n * cal["add_us"] / 1e6 / wall, "launches": round(n * cal["add_kernels"]),
            "wall_s": wall, "adds": n}


def main():
    for line in sys.stdin:
        p = line.split()
        if not p:
            continue
        if p[0] == "quit":
            answer({"bye": True})
            return
        if p[0] == "calibrate":
            answer(calibrate())
        elif p[0] == "periodic":
            answer(periodic(float(p[1]), float(p[2]), float(p[3])))
        elif p[0] == "burst":
            answer(burst(float(p[1])))
        elif p[0] == "tiny":
            answer(tiny(float(p[1])))


if __name__ == "__main__":
    main()

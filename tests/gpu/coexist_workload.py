"""A PyTorch process that runs GPT-2 steps without pause and, on request, torch.profiler sessions:
the workload of the coexistence matrix (tests/gpu/run_gpu_coexist.sh).

  coexist_workload.py --activities cuda|cpu_cuda --steps N --out DIR

prints "ready", then steps continuously (so profd captures see kernels) until SIGTERM.
  SIGUSR1: the next N steps run under torch.profiler (the given activities); the trace is exported
           to DIR/torch_<k>.json and one line "torchprof {json}" gives its kernels and the
           kernels torch.profiler's key_averages counted.
  SIGUSR2: starts torch.profiler and keeps it on (CUPTI held by Kineto) until the next SIGUSR2;
           prints "holding" and then "released {json}".
Each "cupti" line lists the libcupti files mapped in the process at that point.
"""
import json
import os
import signal

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM})
import argparse
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from gpt2_workload import model_and_input, step  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def cupti_maps(when):
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "cupti" in line})
    print("cupti", when, json.dumps(paths), flush=True)


def kernel_count(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    names = sorted({e["name"] for e in kernels})
    return len(kernels), names


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--activities", default="cuda", choices=["cuda", "cpu_cuda"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    activities = [ProfilerActivity.CUDA]
    if a.activities == "cpu_cuda":
        activities.insert(0, ProfilerActivity.CPU)
    cupti_maps("after-import")
    model, ids = model_and_input()
    for _ in range(10):
        step(model, ids)
    torch.cuda.synchronize()
    cupti_maps("after-cuda-init")
    print("ready", flush=True)
    session = 0
    held = None
    pending = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM}
    while True:
        sig = signal.sigtimedwait(pending, 0)
        if sig is not None and sig.si_signo == signal.SIGTERM:
            return
        if sig is not None and sig.si_signo == signal.SIGUSR1:
            session += 1
            out = os.path.join(a.out, "torch_%d.json" % session)
            with profile(activities=activities) as prof:
                for _ in range(a.steps):
                    step(model, ids)
                torch.cuda.synchronize()
            prof.export_chrome_trace(out)
            n, names = kernel_count(out)
            avg_kernels = sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")
            print("torchprof " + json.dumps({"session": session, "steps": a.steps, "kernels": n,
                                             "kernels_per_step": n / a.steps,
                                             "key_averages_cuda_events": avg_kernels,
                                             "kernel_names": len(names)}), flush=True)
            cupti_maps("after-torchprof")
        elif sig is not None and sig.si_signo == signal.SIGUSR2:
            if held is None:
                held = profile(activities=activities)
                held.start()
                print("holding", flush=True)
            else:
                held.stop()
                session += 1
                out = os.path.join(a.out, "torch_%d.json" % session)
                held.export_chrome_trace(out)
                n, _ = kernel_count(out)
                held = None
                print("released " + json.dumps({"session": session, "kernels": n}), flush=True)
        step(model, ids)


if __name__ == "__main__":
    main()

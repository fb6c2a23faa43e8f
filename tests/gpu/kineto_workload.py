"""GPT-2 small fp16 (batch 8x128) for the Kineto-path checks (tests/gpu/run_gpu_kineto.sh); run
with KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=... KINETO_CONFIG=... so profd can capture it.

  kineto_workload.py --out DIR [--steps N] [--window-steps S]

Phase "overhead": windows of S steps back to back, each printed as
  "window <k> <start_realtime_ns> <end_realtime_ns> <ms_per_step> <mode>"
with mode "-" (the driver captures through profd meanwhile; windows are classified afterwards by
the capture windows). On SIGUSR1, phase "torch": the same windows alternating off / torch
(torch.profiler CPU+CUDA around the window). On the next SIGUSR1, phase "ops": idle until
  SIGUSR2: run exactly N steps, print "steps <start_ns> <end_ns>" (profd captures meanwhile),
  SIGHUP: the same N steps under torch.profiler CPU+CUDA; its trace and key_averages go to DIR
           (torch_ops.json.gz, torch_ops_key_averages.json), then "torchprof done".
SIGTERM ends it.
"""
import signal

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP,
                                          signal.SIGTERM})
import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from gpt2_workload import model_and_input, step  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

ALL = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM}


def window(model, ids, steps):
    start = time.time_ns()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(model, ids)
    torch.cuda.synchronize()
    return start, time.time_ns(), (time.perf_counter() - t0) * 1000 / steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--window-steps", type=int, default=15)
    a = p.parse_args()
    model, ids = model_and_input()
    for _ in range(20):
        step(model, ids)
    torch.cuda.synchronize()
    print("ready", flush=True)
    phase, k = "overhead", 0
    while phase != "ops":
        sig = signal.sigtimedwait(ALL, 0)
        if sig is not None and sig.si_signo == signal.SIGTERM:
            return
        if sig is not None and sig.si_signo == signal.SIGUSR1:
            phase = "torch" if phase == "overhead" else "ops"
            print("phase", phase, flush=True)
            continue
        on = phase == "torch" and k % 2 == 1
        prof = None
        if on:
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.start()
        start, end, ms = window(model, ids, a.window_steps)
        if prof:
            prof.stop()
        mode = "-" if phase == "overhead" else ("torch" if on else "off")
        print("window %d %d %d %.4f %s" % (k, start, end, ms, mode), flush=True)
        k += 1
    while True:
        sig = signal.sigwait(ALL)
        if sig == signal.SIGTERM:
            return
        if sig == signal.SIGUSR2:
            start, end, _ = window(model, ids, a.steps)
            print("steps %d %d" % (start, end), flush=True)
        elif sig == signal.SIGHUP:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(a.steps):
                    step(model, ids)
                torch.cuda.synchronize()
            raw = os.path.join(tempfile.mkdtemp(), "trace.json")
            prof.export_chrome_trace(raw)
            with open(raw, "rb") as f, gzip.open(os.path.join(a.out, "torch_ops.json.gz"),
                                                 "wb") as g:
                shutil.copyfileobj(f, g)
            ops = [{"key": e.key, "count": e.count, "cpu_time_total_us": e.cpu_time_total,
                    "self_cpu_time_total_us": e.self_cpu_time_total,
                    "device_time_total_us": e.device_time_total,
                    "self_device_time_total_us": e.self_device_time_total,
                    "device_type": e.device_type.name} for e in prof.key_averages()]
            with open(os.path.join(a.out, "torch_ops_key_averages.json"), "w") as f:
                json.dump({"steps": a.steps, "torch": torch.__version__, "operators": ops}, f)
            print("torchprof done", flush=True)


if __name__ == "__main__":
    main()

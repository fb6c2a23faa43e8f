"""GPT-2 small fp16 inference (batch 8x128, random weights) for the GPU end-to-end tests.

  serve --steps N       warm up, print "ready", then on each SIGUSR1 run exactly N forward steps,
                        synchronize and print "steps done <ms per step>"; SIGTERM ends it.
  torchprof --steps N --out FILE
                        the same N steps under torch.profiler (CUDA activities), exported as a
                        Chrome trace; prints kernels per step and kernel time per step.
  hold                  keep torch.profiler active until SIGTERM (CUPTI held by Kineto).
  loop --windows W --steps N [--toggle none|counters|torch|mix]
                        W windows of N steps, printing each window's CLOCK_REALTIME start and end
                        and ms per step. --toggle alternates inside this one process (off, on, ...):
                        counters = the injected agent's callbacks (profagent_set_counters),
                        torch = torch.profiler with CUDA activities around the window's steps,
                        mix = off, profd capture (default kinds), off, profd capture without
                        sync records, off, torch.profiler CUDA, off, torch.profiler CPU+CUDA,
                        again: the profd captures are requested by running profctl (on PATH)
                        for this process and cancelled when the window ends.
"""
import ctypes
import os
import signal

# Before torch starts any thread: every thread inherits the mask, so SIGUSR1/SIGTERM reach only
# sigwait in the main thread (a thread with the default action would end the process).
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
import argparse
import json
import sys
import time

import torch

from gpt2_model import model_and_input, step  # noqa: F401 (the other scripts take them from here)


def serve(args):
    model, ids = model_and_input()
    for _ in range(10):
        step(model, ids)
    torch.cuda.synchronize()
    print("ready", flush=True)
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig == signal.SIGTERM:
            return
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(model, ids)
        torch.cuda.synchronize()
        print("steps done %.3f" % ((time.perf_counter() - t0) * 1000 / args.steps), flush=True)


def torchprof(args):
    from torch.profiler import ProfilerActivity, profile
    model, ids = model_and_input()
    for _ in range(10):
        step(model, ids)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step(model, ids)
        torch.cuda.synchronize()
    prof.export_chrome_trace(args.out)
    with open(args.out) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    print(json.dumps({"kernels_per_step": len(kernels) / args.steps,
                      "kernel_us_per_step": sum(e["dur"] for e in kernels) / args.steps}), flush=True)


def hold(args):
    from torch.profiler import ProfilerActivity, profile
    model, ids = model_and_input()
    with profile(activities=[ProfilerActivity.CUDA]):
        step(model, ids)
        print("holding", flush=True)
        signal.sigwait({signal.SIGTERM})


MIX = ["off", "profd", "off", "profd_nosync", "off", "torch_cuda", "off", "torch_cpu_cuda"]


def profd_capture(kinds):
    """Starts a profd capture of this process; returns (profctl process, capture id)."""
    import subprocess
    cmd = ["profctl", "--json", "capture", "--pid", str(os.getpid()), "--duration", "60s",
           "--no-progress"]
    if kinds:
        cmd += ["--kinds", kinds]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for _ in range(500):  # until CUPTI is on in this process
        out = subprocess.run(["profctl", "--json", "captures", "--limit", "1"], capture_output=True,
                             text=True).stdout
        try:
            c = json.loads(out)["captures"][0]
            if c["phase"] == "CAPTURE_PHASE_RUNNING" and int(
                    c["processes"][0].get("enabled_unix_ns", 0)):
                return p, c["capture_id"]
        except (ValueError, KeyError, IndexError):
            pass
        time.sleep(0.01)
    sys.exit("loop: the profd capture did not start")


def loop(args):
    model, ids = model_and_input()
    for _ in range(20):
        step(model, ids)
    torch.cuda.synchronize()
    set_counters = None
    if args.toggle == "counters":
        lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"], mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        set_counters = lib.profagent_set_counters
        if set_counters(0) != 0:
            sys.exit("loop: --toggle counters needs the agent injected with counters on")
    import subprocess
    from torch.profiler import ProfilerActivity, profile
    for w in range(args.windows):
        on = w % 2 == 1
        if set_counters:
            set_counters(1 if on else 0)
        prof = None
        capture = None
        mix = args.mix[w % len(args.mix)] if args.toggle == "mix" else None
        if (args.toggle == "torch" and on) or mix == "torch_cuda":
            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.start()
        elif mix == "torch_cpu_cuda":
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.start()
        elif mix in ("profd", "profd_nosync"):
            capture = profd_capture("" if mix == "profd" else "kernel,memcpy,memset,runtime")
        elif mix and mix.startswith("profd:"):  # profd:kernel+runtime: a capture of those kinds
            capture = profd_capture(mix[len("profd:"):].replace("+", ","))
        start = time.time_ns()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(model, ids)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000 / args.steps
        end = time.time_ns()
        if prof:
            prof.stop()
        if capture:
            subprocess.run(["profctl", "cancel", capture[1]], capture_output=True)
            capture[0].wait()
        cond = "-" if args.toggle == "none" else ("on" if on else "off")
        if mix:
            cond = mix
        print("window %d %d %d %.4f %s" % (w, start, end, ms, cond), flush=True)
    if set_counters:
        set_counters(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["serve", "torchprof", "hold", "loop"])
    p.add_argument("--windows", type=int, default=16)
    p.add_argument("--toggle", default="none", choices=["none", "counters", "torch", "mix"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--mix", type=lambda v: v.split(","), default=MIX,
                   help="--toggle mix's conditions in turn: off, profd, profd_nosync, "
                   "profd:KIND+KIND, torch_cuda, torch_cpu_cuda")
    p.add_argument("--out", default="torch_trace.json")
    a = p.parse_args()
    if a.mode in ("torchprof", "loop"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1, signal.SIGTERM})
    {"serve": serve, "torchprof": torchprof, "hold": hold, "loop": loop}[a.mode](a)

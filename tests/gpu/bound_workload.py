"""Kernels of known character, for checking profd's per-kernel counters and bound classes against
what is run and against ncu (issue 11's "must show"; tests/gpu/run_gpu_bound.sh):

  gemm  torch.matmul of two SIZE x SIZE fp16 matrices into a preallocated output (cuBLAS; tensor
        pipes busy: compute-bound); truth: 2*SIZE^3 FLOP per kernel.
  copy  torch.add(x, y, out=z) over three fp16 tensors of COPY_MIB MiB each: one elementwise kernel
        (at::native::vectorized_elementwise_kernel<.., CUDAFunctor_add<c10::Half>, ..>) that reads
        2 and writes 1 tensor: memory-bound; truth: DRAM bytes/s = bytes moved per kernel
        (3 x COPY_MIB MiB) / the kernel's time, timed with CUDA events around each kernel.
        Not `dst.copy_(src)`: for same-dtype contiguous tensors PyTorch issues cudaMemcpyAsync
        (a memcpy, not a kernel: ncu does not profile it and profd lists it under copies). Each
        tensor stays under 2 GiB so that TensorIterator launches ONE kernel per op (32-bit indexing).
  tiny  x.add_(1) on a 1-element fp32 tensor, in a Python loop: ~2 us kernels launched every few
        us, the GPU mostly idle: launch/latency-bound.

Timed mode (default): for each phase of --phases, in order, run its kernels back to back for
--seconds (or until --stop-file appears), printing JSON lines on stdout:
  {"event": "ready", ...}                         after allocation and warm-up
  {"event": "waiting", "phase": P, ...}           with --wait-file: before P, until the file exists
                                                  (the file is removed when seen)
  {"event": "phase_start", "phase": P, ...}       P's kernels are being launched from now on
  {"event": "phase", "phase": P, ...truth...}     P ended: start/end CLOCK_REALTIME ns, launches,
                                                  kernel time (CUDA events) median/min/max, bytes and
                                                  FLOP per kernel, truth DRAM bytes/s, expected bound
  {"event": "done"}
--ncu: warm up, then between cudaProfilerStart/Stop (ncu --profile-from-start off) run
--ncu-gemms GEMMs, --ncu-copies copies and --ncu-tiny tiny kernels, synchronizing after each,
print {"event": "ncu_done", ...} and exit.

  python3 tests/gpu/bound_workload.py [--phases gemm,copy,tiny] [--seconds 6]
      [--wait-file PATH] [--stop-file PATH] [--size 8192] [--copy-mib 2000] [--ncu]
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

import torch

EXPECTED_BOUND = {"gemm": ["compute"], "copy": ["memory"], "tiny": ["launch", "latency"]}


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Phases:
    """The tensors and the one op of each phase, with what is known of one kernel of it."""

    def __init__(self, args, names):
        self.ops, self.info = {}, {}
        dev = torch.device("cuda", args.device)
        if "gemm" in names:
            n = args.size
            a = torch.randn(n, n, device=dev, dtype=torch.float16)
            b = torch.randn(n, n, device=dev, dtype=torch.float16)
            c = torch.empty(n, n, device=dev, dtype=torch.float16)
            self.ops["gemm"] = lambda: torch.matmul(a, b, out=c)
            self.info["gemm"] = {"op": "torch.matmul(a, b, out=c) fp16 %dx%d" % (n, n),
                                 "flops_per_kernel": 2 * n ** 3,
                                 "min_bytes_per_kernel": 3 * n * n * 2,
                                 "kernel_hint": "cuBLAS GEMM (nvjet_*/sm90_xmma_*/cutlass*)"}
        if "copy" in names:
            numel = args.copy_mib * (1 << 20) // 2
            if numel * 2 >= (1 << 31):
                sys.exit("--copy-mib must stay under 2048 (one kernel per op: 32-bit indexing)")
            x = torch.empty(numel, device=dev, dtype=torch.float16).fill_(1.0)
            y = torch.empty(numel, device=dev, dtype=torch.float16).fill_(2.0)
            z = torch.empty(numel, device=dev, dtype=torch.float16)
            self.ops["copy"] = lambda: torch.add(x, y, out=z)
            self.info["copy"] = {"op": "torch.add(x, y, out=z) fp16, 3 x %d MiB" % args.copy_mib,
                                 "bytes_per_kernel": 3 * numel * 2,
                                 "read_bytes_per_kernel": 2 * numel * 2,
                                 "write_bytes_per_kernel": numel * 2,
                                 "kernel_hint": "vectorized_elementwise_kernel<CUDAFunctor_add<c10::Half>>"}
        if "tiny" in names:
            t = torch.zeros(1, device=dev, dtype=torch.float32)
            self.ops["tiny"] = lambda: t.add_(1)
            self.info["tiny"] = {"op": "x.add_(1), x: 1 fp32 element", "bytes_per_kernel": 8,
                                 "kernel_hint": "vectorized_elementwise_kernel<..add..<float>>"}
        for name in names:
            if name not in self.ops:
                sys.exit("unknown phase %r (gemm, copy, tiny)" % name)
            self.info[name]["expected_bound"] = EXPECTED_BOUND[name]


def stop_asked(path):
    return bool(path) and os.path.exists(path)


def remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def wait_for(path, phase, timeout_s):
    emit(event="waiting", phase=phase, wait_file=path)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            emit(event="error", phase=phase, message="no %s after %.0f s" % (path, timeout_s))
            sys.exit(3)
        time.sleep(0.005)
    remove(path)


def run_long(op, seconds, stop_file, depth):
    """Kernels of ms back to back, at most `depth` in flight (no idle gap between them), each
    timed by a pair of CUDA events around it; returns (launches, kernel durations in ns)."""
    pending = collections.deque()
    durations = []
    launches = 0
    deadline = time.monotonic() + seconds
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        launches += 1
        pending.append((start, end))
        if len(pending) > depth:
            s, e = pending.popleft()
            e.synchronize()
            durations.append(s.elapsed_time(e) * 1e6)
        if time.monotonic() >= deadline or stop_asked(stop_file):
            break
    while pending:
        s, e = pending.popleft()
        e.synchronize()
        durations.append(s.elapsed_time(e) * 1e6)
    return launches, durations


def run_tiny(op, seconds, stop_file, batch=1000):
    """The tiny kernel as fast as Python launches it; once per batch one kernel is timed with
    events (the GPU is idle between launches, so the pair measures that kernel alone)."""
    durations = []
    launches = 0
    deadline = time.monotonic() + seconds
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while True:
        for _ in range(batch - 1):
            op()
        start.record()
        op()
        end.record()
        launches += batch
        end.synchronize()
        durations.append(start.elapsed_time(end) * 1e6)
        if time.monotonic() >= deadline or stop_asked(stop_file):
            break
    return launches, durations


def timed(args, phases, names):
    for name in names:
        if args.wait_file:
            wait_for(args.wait_file, name, args.wait_timeout)
        if args.stop_file:
            remove(args.stop_file)  # a stale one would end the phase at once
        torch.cuda.synchronize()
        start_ns = time.time_ns()
        emit(event="phase_start", phase=name, start_unix_ns=start_ns)
        if name == "tiny":
            launches, durations = run_tiny(phases.ops[name], args.seconds, args.stop_file)
        else:
            launches, durations = run_long(phases.ops[name], args.seconds, args.stop_file,
                                           args.depth)
        torch.cuda.synchronize()
        end_ns = time.time_ns()
        if args.stop_file:
            remove(args.stop_file)
        info = dict(phases.info[name])
        wall_s = (end_ns - start_ns) / 1e9
        med = statistics.median(durations) if durations else 0.0
        out = dict(event="phase", phase=name, start_unix_ns=start_ns, end_unix_ns=end_ns,
                   wall_s=round(wall_s, 4), launches=launches,
                   launches_per_second=round(launches / wall_s, 1) if wall_s else 0,
                   kernels_per_launch=1, timed_kernels=len(durations),
                   kernel_ns_median=round(med, 1),
                   kernel_ns_min=round(min(durations), 1) if durations else 0,
                   kernel_ns_max=round(max(durations), 1) if durations else 0, **info)
        if name != "tiny" and durations:
            out["gpu_busy_ratio_from_events"] = round(sum(durations) / 1e9 / wall_s, 4)
        if "bytes_per_kernel" in info and med > 0 and name != "tiny":
            out["truth_dram_bytes_per_second"] = info["bytes_per_kernel"] / (med / 1e9)
        if "flops_per_kernel" in info and med > 0:
            out["achieved_flops_per_second"] = info["flops_per_kernel"] / (med / 1e9)
        emit(**out)


def ncu_mode(args, phases, names):
    counts = {"gemm": args.ncu_gemms, "copy": args.ncu_copies, "tiny": args.ncu_tiny}
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # cudaProfilerStart: ncu --profile-from-start off begins here
    for name in names:
        for _ in range(counts[name]):
            phases.ops[name]()
            torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    emit(event="ncu_done", phases={n: dict(phases.info[n], kernels=counts[n]) for n in names})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default="gemm,copy,tiny")
    p.add_argument("--seconds", type=float, default=6.0,
                   help="longest a phase runs (--stop-file ends it earlier)")
    p.add_argument("--wait-file", default="", help="wait for this file before each phase")
    p.add_argument("--wait-timeout", type=float, default=180.0)
    p.add_argument("--stop-file", default="", help="end the running phase when this file appears")
    p.add_argument("--size", type=int, default=8192, help="GEMM matrix side")
    p.add_argument("--copy-mib", type=int, default=2000, help="MiB of each of the copy's 3 tensors")
    p.add_argument("--depth", type=int, default=4, help="GEMMs/copies in flight at most")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--ncu", action="store_true", help="a few kernels of each phase, for ncu")
    p.add_argument("--ncu-gemms", type=int, default=3)
    p.add_argument("--ncu-copies", type=int, default=3)
    p.add_argument("--ncu-tiny", type=int, default=50)
    args = p.parse_args()
    names = [n for n in args.phases.split(",") if n]
    torch.cuda.set_device(args.device)
    phases = Phases(args, names)
    for name in names:  # warm-up: cuBLAS handle and heuristics, kernels loaded, caching allocator
        for _ in range(2):
            phases.ops[name]()
    torch.cuda.synchronize()
    emit(event="ready", pid=os.getpid(), device=torch.cuda.get_device_name(args.device),
         torch=torch.__version__, cuda=torch.version.cuda, phases=names, size=args.size,
         copy_mib=args.copy_mib, mode="ncu" if args.ncu else "timed")
    if args.ncu:
        ncu_mode(args, phases, names)
    else:
        timed(args, phases, names)
    emit(event="done")


if __name__ == "__main__":
    main()

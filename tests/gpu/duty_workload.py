"""Known GPU load in phases, for checking hardware counters (issue 11) against what is run:
a large fp16 GEMM (compute-bound, tensor pipes), a large device-to-device copy (memory-bound),
and idle, in turn, each for --phase-ms; prints one line per phase,
`phase <name> <start_realtime_ns> <end_realtime_ns> <launches> <bytes moved>`, to stdout.

  python3 tests/gpu/duty_workload.py [--phases gemm,idle,copy,idle] [--phase-ms 1000] [--cycles 5]
"""
import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phases", default="gemm,idle,copy,idle")
    p.add_argument("--phase-ms", type=int, default=1000)
    p.add_argument("--cycles", type=int, default=5)
    args = p.parse_args()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)  # 1 GiB
    dst = torch.empty_like(src)
    torch.cuda.synchronize()
    print("ready", flush=True)
    for _ in range(args.cycles):
        for phase in args.phases.split(","):
            start = time.time_ns()
            stop = start + args.phase_ms * 1_000_000
            launches = moved = 0
            while time.time_ns() < stop:
                if phase == "gemm":
                    torch.mm(a, b)
                    launches += 1
                elif phase == "copy":
                    dst.copy_(src)
                    launches += 1
                    moved += 2 * src.numel()  # read + write
                else:
                    time.sleep(0.001)
                    continue
                if launches % 8 == 0:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            print("phase", phase, start, time.time_ns(), launches, moved, flush=True)


if __name__ == "__main__":
    main()

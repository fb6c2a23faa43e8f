"""Known GPU load in phases, for checking hardware counters (issue 11) against what is run:
a large fp16 GEMM (compute-bound, tensor pipes), a large device-to-device copy (memory-bound),
copies over the links (htod / dtoh: 256 MiB from / to pinned host memory over PCIe; p2p: 256 MiB
from GPU 0 to GPU 1, over NVLink where the GPUs have it), and idle, in turn, each for --phase-ms;
prints one line per phase,
`phase <name> <start_realtime_ns> <end_realtime_ns> <launches> <bytes moved>`, to stdout. A copy
phase's bytes are what its copies move: read + write for copy (the DRAM traffic), the bytes
crossing the link for htod, dtoh and p2p.

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
    phases = args.phases.split(",")
    link = {}  # phase -> (destination, source) of its copy
    if "htod" in phases or "dtoh" in phases:
        host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
        dev = torch.empty(256 << 20, device="cuda", dtype=torch.uint8)
        link["htod"] = (dev, host)
        link["dtoh"] = (host, dev)
    if "p2p" in phases:
        peer = torch.empty(256 << 20, device="cuda:1", dtype=torch.uint8)
        link["p2p"] = (peer, src[: 256 << 20])
    torch.cuda.synchronize()
    print("ready", flush=True)
    for _ in range(args.cycles):
        for phase in phases:
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
                elif phase in link:
                    to, frm = link[phase]
                    to.copy_(frm, non_blocking=True)
                    launches += 1
                    moved += frm.numel()
                else:
                    time.sleep(0.001)
                    continue
                if launches % 8 == 0:
                    torch.cuda.synchronize()
                    if phase == "p2p":
                        torch.cuda.synchronize(1)
            for d in range(torch.cuda.device_count()):
                torch.cuda.synchronize(d)
            print("phase", phase, start, time.time_ns(), launches, moved, flush=True)


if __name__ == "__main__":
    main()

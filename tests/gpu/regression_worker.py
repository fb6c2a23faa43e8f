"""One PyTorch process of the GPU regression gate (tests/gpu/run_regression.sh), driven line by line
on stdin; every answer is one JSON line on stdout (prefixed "@ ") so the driver can tell it from
anything else the process prints.

Workloads (each a step function with a fixed kernel mix, warmed up before the first command):
  resnet50     torchvision ResNet-50, batch 32 from pageable host memory, y.cpu(), argmax().item()
  gemm         bf16 4096^3 GEMMs (cuBLASLt launches its kernels through the driver API)
  compiled     a torch.compile'd MLP block (Triton kernels, launched through the driver API)
  graph        a CUDA-graph replay of an MLP (one cudaGraphLaunch per step)
  multistream  two threads, each on its own stream, small GEMMs and adds

Commands:
  torch cuda|cpu_cuda W S   S steps of W under torch.profiler; answers the trace's counts
                            (kernels, copies, memsets, launch calls by name) or the error raised
  steps W S                 S steps of W now (another profiler captures meanwhile), then sync
  ops W S DIR               S steps under torch.profiler CPU+CUDA; key_averages to DIR
  quit
"""
import json
import os
import sys
import tempfile
import threading
import time
import traceback

import torch
from torch.profiler import ProfilerActivity, profile

LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                "cudaGraphLaunch", "cuLaunchKernel", "cuLaunchKernelEx",
                "cuLaunchCooperativeKernel", "cuGraphLaunch")


def answer(obj):
    sys.stdout.write("@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def trace_counts(events):
    """Counts in a Chrome/Kineto trace's events, as torch.profiler and profd both write them."""
    c = {"kernels": 0, "memcpy": 0, "memset": 0, "runtime": 0, "sync": 0, "launches": {},
         "kernels_with_external_id": 0}
    for e in events:
        cat = e.get("cat", "")
        if e.get("ph") != "X":
            continue
        if cat == "kernel":
            c["kernels"] += 1
            if "External id" in e.get("args", {}):
                c["kernels_with_external_id"] += 1
        elif cat == "gpu_memcpy":
            c["memcpy"] += 1
        elif cat == "gpu_memset":
            c["memset"] += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            c["runtime"] += cat == "cuda_runtime"
            name = e.get("name", "")
            for suffix in ("_v7000", "_v3020", "_v11060", "_v10000", "_ptsz", "_ptds"):
                name = name.replace(suffix, "")
            if name in LAUNCH_NAMES:
                c["launches"][name] = c["launches"].get(name, 0) + 1
        elif cat == "cuda_sync":
            c["sync"] += 1
    return c


class Workloads:
    def __init__(self):
        import torchvision
        self.dev = torch.device("cuda")
        torch.backends.cudnn.benchmark = False
        self.resnet = torchvision.models.resnet50().to(self.dev).eval()
        self.images = torch.randn(32, 3, 224, 224)  # pageable host memory
        self.a = torch.randn(4096, 4096, device=self.dev, dtype=torch.bfloat16)
        self.b = torch.randn(4096, 4096, device=self.dev, dtype=torch.bfloat16)

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.LayerNorm(1024)
                self.up = torch.nn.Linear(1024, 4096)
                self.down = torch.nn.Linear(4096, 1024)

            def forward(self, x):
                return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

        self.block = Block().to(self.dev).half().eval()
        self.compiled = torch.compile(self.block)
        self.x = torch.randn(64, 1024, device=self.dev, dtype=torch.half)
        # A CUDA graph of the same block, eager, captured once.
        self.static_x = self.x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                self.block(self.static_x)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.static_y = self.block(self.static_x)
        self.streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        self.small = [torch.randn(256, 256, device=self.dev) for _ in range(2)]
        self.steps = {"resnet50": self.resnet50, "gemm": self.gemm, "compiled": self.compiled_step,
                      "graph": self.graph_step, "multistream": self.multistream}
        for name, fn in self.steps.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()

    @torch.no_grad()
    def resnet50(self):
        y = self.resnet(self.images.to(self.dev))
        y.cpu()
        y.argmax().item()

    def gemm(self):
        for _ in range(10):
            torch.matmul(self.a, self.b)

    @torch.no_grad()
    def compiled_step(self):
        for _ in range(4):
            self.compiled(self.x)

    def graph_step(self):
        self.graph.replay()

    def multistream(self):
        def work(i):
            with torch.cuda.stream(self.streams[i]):
                for _ in range(20):
                    torch.add(torch.matmul(self.small[i], self.small[i]), 1.0)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        torch.cuda.synchronize()

    def run(self, name, steps):
        fn = self.steps[name]
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()


def profile_steps(w, name, steps, activities):
    path = tempfile.mktemp(suffix=".json")
    with profile(activities=activities) as prof:
        w.run(name, steps)
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.unlink(path)
    return prof, trace_counts(events)


def main():
    w = Workloads()
    answer({"ready": True, "pid": os.getpid(), "torch": torch.__version__})
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        cmd = parts[0]
        try:
            if cmd == "quit":
                answer({"bye": True})
                return
            if cmd == "torch":
                acts = [ProfilerActivity.CUDA] if parts[1] == "cuda" else [
                    ProfilerActivity.CPU, ProfilerActivity.CUDA]
                _, counts = profile_steps(w, parts[2], int(parts[3]), acts)
                answer({"cmd": line.strip(), "counts": counts})
            elif cmd == "steps":
                start = time.time_ns()
                w.run(parts[1], int(parts[2]))
                answer({"cmd": line.strip(), "start_ns": start, "end_ns": time.time_ns()})
            elif cmd == "ops":
                prof, counts = profile_steps(w, parts[1], int(parts[2]),
                                             [ProfilerActivity.CPU, ProfilerActivity.CUDA])
                ops = [{"key": e.key, "count": e.count,
                        "device_time_total_us": e.device_time_total,
                        "device_type": e.device_type.name} for e in prof.key_averages()]
                with open(os.path.join(parts[3], "torch_ops_%s.json" % parts[1]), "w") as f:
                    json.dump({"steps": int(parts[2]), "operators": ops}, f)
                answer({"cmd": line.strip(), "counts": counts})
            else:
                answer({"cmd": line.strip(), "error": "unknown command"})
        except Exception as e:  # noqa: BLE001 - the error is the result (torch's assert)
            answer({"cmd": line.strip(), "error": "%s: %s" % (type(e).__name__, str(e)[:300]),
                    "trace": traceback.format_exc()[-800:]})


if __name__ == "__main__":
    main()

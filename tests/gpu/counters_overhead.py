"""What the agent's always-on counters cost a PyTorch process, measured inside one process with
alternating windows (counting off, on, off, on, ...; off puts every interposed entry point back, so
an off window runs as without the agent):

  CUDA_INJECTION64_PATH=.../libprofagent.so python3 tests/gpu/counters_overhead.py [--pairs N]

Workloads: a launch-bound loop of 1-element add_ (PyTorch's own kernels through the runtime) and
GPT-2 small fp16 inference, batch 8x128. Prints, per workload, the median time per launch / per
step of each condition, the min-max of each, and the median of the pairwise differences; one JSON
line at the end.
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import torch


def agent():
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path:
        raise SystemExit("run with CUDA_INJECTION64_PATH set to libprofagent.so")
    lib = ctypes.CDLL(path)  # the copy CUDA loaded: same handle
    lib.profagent_set_counters.argtypes = [ctypes.c_int]
    return lib


def measure(lib, window, pairs):
    out = {"off": [], "on": []}
    for i in range(2 * pairs):
        on = i % 2 == 1
        if lib.profagent_set_counters(1 if on else 0) != 0:
            raise SystemExit("profagent_set_counters failed: counters not on in this process")
        torch.cuda.synchronize()
        out["on" if on else "off"].append(window())
    lib.profagent_set_counters(1)
    diffs = [(b - a) / a for a, b in zip(out["off"], out["on"])]
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
            for k, v in out.items()} | {"median_pair_diff_pct": 100 * statistics.median(diffs),
                                         "pairs": pairs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    a = ap.parse_args()
    lib = agent()
    results = {}

    one = torch.zeros(1, device="cuda")
    launches = 20000

    def tiny():
        t = time.perf_counter()
        for _ in range(launches):
            one.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e9 / launches  # ns per launch

    for _ in range(3):
        tiny()
    results["launch_loop_ns_per_launch"] = measure(lib, tiny, a.pairs)

    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
    ids = torch.randint(0, 50257, (8, 128), device="cuda")
    steps = 15

    @torch.no_grad()
    def gpt2():
        t = time.perf_counter()
        for _ in range(steps):
            model(ids)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3 / steps  # ms per step

    for _ in range(3):
        gpt2()
    results["gpt2_ms_per_step"] = measure(lib, gpt2, a.pairs)
    for name, r in results.items():
        print("%-28s off %.4g (%.4g-%.4g)  on %.4g (%.4g-%.4g)  median pair diff %+.2f %%"
              % (name, r["off"]["median"], r["off"]["min"], r["off"]["max"], r["on"]["median"],
                 r["on"]["min"], r["on"]["max"], r["median_pair_diff_pct"]))
    print(json.dumps(results))


if __name__ == "__main__":
    main()

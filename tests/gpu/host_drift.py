"""How fast this GPU host's speed drifts: GPT-2 small fp16, batch 8x128, without the agent, in
back-to-back windows of N steps for S seconds each. Prints, per window length, the median, the
10th-90th percentiles and the median change from one window to the next, of the wall time and of
the thread's CPU time per step. An overhead measurement on this host must compare windows whose
neighbours differ less than the effect it looks for (docs/measurements/recorder.md).

  python3 tests/gpu/host_drift.py [--steps 15,100,250] [--seconds 20]
"""
import argparse
import statistics
import time

import torch

from gpt2_model import model_and_input, step


def summary(values):
    s = sorted(values)
    change = [abs(values[i] / values[i - 1] - 1) * 100 for i in range(1, len(values))]
    return "median %.3f ms, p10-p90 %.3f-%.3f, next window differs %.2f %%" % (
        statistics.median(s), s[len(s) // 10], s[9 * len(s) // 10], statistics.median(change))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", default="15,100,250")
    p.add_argument("--seconds", type=float, default=20)
    a = p.parse_args()
    model, ids = model_and_input(warmup=30)
    for steps in map(int, a.steps.split(",")):
        wall, cpu = [], []
        end = time.time() + a.seconds
        while time.time() < end:
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                step(model, ids)
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1000 / steps)
            cpu.append((time.thread_time() - c0) * 1000 / steps)
        print("%d-step windows (%d): wall %s; CPU %s" % (steps, len(wall), summary(wall),
                                                         summary(cpu)), flush=True)


if __name__ == "__main__":
    main()

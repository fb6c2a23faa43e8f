"""The flight recorder on the GPU host (profctl and profd's socket from the environment, as the
other GPU scripts have them; the agent injected with CUDA_INJECTION64_PATH).

  cost --windows W --steps N --mix off,rec,off,duty:10/100
      GPT-2 small fp16, batch 8x128, windows of N steps interleaved in this one process, in the
      order --mix gives: off, rec (the recorder on all the time), duty:ON/PERIOD (on, ON ms of
      every PERIOD ms). The process turns its recorder on and off itself between windows
      (profagent_set_recorder, as `profctl recorder` does, without the round trip), then waits
      --gap seconds for the recorder's thread, outside the timing: the host's speed drifts within
      a second, so neighbouring windows must be close in time. Prints "window ..." lines for
      tests/bench/overhead_report.py.
  phase --mix off,duty:100/1000 --block S --blocks B --steps-file F
      The same model, every step timed (its start and end, CLOCK_REALTIME ns), in blocks of S
      seconds in the order --mix gives, toggled as cost does. Duty windows begin on whole
      multiples of the period, so each step's place in the period is known: the steps file
      (gzip, "step <start_ns> <end_ns> <cond>") is for tests/bench/duty_cost.py.
  alert --port P --token-file F --seconds S
      A bf16 GEMM loop that marks every 100 ms with an NVTX range "mark <unix ms>" and counts the
      GEMMs it launches in each wall-clock second. With the recorder on (20 s), after S seconds it
      sends profd's alert listener the notification Alertmanager would (payload version 4, an
      alert naming this pid, startsAt now), waits for the capture the alert starts, and checks its
      trace: it must begin 10 s before startsAt and hold, for each of those seconds, the GEMMs
      this process launched then and its NVTX marks. Prints one JSON line; exit 0 if it holds.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.request


def profctl(*args):
    return subprocess.run(["profctl", *args], capture_output=True, text=True, timeout=120)


def recorder(state, *extra):
    # The agent registers with profd once CUDA has started: give it the time to.
    deadline = time.time() + 15
    while True:
        r = profctl("recorder", state, "--pid", str(os.getpid()), *extra)
        if r.returncode == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    if r.returncode != 0:
        sys.exit("recorder %s: %s" % (state, r.stderr))


def recorder_state():
    agents = json.loads(profctl("--json", "agents").stdout)["agents"]
    for a in agents:
        if a["pid"] == os.getpid():
            return a.get("recorder", {})
    return {}


def wait_recording(timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = recorder_state()
        if r.get("on") and not r.get("paused") and int(r.get("covered_since_realtime_ns", 0)):
            return r
        time.sleep(0.1)
    sys.exit("the recorder did not start: %s" % recorder_state())


def recorder_switch(gap):
    """A function that turns this process's recorder to a --mix condition (off, rec,
    duty:ON/PERIOD) and waits gap seconds for the recorder's thread."""
    import ctypes
    lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])  # the copy CUDA loaded: same handle
    lib.profagent_set_recorder.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint]

    def set_recorder(cond):
        on, duty = (0, "0/0") if cond == "off" else (1, cond.partition(":")[2] or "0/0")
        if lib.profagent_set_recorder(on, *map(int, duty.split("/"))) != 0:
            sys.exit("profagent_set_recorder: no agent in this process")
        time.sleep(gap)

    # The recorder's first session loads and claims CUPTI: once, before the timing.
    set_recorder("rec")
    time.sleep(1)
    return set_recorder


def cost(args):
    import torch
    from gpt2_model import model_and_input, step
    model, ids = model_and_input(warmup=20)
    set_recorder = recorder_switch(args.gap)
    mix = args.mix.split(",")
    for w in range(args.windows):
        cond = mix[w % len(mix)]
        set_recorder(cond)
        start = time.time_ns()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(model, ids)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000 / args.steps
        print("window %d %d %d %.4f %s" % (w, start, time.time_ns(), ms, cond), flush=True)
    set_recorder("off")


def phase(args):
    import torch
    from gpt2_model import model_and_input, step
    model, ids = model_and_input(warmup=20)
    set_recorder = recorder_switch(args.gap)
    mix = args.mix.split(",")
    with gzip.open(args.steps_file, "wt") as out:
        for b in range(args.blocks):
            cond = mix[b % len(mix)]
            set_recorder(cond)
            times = []
            end = time.time() + args.block
            while time.time() < end:
                t0 = time.time_ns()
                step(model, ids)
                times.append((t0, time.time_ns()))
            torch.cuda.synchronize()
            out.writelines("step %d %d %s\n" % (t0, t1, cond) for t0, t1 in times)
            print("block %d %s: %d steps" % (b, cond, len(times)), flush=True)
    set_recorder("off")


def nvtx_through_cupti():
    """NVTX reaches CUPTI when NVTX_INJECTION64_PATH names it: the libcupti already in this
    process (PyTorch's or the agent's), so that there is one CUPTI."""
    for line in open("/proc/self/maps"):
        if "libcupti" in line:
            os.environ["NVTX_INJECTION64_PATH"] = line.split()[-1]
            return line.split()[-1]
    return ""


def notify(port, token, alertname, starts_at_ns):
    starts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(starts_at_ns / 1e9)) + ".%03dZ" % (
        starts_at_ns // 1000000 % 1000)
    alert = {"status": "firing", "labels": {"alertname": alertname, "pid": str(os.getpid())},
             "annotations": {"profd_capture_duration": "2s"}, "startsAt": starts,
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph",
             "fingerprint": "%016x" % starts_at_ns}
    body = {"version": "4", "groupKey": "{}:{alertname=\"%s\"}" % alertname, "truncatedAlerts": 0,
            "status": "firing", "receiver": "profd", "groupLabels": {"alertname": alertname},
            "commonLabels": alert["labels"], "commonAnnotations": alert["annotations"],
            "externalURL": "http://alertmanager", "alerts": [alert]}
    req = urllib.request.Request("http://127.0.0.1:%d/alerts" % port,
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode()


def alert(args):
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    recorder("on", "--span", "20s")
    wait_recording()
    cupti = nvtx_through_cupti() if not args.no_nvtx else ""
    nvtx = torch.cuda.nvtx if not args.no_nvtx else None
    launched = {}  # wall-clock second -> GEMMs launched
    marks = []
    begin = time.time()
    next_mark = 0.0
    while time.time() - begin < args.seconds:
        now = time.time()
        if now >= next_mark and nvtx:
            if marks:
                nvtx.range_pop()
            marks.append(int(now * 1000))
            nvtx.range_push("mark %d" % marks[-1])
            next_mark = now + 0.1
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        sec = int(time.time())
        launched[sec] = launched.get(sec, 0) + 10
    if nvtx:
        nvtx.range_pop()
    held = recorder_state()
    fired = time.time_ns()
    status, answer = notify(args.port, open(args.token_file).read().strip(), args.alertname, fired)
    # The capture the alert started: it runs 2 s while this process goes on.
    end = time.time() + 2.5
    while time.time() < end:
        a @ b
    torch.cuda.synchronize()
    capture = None
    for _ in range(300):
        listed = json.loads(profctl("--json", "captures", "--limit", "1").stdout).get("captures", [])
        if listed and listed[0].get("alert", {}).get("name") == args.alertname and \
                listed[0]["phase"] in ("CAPTURE_PHASE_DONE", "CAPTURE_PHASE_FAILED"):
            capture = listed[0]
            break
        time.sleep(0.1)
    result = {"webhook": status, "answer": answer, "recorder": held, "nvtx_injection": cupti}
    if capture is None:
        result["error"] = "no capture finished"
        print(json.dumps(result))
        sys.exit(1)
    p = capture["processes"][0]
    result.update(capture_id=capture["capture_id"], phase=capture["phase"],
                  before_ms=int(capture.get("before_ms", 0)),
                  recorded_from_s_before_fired=(fired - int(p.get("recorded_from_unix_ns", 0))) / 1e9,
                  message=p.get("message", ""))
    trace = json.load(gzip.open(capture["files"][0]["path"]))
    base = trace["baseTimeNanoseconds"]
    kernels, ranges = {}, set()
    first = None
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        t = base + e["ts"] * 1000
        if e.get("cat") == "kernel":
            first = t if first is None else min(first, t)
            sec = int(t // 1e9)
            kernels[sec] = kernels.get(sec, 0) + 1
        elif e.get("cat") == "user_annotation" and e["name"].startswith("mark "):
            ranges.add(int(e["name"].split()[1]))
    fired_s = fired // 1000000000
    rows = []
    for sec in range(fired_s - 9, fired_s):  # whole seconds among the 10 before it fired
        rows.append({"second": sec - fired_s, "launched": launched.get(sec, 0),
                     "in_trace": kernels.get(sec, 0),
                     "marks": sum(1 for m in marks if m // 1000 == sec),
                     "marks_in_trace": sum(1 for m in ranges if m // 1000 == sec)})
    result["seconds"] = rows
    result["first_kernel_s_before_fired"] = (fired - first) / 1e9 if first else 0
    kernels_ok = all(r["launched"] > 0 and abs(r["in_trace"] - r["launched"]) <= 0.02 *
                     r["launched"] + 10 for r in rows)
    marks_ok = all(r["marks_in_trace"] == r["marks"] for r in rows)
    result["kernels_ok"] = kernels_ok
    result["marks_ok"] = marks_ok
    result["ok"] = capture["phase"] == "CAPTURE_PHASE_DONE" and kernels_ok and marks_ok and \
        result["first_kernel_s_before_fired"] >= 9.5
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["cost", "phase", "alert"])
    p.add_argument("--windows", type=int, default=320)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--mix", default="off,rec,off,duty:10/100")
    p.add_argument("--gap", type=float, default=0.1)
    p.add_argument("--block", type=float, default=10, help="phase: seconds per block")
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--steps-file", default="steps.gz")
    p.add_argument("--port", type=int, default=19478)
    p.add_argument("--token-file", default="")
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--alertname", default="GpuRecorderCheck")
    p.add_argument("--no-nvtx", action="store_true", help="no NVTX marks (the kernels only)")
    a = p.parse_args()
    {"cost": cost, "phase": phase, "alert": alert}[a.mode](a)

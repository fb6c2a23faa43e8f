"""Records, on the GPU host, the PyTorch-side fixtures the CI tests check against:

  record_torch_fixtures.py profile --model gpt2|resnet --steps N --out DIR
      N steps under torch.profiler (CPU+CUDA), exported as DIR/torch_<model>.json.gz, and what
      torch itself says about them in DIR/<model>_key_averages.json: key_averages() per operator
      (count, CPU and device time, self and total, in us) and its table sorted by CUDA time.
  record_torch_fixtures.py ipc --out DIR [--poll-secs S]
      A PyTorch child started with KINETO_USE_DAEMON=1 and KINETO_IPC_SOCKET_DIR, and a datagram
      server at DIR/.../dynolog answering its first poll with an on-demand config: the bytes of
      each request (hex), the sender's name and credentials, the poll period, the time from the
      reply to the trace file, and the trace itself (DIR/kineto_ondemand.json.gz), in
      DIR/kineto_ipc.json.
"""
import argparse
import gzip
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def profile_model(args):
    import torch
    from torch.profiler import ProfilerActivity, profile
    if args.model == "gpt2":
        from gpt2_workload import model_and_input, step
        model, ids = model_and_input()
        run = lambda: step(model, ids)  # noqa: E731
    else:
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.resnet50().cuda().half().eval()
        x = torch.randn(8, 3, 224, 224, device="cuda", dtype=torch.half)

        def run():
            with torch.no_grad():
                model(x)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            run()
        torch.cuda.synchronize()
    raw = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(os.path.join(args.out, "torch_%s.json.gz" % args.model),
                                         "wb") as g:
        shutil.copyfileobj(f, g)
    averages = prof.key_averages()
    ops = []
    for e in averages:
        ops.append({"key": e.key, "count": e.count,
                    "cpu_time_total_us": e.cpu_time_total,
                    "self_cpu_time_total_us": e.self_cpu_time_total,
                    "device_time_total_us": e.device_time_total,
                    "self_device_time_total_us": e.self_device_time_total,
                    "device_type": e.device_type.name})
    table = averages.table(sort_by="cuda_time_total", row_limit=30)
    with open(os.path.join(args.out, "%s_key_averages.json" % args.model), "w") as f:
        json.dump({"model": args.model, "steps": args.steps, "torch": torch.__version__,
                   "operators": ops, "table": table}, f, indent=1)
    print(table)


CHILD = r"""
import sys, time, torch
sys.path.insert(0, %r)
from gpt2_workload import model_and_input, step
model, ids = model_and_input()
print("ready", flush=True)
end = time.time() + %f
while time.time() < end:
    step(model, ids)
torch.cuda.synchronize()
"""


def ipc(args):
    sock_dir = tempfile.mkdtemp(prefix="kineto-ipc-")
    os.chmod(sock_dir, 0o1777)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(os.path.join(sock_dir, "dynolog"))
    os.chmod(os.path.join(sock_dir, "dynolog"), 0o666)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    env = dict(os.environ, KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=sock_dir)
    if args.poll_secs:
        conf = os.path.join(sock_dir, "kineto.conf")
        with open(conf, "w") as f:
            f.write("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=%d\n" % args.poll_secs)
        env["KINETO_CONFIG"] = conf
    started = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD % (os.path.dirname(
        os.path.abspath(__file__)), 40.0)], env=env, stdout=subprocess.PIPE, text=True)
    ready = child.stdout.readline().strip()
    result = {"ready_after_s": time.time() - started, "ready": ready, "requests": []}
    log = "/tmp/profd_fixture_trace.json"
    replied_at = None
    server.settimeout(1.0)
    while time.time() - started < 38 and len(result["requests"]) < 12:
        try:
            data, anc, _, addr = server.recvmsg(65536, socket.CMSG_SPACE(12))
        except socket.timeout:
            continue
        cred = None
        for level, kind, blob in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                cred = struct.unpack("iII", blob[:12])
        result["requests"].append({"t": time.time() - started, "hex": data.hex(), "from": addr,
                                   "cred": cred, "bytes": len(data)})
        if replied_at is None and len(result["requests"]) >= 2:
            config = ("ACTIVITIES_LOG_FILE=%s\nACTIVITIES_DURATION_MSECS=500\n"
                      "ACTIVITIES_WARMUP_PERIOD_SECS=0\nPROFILE_START_TIME=0\n"
                      "PROFILE_REPORT_INPUT_SHAPES=true\n" % log).encode()
            meta = struct.pack("N32s", len(config), b"req")
            server.sendto(meta + config, addr)
            replied_at = time.time()
            result["reply_t"] = replied_at - started
        elif replied_at is not None:
            server.sendto(struct.pack("N32s", 0, b"req"), addr)
    base, ext = os.path.splitext(log)
    expected = "%s_%d%s" % (base, child.pid, ext)
    for _ in range(200):
        if os.path.exists(expected):
            result["trace_after_reply_s"] = time.time() - replied_at
            break
        time.sleep(0.1)
    result["trace_file"] = expected if os.path.exists(expected) else None
    child.kill()
    child.wait()
    if result["trace_file"]:
        with open(expected, "rb") as f, gzip.open(os.path.join(args.out, "kineto_ondemand.json.gz"),
                                                  "wb") as g:
            shutil.copyfileobj(f, g)
        os.unlink(expected)
    result["child_pid"] = child.pid
    result["socket_dir"] = sock_dir
    with open(os.path.join(args.out, "kineto_ipc.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "requests"}))
    print("requests at", [round(r["t"], 2) for r in result["requests"]])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["profile", "ipc"])
    p.add_argument("--model", default="gpt2", choices=["gpt2", "resnet"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--poll-secs", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    profile_model(a) if a.mode == "profile" else ipc(a)

"""Records, on a GPU host, NVML's utilization sample buffers while a known periodic load runs, as
the fixture that tests/metrics/nvml_utilization_test.cc replays through profd's averaging.

A bf16 GEMM loop is busy BUSY ms of every PERIOD ms for SECONDS s, for each period in --periods
(idle between them and before the first). Meanwhile a poller thread reads, every --poll-ms,
nvmlDeviceGetSamples (GPU and memory utilization, since the newest timestamp it has seen, as profd
does), nvmlDeviceGetUtilizationRates (what profd read before, and what DCGM_FI_DEV_GPU_UTIL is) and
nvmlDeviceGetProcessUtilization, and writes every raw buffer as it came. NVML is loaded through
ctypes from libnvidia-ml.so.1; its structs are those of the NVML API reference (nvmlSample_t,
nvmlValue_t, nvmlProcessUtilizationSample_t).

  python3 tests/gpu/record_nvml_samples.py --out $OUT/h200_nvml_samples.txt
      [--gpu 0] [--busy-ms 300] [--periods 1000,700,1300] [--seconds 8] [--poll-ms 200]
      [--scrape http://127.0.0.1:9477/metrics]

With --scrape, a profd running beside it is scraped every 200 ms as well, and the summary says
what its profd_gpu_utilization_ratio and profd_gpu_busy_seconds_total read in each phase.

Output: one line each, space separated, times in CLOCK_REALTIME microseconds (NVML's "CPU
timestamp"), '#' lines are comments:
  gpu <index> <driver version> <name...>
  read <type> <call_us> <last_seen_us> <value_type> <count>   nvmlDeviceGetSamples; type 1: GPU
                                                             utilization, 2: memory utilization;
                                                             count sample lines follow
  s <timestamp_us> <value>
  rates <call_us> <gpu_percent> <memory_percent>             nvmlDeviceGetUtilizationRates
  proc <call_us> <pid> <timestamp_us> <sm_percent> <mem_percent>
                                                             nvmlDeviceGetProcessUtilization
  phase <period_ms> <busy_ms> <start_us> <end_us>            one load setting
  scrape <call_us> <ratio> <busy_seconds_total>              profd's series for the GPU (nan:
                                                             absent)
  busy <start_us> <end_us>                                   the GEMMs ran (launch of the first
                                                             to the end of the last, synchronized)
  setup <start_us> <end_us>                                  CUDA and cuBLAS start-up, warm-up
                                                             GEMMs: busy for an unknown part
Then a summary on stdout: NVML's sample spacing, and per 1 s window the busy fraction that was
run, the duration-weighted mean of NVML's samples and what nvmlDeviceGetUtilizationRates said.
"""
import argparse
import bisect
import ctypes
import os
import statistics
import threading
import time
import urllib.request

NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
GPU_SAMPLES, MEMORY_SAMPLES = 1, 2  # nvmlSamplingType_t


class Value(ctypes.Union):  # nvmlValue_t
    _fields_ = [("dVal", ctypes.c_double), ("siVal", ctypes.c_int), ("uiVal", ctypes.c_uint),
                ("ulVal", ctypes.c_ulong), ("ullVal", ctypes.c_ulonglong),
                ("sllVal", ctypes.c_longlong), ("usVal", ctypes.c_ushort)]


class Sample(ctypes.Structure):  # nvmlSample_t
    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("sampleValue", Value)]


class ProcessSample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Utilization(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def value_of(v, value_type):  # nvmlValueType_t
    return {0: v.dVal, 1: v.uiVal, 2: v.ulVal, 3: v.ullVal, 4: v.sllVal, 5: v.siVal,
            6: v.usVal}.get(value_type, v.uiVal)


def now_us():
    return time.time_ns() // 1000


class Nvml:
    def __init__(self, index):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.device = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.device)),
                   "nvmlDeviceGetHandleByIndex_v2")
        name = ctypes.create_string_buffer(96)
        self.check(self.lib.nvmlDeviceGetName(self.device, name, 95), "nvmlDeviceGetName")
        driver = ctypes.create_string_buffer(96)
        self.check(self.lib.nvmlSystemGetDriverVersion(driver, 95), "nvmlSystemGetDriverVersion")
        self.name, self.driver = name.value.decode(), driver.value.decode()

    def check(self, code, call):
        if code != NVML_SUCCESS:
            raise RuntimeError(f"{call} failed: NVML error {code}")

    def samples(self, sampling_type, last_seen):
        """(value type, [(timestamp_us, value)]) newer than last_seen; [] for NOT_FOUND."""
        fn = self.lib.nvmlDeviceGetSamples
        value_type, count = ctypes.c_int(), ctypes.c_uint(0)
        code = fn(self.device, sampling_type, ctypes.c_ulonglong(last_seen),
                  ctypes.byref(value_type), ctypes.byref(count), None)
        if code == NVML_ERROR_NOT_FOUND:
            return value_type.value, []
        if code not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            self.check(code, "nvmlDeviceGetSamples (count)")
        buf = (Sample * max(count.value, 1))()
        code = fn(self.device, sampling_type, ctypes.c_ulonglong(last_seen),
                  ctypes.byref(value_type), ctypes.byref(count), buf)
        if code == NVML_ERROR_NOT_FOUND:
            return value_type.value, []
        self.check(code, "nvmlDeviceGetSamples")
        return value_type.value, [(buf[i].timeStamp, value_of(buf[i].sampleValue, value_type.value))
                                  for i in range(count.value)]

    def rates(self):
        u = Utilization()
        self.check(self.lib.nvmlDeviceGetUtilizationRates(self.device, ctypes.byref(u)),
                   "nvmlDeviceGetUtilizationRates")
        return u.gpu, u.memory

    def processes(self, last_seen):
        fn = self.lib.nvmlDeviceGetProcessUtilization
        count = ctypes.c_uint(0)
        code = fn(self.device, None, ctypes.byref(count), ctypes.c_ulonglong(last_seen))
        if code == NVML_ERROR_NOT_FOUND or count.value == 0:
            return []
        if code not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            self.check(code, "nvmlDeviceGetProcessUtilization (count)")
        buf = (ProcessSample * (count.value + 8))()
        count = ctypes.c_uint(count.value + 8)
        code = fn(self.device, buf, ctypes.byref(count), ctypes.c_ulonglong(last_seen))
        if code == NVML_ERROR_NOT_FOUND:
            return []
        self.check(code, "nvmlDeviceGetProcessUtilization")
        return [(buf[i].pid, buf[i].timeStamp, buf[i].smUtil, buf[i].memUtil)
                for i in range(count.value)]


class Poller(threading.Thread):
    def __init__(self, nvml, poll_s, out):
        super().__init__(daemon=True)
        self.nvml, self.poll_s, self.out = nvml, poll_s, out
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.samples = {GPU_SAMPLES: {}, MEMORY_SAMPLES: {}}  # type -> {timestamp: value}
        self.rates = []  # (call_us, gpu percent)
        self.phases = []  # (period_ms, start_us, end_us)

    def write(self, line):
        with self.lock:
            self.out.write(line + "\n")

    def poll(self, last_seen):
        for t in (GPU_SAMPLES, MEMORY_SAMPLES):
            call = now_us()
            value_type, got = self.nvml.samples(t, last_seen[t])
            lines = [f"read {t} {call} {last_seen[t]} {value_type} {len(got)}"]
            lines += [f"s {ts} {v}" for ts, v in got]
            self.write("\n".join(lines))
            for ts, v in got:
                self.samples[t][ts] = v
                last_seen[t] = max(last_seen[t], ts)
        call = now_us()
        gpu, mem = self.nvml.rates()
        self.rates.append((call, gpu))
        self.write(f"rates {call} {gpu} {mem}")
        call = now_us()
        procs = self.nvml.processes(last_seen["proc"])
        for pid, ts, sm, mem in procs:
            self.write(f"proc {call} {pid} {ts} {sm} {mem}")
            last_seen["proc"] = max(last_seen["proc"], ts)

    def run(self):
        # The first read asks for the whole buffer (last seen 0), as profd's first read does.
        last_seen = {GPU_SAMPLES: 0, MEMORY_SAMPLES: 0, "proc": 0}
        while not self.stop.is_set():
            self.poll(last_seen)
            self.stop.wait(self.poll_s)
        self.poll(last_seen)


class Scraper(threading.Thread):
    """profd's GPU series every 200 ms: (call_us, ratio, busy_seconds_total). Scraped five times
    faster than profd samples, so the scrape that first shows a new value dates profd's read."""

    def __init__(self, url, gpu, poller):
        super().__init__(daemon=True)
        self.url, self.gpu, self.poller = url, gpu, poller
        self.stop = threading.Event()
        self.readings = []

    def run(self):
        label = f'gpu="{self.gpu}"'
        while not self.stop.wait(0.2):
            call = now_us()
            try:
                text = urllib.request.urlopen(self.url, timeout=5).read().decode()
            except OSError as e:
                self.poller.write(f"# scrape failed: {e}")
                continue
            values = {}
            for line in text.splitlines():
                name = line.split("{", 1)[0]
                if label in line and name in ("profd_gpu_utilization_ratio",
                                              "profd_gpu_busy_seconds_total"):
                    values[name] = float(line.rsplit(" ", 1)[1])
            ratio = values.get("profd_gpu_utilization_ratio", float("nan"))
            busy = values.get("profd_gpu_busy_seconds_total", float("nan"))
            self.readings.append((call, ratio, busy))
            self.poller.write(f"scrape {call} {ratio} {busy}")


def summarize_profd(readings, samples, busy, phases):
    """Per phase: each of profd's reads (a new value in the scrapes) matched to the window of
    NVML's samples it averaged (the one, ending at most 0.6 s before the scrape that first showed
    it and about 1 s long, whose duration-weighted mean is closest to it), and set against what
    ran in that window; then its busy-seconds counter over the phase."""
    ts = sorted(samples)

    def mean(a, b):  # samples ts[a+1..b], each weighted by its period
        num = sum((ts[i] - ts[i - 1]) * samples[ts[i]] for i in range(a + 1, b + 1))
        return num / (ts[b] - ts[a]) / 100

    reads = [r for i, r in enumerate(readings)
             if i > 0 and (r[1], r[2]) != (readings[i - 1][1], readings[i - 1][2])]
    for period_ms, start, end in phases:
        matched = []  # (read minus its samples' mean, read minus what ran, busy total, window end)
        for t, ratio, busy_total in reads:
            if not start + 1_000_000 <= t <= end:
                continue
            last = bisect.bisect_right(ts, t) - 1
            candidates = [(abs(mean(a, b) - ratio), abs(ts[b] - ts[a] - 1_000_000), a, b)
                          for b in range(last - 3, last + 1)
                          for a in range(b - 9, b)
                          if a >= 0 and 500_000 <= ts[b] - ts[a] <= 1_700_000]
            if candidates:
                err, _, a, b = min(candidates)
                matched.append((err, ratio - busy_fraction(busy, ts[a], ts[b]), busy_total, ts[b]))
        if len(matched) < 2:
            continue
        ratios = sorted(r[1] for r in reads if start + 1_000_000 <= r[0] <= end)
        to_truth = [m[1] for m in matched]
        (_, _, b0, e0), (_, _, b1, e1) = matched[0], matched[-1]
        print(f"profd, {period_ms} ms period: {len(matched)} reads, ratio min {ratios[0]:.3f} "
              f"median {statistics.median(ratios):.3f} max {ratios[-1]:.3f}; each read minus the "
              f"weighted mean of NVML's samples in its window: at most "
              f"{max(m[0] for m in matched):.4f}; minus what ran in it: {min(to_truth):+.3f}.."
              f"{max(to_truth):+.3f}; busy_seconds_total over those windows "
              f"{(b1 - b0) / ((e1 - e0) / 1e6):.3f}, truth {busy_fraction(busy, e0, e1):.3f}")


def busy_fraction(busy, lo, hi):
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in busy) / (hi - lo)


def run_load(args, poller):
    setup = now_us()
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    torch.cuda.synchronize()
    poller.write(f"setup {setup} {now_us()}")
    busy = []
    time.sleep(args.idle_ms / 1000)
    for period_ms in [int(p) for p in args.periods.split(",")]:
        phase_start = now_us()
        next_start = time.monotonic()
        while (now_us() - phase_start) < args.seconds * 1e6:
            start = now_us()
            stop = time.monotonic() + args.busy_ms / 1000
            n = 0
            while time.monotonic() < stop:
                torch.mm(a, b)
                n += 1
                if n % 4 == 0:
                    torch.cuda.synchronize()  # keeps the queue short: the phase ends on time
            torch.cuda.synchronize()
            end = now_us()
            busy.append((start, end))
            poller.write(f"busy {start} {end}")
            next_start += period_ms / 1000
            time.sleep(max(0.0, next_start - time.monotonic()))
        phase_end = now_us()
        poller.write(f"phase {period_ms} {args.busy_ms} {phase_start} {phase_end}")
        poller.phases.append((period_ms, phase_start, phase_end))
        time.sleep(args.idle_ms / 1000)
    return busy


def summarize(poller, busy, window_us=1_000_000):
    gpu = sorted(poller.samples[GPU_SAMPLES].items())
    gaps = [b[0] - a[0] for a, b in zip(gpu, gpu[1:])]
    if gaps:
        print(f"GPU samples: {len(gpu)}, spacing median {statistics.median(gaps) / 1000:.1f} ms, "
              f"min {min(gaps) / 1000:.1f}, max {max(gaps) / 1000:.1f}")
    if len(gpu) < 2:
        return
    print("window_start_us truth samples_mean rates_last")
    t = gpu[0][0]
    while t + window_us <= gpu[-1][0]:
        lo, hi = t, t + window_us
        truth = busy_fraction(busy, lo, hi)
        weighted = covered = 0.0
        for (t0, _), (t1, v) in zip(gpu, gpu[1:]):
            overlap = max(0, min(t1, hi) - max(t0, lo))
            weighted += overlap * v / 100
            covered += overlap
        last_rate = [g for c, g in poller.rates if c <= hi]
        print(f"{lo} {truth:.3f} {weighted / covered if covered else float('nan'):.3f} "
              f"{last_rate[-1] / 100 if last_rate else float('nan'):.2f}")
        t += window_us


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                 "nvml_samples.txt"))
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--busy-ms", type=int, default=300)
    p.add_argument("--periods", default="1000,700,1300")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--idle-ms", type=int, default=2000)
    p.add_argument("--poll-ms", type=int, default=200)
    p.add_argument("--scrape", help="profd's /metrics URL, scraped every second")
    args = p.parse_args()
    nvml = Nvml(args.gpu)
    with open(args.out, "w") as out:
        out.write(f"# record_nvml_samples.py busy {args.busy_ms} ms of every {args.periods} ms, "
                  f"{args.seconds} s each, polled every {args.poll_ms} ms\n")
        out.write(f"gpu {args.gpu} {nvml.driver} {nvml.name}\n")
        poller = Poller(nvml, args.poll_ms / 1000, out)
        poller.start()
        scraper = Scraper(args.scrape, args.gpu, poller) if args.scrape else None
        if scraper:
            scraper.start()
        try:
            busy = run_load(args, poller)
        finally:
            poller.stop.set()
            poller.join()
            if scraper:
                scraper.stop.set()
                scraper.join()
    summarize(poller, busy)
    if scraper:
        summarize_profd(scraper.readings, poller.samples[GPU_SAMPLES], busy, poller.phases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

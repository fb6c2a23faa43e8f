"""Scrapes profd's /metrics every --every seconds for --seconds and prints one line per scrape:
`scrape <unix_ns> <series>=<value> ...` for every profd_gpu_*_ratio / *_bytes_per_second series of
GPU --gpu and profd_gpu_counters_available (urllib: the package's libcurl on LD_LIBRARY_PATH breaks
the system curl on the GPU host).

  python3 tests/gpu/scrape_counters.py URL [--seconds 20] [--every 1] [--gpu 0]
"""
import argparse
import re
import time
import urllib.request

p = argparse.ArgumentParser()
p.add_argument("url")
p.add_argument("--seconds", type=float, default=20)
p.add_argument("--every", type=float, default=1)
p.add_argument("--gpu", default="0")
a = p.parse_args()
line = re.compile(r'^(profd_gpu_[a-z0-9_]+)\{([^}]*)\} (\S+)$')
end = time.time() + a.seconds
while time.time() < end:
    t = time.time_ns()
    try:
        body = urllib.request.urlopen(a.url, timeout=5).read().decode()
    except Exception as e:  # noqa: BLE001 - a failed scrape is reported, the run goes on
        print("scrape", t, "error=" + type(e).__name__, flush=True)
        time.sleep(a.every)
        continue
    values = []
    for l in body.splitlines():
        if l.startswith("profd_gpu_counters_available"):
            values.append("available=" + l.split()[-1])
        m = line.match(l)
        if m and ('gpu="%s"' % a.gpu) in m.group(2) and (
                m.group(1).endswith("_ratio") or m.group(1).endswith("_per_second")):
            values.append("%s=%s" % (m.group(1), m.group(3)))
    print("scrape", t, " ".join(values), flush=True)
    time.sleep(max(0, a.every - (time.time_ns() - t) / 1e9))

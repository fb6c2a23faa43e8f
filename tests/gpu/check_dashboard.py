"""Runs a real Prometheus against profd on this host and asks it every query of the Grafana
dashboard; prints, per panel, how many series came back (the GPU host's record of issue 4).

  check_dashboard.py PROMETHEUS_BINARY DASHBOARD_JSON PROFD_METRICS_ADDRESS WORKDIR
"""
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

prom, dashboard, target, work = sys.argv[1:5]
config = f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: profd
    static_configs:
      - targets: ["{target}"]
"""
open(f"{work}/prom.yml", "w").write(config)
proc = subprocess.Popen([prom, f"--config.file={work}/prom.yml", f"--storage.tsdb.path={work}/tsdb",
                         "--web.listen-address=127.0.0.1:19090"],
                        stdout=subprocess.DEVNULL, stderr=open(f"{work}/prom.log", "w"))
time.sleep(12)  # a dozen scrapes, enough for rate() over the run


def query(expr):
    url = "http://127.0.0.1:19090/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


subst = {"$__rate_interval": "1m", "$__range": "5m", "$hostname": ".*", "$namespace": ".*",
         "$pod": ".*", "$gpu": ".*"}
d = json.load(open(dashboard))
empty = 0
for panel in d["panels"]:
    for t in panel.get("targets", []):
        expr = t.get("expr", "")
        for k, v in subst.items():
            expr = expr.replace(k, v)
        try:
            res = query(expr)
            n = len(res["data"]["result"]) if res.get("status") == "success" else -1
        except Exception as e:  # noqa: BLE001
            n = -1
        empty += n <= 0
        print(f"{n:4d} series  {panel.get('title', '?')}: {expr[:90]}")
print(f"panels' queries with no data: {empty}")
proc.terminate()

"""Means of each PM-sampled metric over each phase of duty_workload.py (the first and last 50 ms
of a phase left out), next to what the phase really did: a copy phase's DRAM bytes/s are its bytes
moved (read + write) over its length.

  python3 tests/gpu/pm_phases.py DUTY_TXT PM_CSV[.gz]
"""
import csv
import gzip
import statistics
import sys

phases = []
for line in open(sys.argv[1]):
    p = line.split()
    if p and p[0] == "phase":
        phases.append((p[1], int(p[2]), int(p[3]), int(p[5])))
opener = gzip.open if sys.argv[2].endswith(".gz") else open
rows = [r for r in csv.reader(opener(sys.argv[2], "rt")) if r and r[0] == "sample"]
names = rows[0][3:]
samples = [(int(r[1]), int(r[2]), [float(x) for x in r[3:]]) for r in rows[1:]]
print("phase samples " + " ".join(names))
margin = 50_000_000
for name, start, end, moved in phases:
    inside = [s for s in samples if s[0] >= start + margin and s[1] <= end - margin]
    if not inside:
        continue
    means = [statistics.mean(s[2][i] for s in inside) for i in range(len(names))]
    truth = " (truth: %.4g B/s moved)" % (moved / ((end - start) / 1e9)) if moved else ""
    print(name, len(inside), " ".join("%.4g" % m for m in means) + truth)

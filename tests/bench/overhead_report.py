"""Summarizes an interleaved-window overhead run.

  overhead_report.py WINDOWS_FILE [CAPTURE_JSON ...]

WINDOWS_FILE has lines "window <i> <start_ns> <end_ns> <value> <cond>" (value: ns per launch or
ms per step). With capture JSONs (profctl --json capture output), windows are classified by
whether they lie wholly inside a capture (CUPTI enabled..disabled: "on") or wholly outside every
capture ("off"); windows that straddle an edge are left out. Without, the cond column is used
(on/off, or any names: gpt2_workload.py --toggle mix). Prints median, min and max of each
condition and each one's median overhead over "off", as JSON. With the cond column, also each
condition's paired overhead: every window of it against the mean of the "off" windows next to it
(the host's load drifts over minutes, the neighbours share it), the median of those and a
bootstrap 95 % interval of that median."""
import json
import random
import statistics
import sys


def bootstrap(values, stat, rng, n=2000):
    """A bootstrap 95 % interval of stat(values)."""
    s = sorted(stat(rng.choices(values, k=len(values))) for _ in range(n))
    return [s[int(0.025 * n)], s[int(0.975 * n) - 1]]


def paired(rows):
    """rows: (value, cond) in the order run. Each condition's windows (but off's), each against
    the mean of the "off" windows next to it: {cond: [overhead %, ...]}."""
    out = {}
    for i, (value, cond) in enumerate(rows):
        near = [rows[j][0] for j in (i - 1, i + 1)
                if cond != "off" and 0 <= j < len(rows) and rows[j][1] == "off"]
        if near:
            out.setdefault(cond, []).append(100.0 * (value / statistics.mean(near) - 1))
    return out


def main():
    windows = []
    for line in open(sys.argv[1]):
        parts = line.split()
        if parts and parts[0] == "window":
            windows.append((int(parts[2]), int(parts[3]), float(parts[4]), parts[5]))
    windows = windows[1:]  # the first window warms up

    intervals = []
    for path in sys.argv[2:]:
        try:
            d = json.load(open(path))
        except Exception:
            continue
        for p in d.get("processes", []):
            if int(p.get("enabled_unix_ns", 0)) and int(p.get("disabled_unix_ns", 0)):
                intervals.append((int(p["enabled_unix_ns"]), int(p["disabled_unix_ns"])))

    groups = {"on": [], "off": []}
    for start, end, value, cond in windows:
        if intervals:
            if any(s <= start and end <= e for s, e in intervals):
                groups["on"].append(value)
            elif all(end < s or start > e for s, e in intervals):
                groups["off"].append(value)
        else:
            groups.setdefault(cond, []).append(value)

    out = {}
    for name, values in groups.items():
        if values:
            out[name] = {"n": len(values), "median": statistics.median(values),
                         "min": min(values), "max": max(values)}
    if "on" in out and "off" in out:
        out["overhead_pct_of_medians"] = 100.0 * (out["on"]["median"] / out["off"]["median"] - 1)
    for name in list(out):
        if name not in ("on", "off") and "off" in out and isinstance(out[name], dict):
            out[name]["overhead_pct"] = 100.0 * (out[name]["median"] / out["off"]["median"] - 1)
    if not intervals:
        rng = random.Random(1)  # the same interval for the same file
        for name, rel in paired([(value, cond) for _, _, value, cond in windows]).items():
            out[name]["paired_pct"] = statistics.median(rel)
            out[name]["paired_pct_95"] = bootstrap(rel, statistics.median, rng)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""profd's per-kernel GPU counters against ncu's, and the bound classes against what was run
(issue 11's "must show"; the results folder of tests/gpu/run_gpu_bound.sh).

  python3 tests/gpu/compare_ncu.py OUT [--interval-us 100] [--ncu-csv OUT/ncu.csv]

Reads from OUT:
  report_<phase>.json   `profctl report <capture id> --json` of each phase's capture (gemm, copy,
                        tiny): top_kernels[] with name, instances, total_ns, med_ns, counters{},
                        counter_time_ns, bound, bound_reason
  workload.txt          bound_workload.py's JSON lines; {"event": "phase", ...} has the truth
  ncu.csv               `ncu --import R --csv --page raw --print-units base
                        --print-kernel-base demangled`: lines before the header (==PROF==, the
                        application's output) are skipped; the header starts "ID","Process ID",
                        and names the metrics, the next row has their units, then one row per
                        kernel launch; numbers may carry thousands separators ("1,234.5").
                        The details page's long form ("Metric Name","Metric Unit","Metric
                        Value" columns, one row per metric) is read as well.
  ncu_app.txt           bound_workload.py --ncu's {"event": "ncu_done"} line (kernels per phase)

Matching ncu's "Kernel Name" to profd's name (profd demangles with __cxa_demangle; ncu with
its own demangler, which spaces and spells some things differently: "char *" / "char*",
"2UL" / "2ul", "[lambda() (instance 1)]" / "{lambda()#1}", and abbreviates the parameter list
"(int, T2, T3)"), both names are normalized: a leading "void " dropped, lambdas spelled one way,
"(anonymous namespace)" / "<unnamed>" one way, all whitespace removed, lower-cased, and the
parameter list (the first "(" outside <>, (), {} and []) cut off. Then, in order:
  exact   the normalized names are equal;
  base    the function's own name (the last "::" part before its template arguments) is the same
          and only one profd kernel has it;
  tokens  among profd kernels of the same function name, the one sharing the most identifier
          tokens (Jaccard >= 0.5) with ncu's;
  prefix  one normalized name starts with the other (a name cut short on either side);
  phase   (names differ) ncu's IDs number the launches in order, and bound_workload.py --ncu
          says how many kernels each phase ran (3, 3, 50): when the counts add up, an unmatched
          ncu kernel whose launches all fall in one phase is compared with that phase's main
          profd kernel (most total time in its capture), and the table says so.
ncu's values are averaged over the launches of one name (3 GEMMs, 3 copies, 50 tiny kernels).

Judged per metric: |profd - ncu| / |ncu| <= 10 %, only for kernels whose median duration
(profd's, else ncu's) is at least 5 sample intervals; near zero (both under 5 % of peak, or
under 5e10 B/s) an absolute difference of 1 point / 2.5e10 B/s passes instead ("PASS(abs)");
a value ncu has and profd's report lacks is a FAIL, one ncu lacks a SKIP. profd's ratios (0..1)
are shown as percentages. Also: each phase's main kernel's `bound` (gemm: compute, copy: memory,
tiny: launch or latency), and the copy's DRAM read+write B/s (profd's, and ncu's for reference)
within 10 % of the truth. Exit status 0 always; PASS/FAIL per check, everything in
OUT/compare.json.
"""
import argparse
import csv
import json
import os
import re
import statistics
import sys

PHASES = ["gemm", "copy", "tiny"]
EXPECTED_BOUND = {"gemm": ["compute"], "copy": ["memory"], "tiny": ["launch", "latency"]}
TOLERANCE = 0.10
MIN_INTERVALS = 5
NEAR_ZERO = {"pct": (5.0, 1.0), "rate": (5e10, 2.5e10)}  # (both below, then |diff| allowed)

NCU_SM = ["sm__cycles_active.avg.pct_of_peak_sustained_elapsed"]
NCU_WARPS = ["sm__warps_active.avg.pct_of_peak_sustained_elapsed"]
NCU_TENSOR = ["sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
              "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
              "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
              "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]
NCU_DRAM_PCT = ["dram__throughput.avg.pct_of_peak_sustained_elapsed",
                "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
NCU_DRAM_READ = "dram__bytes_read.sum.per_second"
NCU_DRAM_WRITE = "dram__bytes_write.sum.per_second"
NCU_DRAM_BYTES = "dram__bytes.sum.per_second"
NCU_DURATION = "gpu__time_duration.sum"


# ---------------------------------------------------------------- ncu CSV
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}
TIME_S = {"second": 1.0, "s": 1.0, "msecond": 1e-3, "ms": 1e-3, "usecond": 1e-6, "us": 1e-6,
          "nsecond": 1e-9, "ns": 1e-9}
QUANTITIES = ("byte", "B", "cycle", "hz", "Hz", "inst", "sector", "request", "warp", "thread")


def _prefix_factor(unit):
    for q in QUANTITIES:
        if unit.endswith(q):
            return PREFIX.get(unit[: -len(q)], 1.0)
    return 1.0


def unit_scale(unit):
    """Factor to base units: percentages stay %, rates become per second, times become ns."""
    u = (unit or "").strip()
    if u in ("", "%"):
        return 1.0
    if "/" in u:
        num, den = u.split("/", 1)
        per = TIME_S.get(den.strip())
        return _prefix_factor(num.strip()) / per if per else 1.0
    if u in TIME_S:
        return TIME_S[u] * 1e9
    return _prefix_factor(u)


def number(text):
    t = (text or "").strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def read_ncu_csv(path):
    """Launches: [{"id", "name", "metrics": {metric name: value in base units}}]."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID","Process ID"')), None)
    if start is None:
        start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        return [], "no CSV header (\"ID\",...) in %s" % path
    rows = [r for r in csv.reader(lines[start:]) if r]
    header = rows[0]
    col = {h: i for i, h in enumerate(header)}
    if "Kernel Name" not in col:
        return [], "no \"Kernel Name\" column"
    kn = col["Kernel Name"]
    launches = {}
    if "Metric Name" in col and "Metric Value" in col:  # long form: one row per metric
        mn, mv, mu = col["Metric Name"], col["Metric Value"], col.get("Metric Unit")
        for r in rows[1:]:
            if len(r) <= max(kn, mn, mv):
                continue
            l = launches.setdefault((r[0], r[kn]), {"id": r[0], "name": r[kn], "metrics": {}})
            v = number(r[mv])
            if v is not None:
                l["metrics"][r[mn]] = v * unit_scale(r[mu] if mu is not None else "")
        return list(launches.values()), ""
    metric_cols = [(i, h) for i, h in enumerate(header) if "__" in h]
    if not metric_cols:
        return [], "no metric-name columns (printed by label?)"
    body = rows[1:]
    units = [""] * len(header)
    if body and not body[0][0].strip():  # the units row: no launch ID
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    out = []
    for r in body:
        if len(r) <= kn or not r[0].strip():
            continue
        m = {}
        for i, h in metric_cols:
            if i < len(r):
                v = number(r[i])
                if v is not None:
                    m[h] = v * unit_scale(units[i])
        out.append({"id": r[0], "name": r[kn], "metrics": m})
    return out, ""


# ---------------------------------------------------------------- names
LAMBDA_GCC = re.compile(r"\{lambda\(([^(){}]*)\)#(\d+)\}")
LAMBDA_EDG = re.compile(r"\[lambda\(([^()\[\]]*)\)\s*\(instance\s*(\d+)\)\]")


def normalize(name):
    s = re.sub(r"^\s*void\s+", "", name or "")
    s = LAMBDA_GCC.sub(r"lambda(\1)#\2", s)
    s = LAMBDA_EDG.sub(r"lambda(\1)#\2", s)
    s = s.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    s = re.sub(r"\s+", "", s).lower()
    depth = 0
    for i, c in enumerate(s):
        if c == "(" and depth == 0 and i > 0:
            return s[:i]
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth = max(0, depth - 1)
    return s


def base_name(key):
    depth, cut = 0, len(key)
    for i, c in enumerate(key):
        if c in "<({[":
            if depth == 0 and c == "<":
                cut = i
                break
            depth += 1
        elif c in ">)}]":
            depth = max(0, depth - 1)
    return key[:cut].split("::")[-1]


def tokens(key):
    return set(t for t in re.split(r"[^a-z0-9_]+", key) if t)


def match(ncu_key, profd):
    """profd: {normalized name: entry}. Returns (entry, how) or (None, "")."""
    if ncu_key in profd:
        return profd[ncu_key], "exact"
    base = base_name(ncu_key)
    same = [k for k in profd if base_name(k) == base]
    if len(same) == 1:
        return profd[same[0]], "base"
    if same:
        tn = tokens(ncu_key)
        scored = sorted(((len(tn & tokens(k)) / max(1, len(tn | tokens(k))), k) for k in same),
                        reverse=True)
        if scored[0][0] >= 0.5:
            return profd[scored[0][1]], "tokens %.2f" % scored[0][0]
    for k in profd:
        if k.startswith(ncu_key) or ncu_key.startswith(k):
            return profd[k], "prefix"
    return None, ""


def short(name, width=70):
    s = re.sub(r"^\s*void\s+", "", name)
    return s if len(s) <= width else s[: width - 3] + "..."


# ---------------------------------------------------------------- inputs
def json_lines(path):
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f), ""
    except (OSError, ValueError) as e:
        return None, str(e)


def stat(k, *keys):
    for key in keys:
        if k.get(key) is not None:
            return k[key]
    return None


def profd_value(k, metric):
    c = k.get("counters") or {}

    def ratio(name):
        v = c.get(name)
        return None if v is None else 100.0 * v

    if metric == "sm":
        return ratio("sm_active_ratio")
    if metric == "warps":
        return ratio("sm_occupancy_ratio")
    if metric == "tensor":
        return ratio("tensor_active_ratio")
    if metric == "dram_pct":
        return ratio("dram_active_ratio")
    if metric == "dram_bps":
        r, w = c.get("dram_read_bytes_per_second"), c.get("dram_write_bytes_per_second")
        return None if r is None and w is None else (r or 0) + (w or 0)
    return None


def ncu_value(means, metric):
    """(value, ncu metric used) from the launches' means."""
    def first(names):
        for n in names:
            if n in means:
                return means[n], n
        return None, ""

    if metric == "sm":
        return first(NCU_SM)
    if metric == "warps":
        return first(NCU_WARPS)
    if metric == "tensor":
        return first(NCU_TENSOR)
    if metric == "dram_pct":
        return first(NCU_DRAM_PCT)
    if metric == "dram_bps":
        if NCU_DRAM_READ in means or NCU_DRAM_WRITE in means:
            return means.get(NCU_DRAM_READ, 0) + means.get(NCU_DRAM_WRITE, 0), "read+write"
        return first([NCU_DRAM_BYTES])
    return None, ""


METRICS = [("sm", "SM active %", "pct"), ("warps", "warps active (occupancy) %", "pct"),
           ("tensor", "tensor pipe active %", "pct"), ("dram_pct", "DRAM throughput %", "pct"),
           ("dram_bps", "DRAM read+write B/s", "rate")]


def judge(p, n, kind, judged):
    if p is None and n is not None and judged:
        return None, "FAIL(no profd value)"
    if p is None or n is None:
        return None, "SKIP(missing)"
    rel = abs(p - n) / abs(n) if n else (0.0 if p == 0 else float("inf"))
    if not judged:
        return rel, "SKIP(short)"
    below, allowed = NEAR_ZERO[kind]
    if max(abs(p), abs(n)) < below:
        return rel, "PASS(abs)" if abs(p - n) <= allowed else "FAIL(abs)"
    return rel, "PASS" if rel <= TOLERANCE else "FAIL"


def fmt(v, kind):
    if v is None:
        return "-"
    return "%.3g" % v if kind == "rate" else "%.1f" % v


def main():
    ap = argparse.ArgumentParser(description="profd per-kernel counters vs ncu")
    ap.add_argument("out")
    ap.add_argument("--interval-us", type=float, default=100.0,
                    help="profd's sample interval during the captures")
    ap.add_argument("--ncu-csv", default="")
    args = ap.parse_args()
    out = args.out
    interval_ns = args.interval_us * 1e3
    result = {"interval_ns": interval_ns, "tolerance": TOLERANCE, "kernels": [], "bound": [],
              "copy_truth": [], "notes": []}
    verdicts = []

    def note(text):
        print(text)
        result["notes"].append(text)

    # profd reports, one per phase
    profd = {}  # normalized name -> entry (the one with most total time over the phases)
    reports = {}
    for ph in PHASES:
        d, err = load_json(os.path.join(out, "report_%s.json" % ph))
        if d is None:
            note("profd report of %s: missing (%s)" % (ph, err))
            continue
        reports[ph] = d
        for k in d.get("top_kernels", []):
            e = dict(k, phase=ph)
            key = normalize(k.get("name", ""))
            total = stat(k, "total_ns") or 0
            if key not in profd or total > (stat(profd[key], "total_ns") or 0):
                profd[key] = e
    truth = {l["phase"]: l for l in json_lines(os.path.join(out, "workload.txt"))
             if l.get("event") == "phase"}
    ncu_done = next((l for l in json_lines(os.path.join(out, "ncu_app.txt"))
                     if l.get("event") == "ncu_done"), None)

    # ncu
    csv_path = args.ncu_csv or os.path.join(out, "ncu.csv")
    launches, err = ([], "missing") if not os.path.exists(csv_path) else read_ncu_csv(csv_path)
    if err:
        note("ncu CSV %s: %s" % (csv_path, err))
    groups = {}
    for l in launches:
        groups.setdefault(normalize(l["name"]), []).append(l)
    # Which phase each ncu launch belongs to, from the launch order (ncu's IDs count launches)
    # and bound_workload.py --ncu's kernels per phase; only when the counts add up (one kernel
    # per op). The fallback for a name that matches no profd kernel.
    phase_of = {}
    if ncu_done:
        plan = [(ph, v.get("kernels", 0)) for ph, v in ncu_done.get("phases", {}).items()]
        ordered = sorted(launches, key=lambda l: number(l["id"]) or 0)
        if sum(n for _, n in plan) == len(ordered):
            i = 0
            for ph, n in plan:
                for l in ordered[i:i + n]:
                    phase_of[id(l)] = ph
                i += n
        elif launches:
            note("ncu profiled %d kernels, bound_workload.py --ncu ran %s: not one kernel per op"
                 % (len(launches), dict(plan)))
    main_kernel = {}
    for ph, d in reports.items():
        ks = d.get("top_kernels", [])
        if ks:
            main_kernel[ph] = dict(max(ks, key=lambda k: stat(k, "total_ns") or 0), phase=ph)

    # 1. per kernel, profd vs ncu
    print("== per kernel: profd (PM sampling during the capture) vs ncu; judged: >= %d x %.0f us "
          "long, within %.0f %%" % (MIN_INTERVALS, args.interval_us, TOLERANCE * 100))
    for key, ls in sorted(groups.items(), key=lambda kv: -sum(
            l["metrics"].get(NCU_DURATION, 0) for l in kv[1])):
        names = sorted({m for l in ls for m in l["metrics"]})
        means = {m: statistics.mean(l["metrics"][m] for l in ls if m in l["metrics"]) for m in names}
        entry, how = match(key, profd)
        phs = {phase_of.get(id(l)) for l in ls}
        if entry is None and len(phs) == 1 and None not in phs and phs.pop() in main_kernel:
            ph = phase_of[id(ls[0])]
            entry, how = main_kernel[ph], "phase (launch order; names differ)"
        ncu_dur = means.get(NCU_DURATION)
        row = {"ncu_name": ls[0]["name"], "ncu_launches": len(ls), "ncu_duration_ns": ncu_dur,
               "match": how or "none", "metrics": []}
        print()
        print("kernel: %s" % short(ls[0]["name"], 110))
        if entry is None:
            print("  no profd kernel matches (ncu launches %d, %.1f us)" % (
                len(ls), (ncu_dur or 0) / 1e3))
            row["verdict"] = "no match"
            result["kernels"].append(row)
            continue
        p_med = stat(entry, "med_ns", "median_ns")
        dur = p_med if p_med else ncu_dur
        judged = dur is not None and dur >= MIN_INTERVALS * interval_ns
        row.update(profd_name=entry.get("name"), phase=entry["phase"],
                   profd_instances=stat(entry, "instances", "count"), profd_median_ns=p_med,
                   counter_time_ns=entry.get("counter_time_ns"), bound=entry.get("bound"),
                   judged=judged)
        print("  phase %s, match %s; profd %s launches, median %.1f us, counter time %s ns; "
              "ncu %d launches, %.1f us; %s" % (
                  entry["phase"], how, row["profd_instances"], (p_med or 0) / 1e3,
                  entry.get("counter_time_ns"), len(ls), (ncu_dur or 0) / 1e3,
                  "judged" if judged else "not judged (shorter than %d intervals)" % MIN_INTERVALS))
        if not entry.get("counters"):
            print("  profd's report has no counters for it")
        print("  %-28s %12s %12s %9s  %s" % ("metric", "profd", "ncu", "rel diff", "within 10 %"))
        for metric, label, kind in METRICS:
            p = profd_value(entry, metric)
            n, used = ncu_value(means, metric)
            rel, verdict = judge(p, n, kind, judged)
            print("  %-28s %12s %12s %9s  %s%s" % (
                label, fmt(p, kind), fmt(n, kind),
                "-" if rel is None else "%.1f %%" % (100 * rel), verdict,
                "" if not used or used == "read+write" or metric != "tensor"
                else "  (ncu: %s)" % used.split(".")[0]))
            row["metrics"].append({"metric": metric, "label": label, "profd": p, "ncu": n,
                                   "ncu_metric": used, "rel_diff": rel, "verdict": verdict})
            if verdict.startswith(("PASS", "FAIL")):
                verdicts.append(verdict.startswith("PASS"))
        result["kernels"].append(row)
    if not groups:
        print("  (no ncu kernels)")

    if ncu_done and groups:  # each op one kernel? (the copy's truth assumes it)
        expected = {ph: v.get("kernels") for ph, v in ncu_done.get("phases", {}).items()}
        print()
        print("ncu launches per phase (expected %s): %s" % (
            expected, {r.get("phase", "?"): r["ncu_launches"] for r in result["kernels"]}))

    # 2. bound class per phase
    print()
    print("== bound class of each phase's main kernel (most total time in its capture)")
    for ph in PHASES:
        d = reports.get(ph)
        if d is None:
            if ph in truth:  # the phase ran, profd's report of it is missing
                print("  %-5s FAIL: no profd report (report_%s.json)" % (ph, ph))
                result["bound"].append({"phase": ph, "verdict": "FAIL", "reason": "no report"})
                verdicts.append(False)
            continue
        ks = d.get("top_kernels", [])
        if not ks:
            print("  %-5s FAIL: no kernels in the report" % ph)
            result["bound"].append({"phase": ph, "verdict": "FAIL", "reason": "no kernels"})
            verdicts.append(False)
            continue
        k = max(ks, key=lambda k: stat(k, "total_ns") or 0)
        bound = k.get("bound")
        ok = bound in EXPECTED_BOUND[ph]
        verdicts.append(ok)
        print("  %-5s %s: bound %r (expected %s), %s launches, median %.1f us: %s\n        reason: %s"
              % (ph, "PASS" if ok else "FAIL", bound, "/".join(EXPECTED_BOUND[ph]),
                 stat(k, "instances", "count"), (stat(k, "med_ns", "median_ns") or 0) / 1e3,
                 short(k.get("name", ""), 80), k.get("bound_reason")))
        result["bound"].append({"phase": ph, "kernel": k.get("name"), "bound": bound,
                                "expected": EXPECTED_BOUND[ph], "bound_reason": k.get("bound_reason"),
                                "verdict": "PASS" if ok else "FAIL"})

    # 3. the copy's DRAM bytes/s against the bytes it moved
    print()
    print("== copy: DRAM read+write bytes/s vs truth (bytes moved per kernel / kernel time)")
    t = truth.get("copy")
    d = reports.get("copy")
    if not t or not t.get("truth_dram_bytes_per_second"):
        print("  SKIP: no copy phase line with truth in workload.txt")
    else:
        tv = t["truth_dram_bytes_per_second"]
        print("  truth: %d bytes per kernel / median %.1f us (CUDA events, %d kernels) = %.4g B/s"
              % (t["bytes_per_kernel"], t["kernel_ns_median"] / 1e3, t.get("timed_kernels", 0), tv))
        k = max(d.get("top_kernels", []), key=lambda k: stat(k, "total_ns") or 0) if d else None
        if k is not None:
            p_med = stat(k, "med_ns", "median_ns")
            if p_med:
                print("  (with profd's own median kernel time %.1f us: %.4g B/s)" % (
                    p_med / 1e3, t["bytes_per_kernel"] / (p_med / 1e9)))
        sources = [("profd", profd_value(k, "dram_bps") if k else None)]
        ncu_copy = next((r for r in result["kernels"] if r.get("phase") == "copy"), None)
        if ncu_copy:
            sources.append(("ncu", next((m["ncu"] for m in ncu_copy["metrics"]
                                         if m["metric"] == "dram_bps"), None)))
        for who, v in sources:
            if v is None:  # profd's is the feature under test: missing fails; ncu's is a reference
                verdict = "FAIL" if who == "profd" else "SKIP"
                print("  %-5s %s: no value" % (who, verdict))
                result["copy_truth"].append({"source": who, "truth": tv, "value": None,
                                             "verdict": verdict})
                if verdict == "FAIL":
                    verdicts.append(False)
                continue
            rel = abs(v - tv) / tv
            ok = rel <= TOLERANCE
            verdicts.append(ok)
            print("  %-5s %s: %.4g B/s, %+.1f %% from truth" % (
                who, "PASS" if ok else "FAIL", v, 100 * (v - tv) / tv))
            result["copy_truth"].append({"source": who, "truth": tv, "value": v, "rel_diff": rel,
                                         "verdict": "PASS" if ok else "FAIL"})
    if "gemm" in truth and truth["gemm"].get("achieved_flops_per_second"):
        print("  (gemm: %.1f TFLOP/s by CUDA events, median %.1f us per GEMM)" % (
            truth["gemm"]["achieved_flops_per_second"] / 1e12,
            truth["gemm"]["kernel_ns_median"] / 1e3))

    n_pass, n_fail = sum(verdicts), len(verdicts) - sum(verdicts)
    result["summary"] = {"pass": n_pass, "fail": n_fail}
    print()
    print("overall: %d PASS, %d FAIL" % (n_pass, n_fail))
    try:
        with open(os.path.join(out, "compare.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)
    except OSError as e:
        print("compare.json not written:", e, file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 -- exit 0 always, say what broke
        import traceback
        traceback.print_exc()
        print("compare_ncu.py failed: %s" % e)
    sys.exit(0)

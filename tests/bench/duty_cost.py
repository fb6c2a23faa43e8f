"""What a duty-cycled flight recorder costs, from every step's start and end.

  duty_cost.py STEPS_FILE...       summary as JSON (of several runs: each, and the phase
                                   reading of all their periods together)
  duty_cost.py --self-test         the estimator on simulated steps whose cost is known

STEPS_FILE (gzip or text) has lines "step <start_ns> <end_ns> <cond>", CLOCK_REALTIME, in the
order run; cond is "off" or "duty:ON/PERIOD" (ms), in blocks of one condition
(recorder_workload.py phase writes it). The recorder's windows begin on whole multiples of PERIOD
since the epoch, so every step's phase in the period is known. Two readings:

  phase: in each period of a duty block, the steps that begin in the window's zone (from 30 ms
    before it to 120 ms after it ends: its start, its records, its stop and flush) against the
    steps of the 250 ms on either side of the zone, where no activity kind is on. The excess over
    that local baseline is what the window cost; the host's drift over a second cancels, since the
    baseline brackets the zone. cost_pct = total excess / (duty time - total excess), with a
    bootstrap 95 % interval over the periods. The same estimator half a period later (placebo) and
    in the off blocks (null) must read zero within their intervals: they show the method's noise.
    Only for periods of 500 ms or more (the zones need room).
  blocks: each duty block's mean step time against the mean of the off blocks next to it; the
    median of those, with its bootstrap 95 % interval. It includes everything (the time between
    windows too) but the host's drift from block to block with it.
"""
import gzip
import json
import random
import statistics
import sys

from overhead_report import bootstrap, paired

ZONE_BEFORE_MS, ZONE_AFTER_MS, BASELINE_MS = 30, 120, 250


def read_steps(path):
    opener = gzip.open if path.endswith(".gz") else open
    steps = []
    with opener(path, "rt") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "step":
                steps.append((int(parts[1]), int(parts[2]), parts[3]))
    return steps


def blocks_of(steps):
    """Runs of one condition, in order: (cond, [(start, end), ...])."""
    out = []
    for start, end, cond in steps:
        if not out or out[-1][0] != cond:
            out.append((cond, []))
        out[-1][1].append((start, end))
    return out


def duty_of(cond):
    on, period = cond.partition(":")[2].split("/")
    return int(on), int(period)


def periods(block, on_ms, period_ms, offset_ms):
    """For every period of the block that holds the window's zone and both baselines: the
    baseline's mean step (ns) and the steps from the left baseline to the right one, as
    (start relative to the window's origin, duration, in the zone). offset_ms moves the window's
    origin (placebo)."""
    ms = 1000000
    period = period_ms * ms
    zone = (-ZONE_BEFORE_MS * ms, (on_ms + ZONE_AFTER_MS) * ms)
    left, right = zone[0] - BASELINE_MS * ms, zone[1] + BASELINE_MS * ms
    k = -(-(block[0][0] - left - offset_ms * ms) // period)  # the first whose baseline it has
    i = 0
    while k * period + offset_ms * ms + right <= block[-1][0]:
        origin = k * period + offset_ms * ms
        k += 1
        while block[i][0] < origin + left:
            i += 1
        steps = []
        for start, end in block[i:]:
            if start >= origin + right:
                break
            steps.append((start - origin, end - start, zone[0] <= start - origin < zone[1]))
        base = [d for _, d, in_zone in steps if not in_zone]
        if base and len(base) < len(steps):
            yield statistics.fmean(base), steps


def window_excess(block, on_ms, period_ms, offset_ms):
    """(excess ns, period ns) for every period: the zone's steps over the baseline."""
    return [(sum(d - base for _, d, in_zone in steps if in_zone), period_ms * 1000000)
            for base, steps in periods(block, on_ms, period_ms, offset_ms)]


def profile(blocks, on_ms, period_ms):
    """How much slower than their baseline steps are, by where they begin relative to the window
    (50 ms bins, from the left baseline's start): where the cost lands."""
    bins = {}
    for _, block in blocks:
        for base, steps in periods(block, on_ms, period_ms, 0):
            for rel, d, _ in steps:
                bins.setdefault(rel // 50000000 * 50, []).append(d / base - 1)
    return {"%+d ms" % b: round(100 * statistics.fmean(v), 2) for b, v in sorted(bins.items())}


def cost_pct(excess):
    extra = sum(e for e, _ in excess)
    return 100.0 * extra / (sum(p for _, p in excess) - extra)


def phase_reading(blocks, rng):
    duty = [(c, b) for c, b in blocks if c.startswith("duty:")]
    if not duty:
        return None
    on_ms, period_ms = duty_of(duty[0][0])
    if period_ms < 2 * (ZONE_BEFORE_MS + ZONE_AFTER_MS + BASELINE_MS) + 2 * on_ms:
        return {"skipped": "period %d ms is too short for the phase reading" % period_ms}
    out = {"duty": duty[0][0]}
    readings = {
        "windows": [e for _, b in duty for e in window_excess(b, on_ms, period_ms, 0)],
        "placebo_half_period": [e for _, b in duty
                                for e in window_excess(b, on_ms, period_ms, period_ms // 2)],
        "null_off_blocks": [e for c, b in blocks if c == "off"
                            for e in window_excess(b, on_ms, period_ms, 0)],
    }
    for name, excess in readings.items():
        if excess:
            out[name] = {"periods": len(excess), "cost_pct": cost_pct(excess),
                         "cost_pct_95": bootstrap(excess, cost_pct, rng),
                         "ms_per_period": statistics.fmean(e for e, _ in excess) / 1e6}
    out["profile_pct"] = profile(duty, on_ms, period_ms)
    return out


def block_reading(blocks, rng):
    means = [(c, statistics.fmean(e - s for s, e in b) / 1e6) for c, b in blocks]
    means = means[1:]  # the first block warms up
    out = {}
    for cond in sorted({c for c, _ in means}):
        values = [m for c, m in means if c == cond]
        out[cond] = {"blocks": len(values), "median_ms": statistics.median(values),
                     "min_ms": min(values), "max_ms": max(values)}
    for cond, rel in paired([(m, c) for c, m in means]).items():
        out["paired_pct"] = statistics.median(rel)
        out["paired_pct_95"] = bootstrap(rel, statistics.median, rng)
    return out


def summarize(steps):
    rng = random.Random(1)  # the same interval for the same file
    blocks = blocks_of(steps)
    return {"steps": len(steps), "phase": phase_reading(blocks, rng),
            "blocks": block_reading(blocks, rng)}


def simulate(cost_in_window, switch_ms, seed):
    """Steps of ~8 ms on a host whose speed drifts (a random walk) and spikes, in 10 s blocks off
    and duty 100/1000; in a window steps take cost_in_window longer, and its end stalls one step
    by switch_ms."""
    rng = random.Random(seed)
    ms = 1000000
    t = 1764633600 * 1000 * ms + rng.randrange(1000) * ms
    speed = 1.0
    steps = []
    for b in range(24):
        cond = "off" if b % 2 == 0 else "duty:100/1000"
        end = t + 10000 * ms
        stalled = set()
        while t < end:
            speed = min(1.5, max(0.7, speed * (1 + rng.gauss(0, 0.004))))
            d = 8 * ms * speed * (1 + rng.gauss(0, 0.02))
            if rng.random() < 0.002:
                d *= 1.5
            phase = t % (1000 * ms)
            if cond != "off" and phase < 100 * ms:
                d *= 1 + cost_in_window
            if cond != "off" and phase >= 100 * ms and t // (1000 * ms) not in stalled:
                stalled.add(t // (1000 * ms))
                d += switch_ms * ms
            steps.append((int(t), int(t + d), cond))
            t += int(d) + 20000  # 20 us between steps
        t += 500 * ms  # the toggle's gap
    return steps


def self_test():
    failures = []
    for cost_in_window, switch_ms, seed in [(0.06, 1.0, 1), (0.0, 0.0, 2), (0.10, 3.0, 3)]:
        # A window's 100 ms of wall time hold 100 / (1 + cost) ms of work.
        extra_ms = 100.0 * cost_in_window / (1 + cost_in_window) + switch_ms
        truth = 100.0 * extra_ms / (1000.0 - extra_ms)
        s = summarize(simulate(cost_in_window, switch_ms, seed))
        got = s["phase"]["windows"]
        line = "truth %.2f %%: phase %.2f %% %s, placebo %.2f %%, null %.2f %%, blocks %.2f %%" % (
            truth, got["cost_pct"], ["%.2f" % v for v in got["cost_pct_95"]],
            s["phase"]["placebo_half_period"]["cost_pct"],
            s["phase"]["null_off_blocks"]["cost_pct"], s["blocks"]["paired_pct"])
        print(line)
        lo, hi = got["cost_pct_95"]
        if not (lo - 0.05 <= truth <= hi + 0.05 and hi - lo < 0.5):
            failures.append("phase reading misses the truth: " + line)
        for null in ("placebo_half_period", "null_off_blocks"):
            lo, hi = s["phase"][null]["cost_pct_95"]
            if not lo - 0.1 <= 0 <= hi + 0.1:
                failures.append("%s is not zero: %s" % (null, line))
    if failures:
        sys.exit("\n".join(failures))
    print("duty_cost self-test: PASS")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 2:
        print(json.dumps(summarize(read_steps(sys.argv[1]))))
    else:
        runs = [read_steps(path) for path in sys.argv[1:]]
        pooled = [b for steps in runs for b in blocks_of(steps)]
        print(json.dumps({"runs": [summarize(steps) for steps in runs],
                          "pooled_phase": phase_reading(pooled, random.Random(1))}))

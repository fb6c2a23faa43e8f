// Launch counting by sampling time, the default (PROFD_AGENT_COUNTERS=sampled): a CUPTI callback
// on every launch costs 3-9 % of a launch-bound loop (docs/OVERHEAD.md), so the launch callbacks
// are on for one short window in each period and every launch seen in a window stands for the
// period: in each 10 ms period, one window of 10 ms / N (N = PROFD_AGENT_LAUNCH_SAMPLE_EVERY,
// 10) at a random offset. Every instant of a period is equally likely to be watched, so steady
// work and bursts (1 s of launches, 4 s idle) are both estimated without bias, and a period is
// short next to any burst a dashboard shows; each window's launches are scaled by the window's
// measured length, not the one asked for (sleeps overshoot).
//
// An earlier scheme watched one whole heartbeat interval in ten: a few samples a minute, and
// locked in phase with periodic work, it read 20-25 % low on the H200 after 13 s.
#pragma once

#include <cstdint>
#include <random>

namespace profagent {

// Where each period's window starts: uniformly at random in [0, period - window).
class WindowSchedule {
 public:
  WindowSchedule(uint64_t period_ns, uint64_t window_ns, uint64_t seed)
      : period_ns_(period_ns), window_ns_(window_ns), random_(seed) {}

  uint64_t period_ns() const { return period_ns_; }
  uint64_t window_ns() const { return window_ns_; }
  // The offset of the next period's window from the period's start.
  uint64_t NextOffset() {
    return std::uniform_int_distribution<uint64_t>(0, period_ns_ - window_ns_)(random_);
  }

 private:
  uint64_t period_ns_;
  uint64_t window_ns_;
  std::mt19937_64 random_;
};

// One counter's estimate: the launches seen in each window, scaled by period / watched time.
// Monotonic, as a Prometheus counter must be; the fractions are kept so rounding adds no bias.
class SampledCount {
 public:
  // `seen` is the counter's raw total (launches seen while watching); `watched_ns` how long the
  // window that just closed really lasted.
  void Fold(uint64_t seen, uint64_t period_ns, uint64_t watched_ns) {
    uint64_t delta = seen - last_seen_;
    last_seen_ = seen;
    if (delta == 0 || watched_ns == 0) return;
    estimate_ += static_cast<double>(delta) * static_cast<double>(period_ns) /
                 static_cast<double>(watched_ns);
  }
  uint64_t estimate() const { return static_cast<uint64_t>(estimate_); }

 private:
  uint64_t last_seen_ = 0;
  double estimate_ = 0;
};

}  // namespace profagent

// The always-on counters' bookkeeping, driven the way the CUPTI callbacks drive it.
#include "agent/counters/launch_counters.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "agent/counters/address_table.h"
#include "agent/counters/launch_sampler.h"
#include "gtest/gtest.h"

namespace profagent {
namespace {

TEST(AddressTableTest, InsertRemoveAndTombstones) {
  AddressTable t(8);
  EXPECT_TRUE(t.Insert(0x1000, 10));
  EXPECT_TRUE(t.Insert(0x2000, 20));
  EXPECT_EQ(t.Remove(0x1000), 10u);
  EXPECT_EQ(t.Remove(0x1000), 0u);  // already gone
  EXPECT_EQ(t.Remove(0x3000), 0u);  // never there
  EXPECT_EQ(t.Remove(0x2000), 20u);
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(t.Insert(i << 20, i));
  EXPECT_FALSE(t.Insert(9ull << 20, 9));  // full: refused, not overwritten
  EXPECT_EQ(t.Remove(5ull << 20), 5u);
}

TEST(AddressTableTest, ConcurrentThreadsKeepEveryByte) {
  AddressTable t(1 << 14);
  std::vector<std::thread> threads;
  std::atomic<uint64_t> removed{0};
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (uint64_t i = 1; i <= 2000; ++i) {
        uint64_t key = (static_cast<uint64_t>(th) << 40) | (i << 12);
        ASSERT_TRUE(t.Insert(key, i));
        if (i % 2 == 0) removed += t.Remove(key);
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t expected_removed = 4 * (2 * (1000 * 1001 / 2));  // 4 threads x sum of even i
  EXPECT_EQ(removed.load(), expected_removed);
}

TEST(LaunchCountersTest, CountsLaunchesGraphsAndNeverMissesThePeak) {
  LaunchCounters& c = LaunchCounters::Get();
  for (int i = 0; i < 1000; ++i) c.OnLaunch(0, false);
  c.OnLaunch(0, true);
  c.OnLaunch(1, false);
  c.OnAlloc(0, 0xa000, 100);
  c.OnAlloc(0, 0xb000, 300);  // peak 400 here
  c.OnFree(0, 0xa000);
  c.OnFree(0, 0xb000);
  c.OnAlloc(0, 0xc000, 50);  // now 50, the 400 peak happened between two heartbeats
  c.OnFree(0, 0xdead);       // unknown address: ignored
  wire::Heartbeat hb;
  c.FillHeartbeat(&hb);
  ASSERT_EQ(hb.devices.size(), 2u);
  EXPECT_EQ(hb.devices[0].device, 0u);
  EXPECT_EQ(hb.devices[0].kernel_launches, 1000u);
  EXPECT_EQ(hb.devices[0].graph_launches, 1u);
  EXPECT_EQ(hb.devices[0].memory_allocated_bytes, 50u);
  EXPECT_EQ(hb.devices[0].memory_peak_bytes, 400u);
  EXPECT_EQ(hb.devices[1].kernel_launches, 1u);
}

TEST(LaunchCountersTest, WithoutCudaTheCountersSayWhyTheyAreOff) {
  // This test process never loaded the CUDA driver.
  EXPECT_EQ(LaunchCounters::Get().Enable(), "the process has no CUDA driver loaded");
  EXPECT_FALSE(LaunchCounters::Get().SetActive(true));
}

TEST(LaunchCountersTest, SampledLaunchesAreScaledByTheTimeWatched) {
  LaunchCounters& c = LaunchCounters::Get();
  c.Enable();  // no CUDA here: it fails, but the mode (sampled, 1/10 by default) is set
  ASSERT_EQ(c.launch_sample_every(), 10u);
  for (int i = 0; i < 50; ++i) c.OnLaunch(2, false);
  c.FoldWindow(10'000'000, 1'000'000);  // 50 seen in 1 ms of 10 ms
  for (int i = 0; i < 30; ++i) c.OnLaunch(2, false);
  c.OnLaunch(2, true);
  c.FoldWindow(10'000'000, 2'000'000);  // a window that overslept: 30 in 2 ms
  wire::Heartbeat hb;
  c.FillHeartbeat(&hb);
  auto d2 = std::find_if(hb.devices.begin(), hb.devices.end(),
                         [](const wire::DeviceCounters& d) { return d.device == 2; });
  ASSERT_NE(d2, hb.devices.end());
  EXPECT_EQ(d2->kernel_launches, 500u + 150u);
  EXPECT_EQ(d2->graph_launches, 5u);
  EXPECT_EQ(hb.launch_sample_every, 10u);
}

// The sampler thread folds while application threads launch (what the TSan build checks): every
// launch seen is counted once, scaled by period / watched.
TEST(LaunchCountersTest, SamplerFoldsWhileApplicationThreadsLaunch) {
  LaunchCounters& c = LaunchCounters::Get();
  c.Enable();  // sampled, 1/10 (no CUDA here: no sampler thread of its own)
  std::atomic<int> launching{4};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) c.OnLaunch(5, i % 100 == 0);
      --launching;
    });
  }
  uint64_t last = 0;
  while (launching.load() > 0) {
    c.FoldWindow(10'000'000, 1'000'000);
    wire::Heartbeat hb;
    c.FillHeartbeat(&hb);
    for (const wire::DeviceCounters& d : hb.devices) {
      if (d.device != 5) continue;
      EXPECT_GE(d.kernel_launches, last);  // a Prometheus counter never goes back
      last = d.kernel_launches;
    }
  }
  for (std::thread& t : threads) t.join();
  c.FoldWindow(10'000'000, 1'000'000);
  wire::Heartbeat hb;
  c.FillHeartbeat(&hb);
  auto d5 = std::find_if(hb.devices.begin(), hb.devices.end(),
                         [](const wire::DeviceCounters& d) { return d.device == 5; });
  ASSERT_NE(d5, hb.devices.end());
  EXPECT_EQ(d5->kernel_launches, 4u * 19800u * 10u);
  EXPECT_EQ(d5->graph_launches, 4u * 200u * 10u);
}

// The sampler's schedule and estimate over a minute of simulated launches, one every `every_ns`
// while the work is on; windows overshoot by 60 us, as sleeps do.
uint64_t LaunchesIn(uint64_t a, uint64_t b, uint64_t every_ns) {
  return (b + every_ns - 1) / every_ns - (a + every_ns - 1) / every_ns;
}

struct Work {
  uint64_t every_ns;
  uint64_t on_ns;  // on for on_ns of each cycle_ns, from `phase_ns`
  uint64_t cycle_ns;
  uint64_t phase_ns;
  uint64_t Launches(uint64_t a, uint64_t b) const {  // in [a, b)
    uint64_t n = 0;
    // From the cycle before the one that holds `a` (cycles start at phase + k * cycle).
    int64_t first = (static_cast<int64_t>(a) - static_cast<int64_t>(phase_ns)) /
                        static_cast<int64_t>(cycle_ns) -
                    1;
    for (int64_t start = static_cast<int64_t>(phase_ns) + first * static_cast<int64_t>(cycle_ns);
         start < static_cast<int64_t>(b); start += static_cast<int64_t>(cycle_ns)) {
      int64_t lo = std::max<int64_t>(a, start), hi = std::min<int64_t>(b, start + on_ns);
      if (lo < hi) n += LaunchesIn(lo, hi, every_ns);
    }
    return n;
  }
};

double RelativeError(const Work& work, uint64_t seed) {
  const uint64_t period = 10'000'000, window = 1'000'000, overshoot = 60'000, span = 60'000'000'000;
  WindowSchedule schedule(period, window, seed);
  SampledCount count;
  uint64_t seen = 0;
  for (uint64_t start = 0; start < span; start += period) {
    uint64_t on = start + schedule.NextOffset();
    seen += work.Launches(on, on + window + overshoot);
    count.Fold(seen, period, window + overshoot);
  }
  double truth = static_cast<double>(work.Launches(0, span));
  return (static_cast<double>(count.estimate()) - truth) / truth;
}

TEST(LaunchSamplerTest, SteadyAndBurstyWorkAreEstimatedWithinAPercentOverAMinute) {
  const Work steady{4'400, 60'000'000'000, 60'000'000'000, 0};  // a launch every 4.4 us
  for (uint64_t seed : {1, 2, 3}) EXPECT_LT(std::fabs(RelativeError(steady, seed)), 0.01) << seed;
  // 1 s of launches, 4 s idle, at any phase against the periods (the scheme that watched one
  // heartbeat in ten read 0 or 10x here, depending on the phase).
  for (uint64_t phase : {0ull, 3'000'000ull, 250'000'000ull, 4'999'000'000ull}) {
    const Work bursty{2'000, 1'000'000'000, 5'000'000'000, phase};
    for (uint64_t seed : {1, 2}) {
      EXPECT_LT(std::fabs(RelativeError(bursty, seed)), 0.01) << phase << " " << seed;
    }
  }
}

}  // namespace
}  // namespace profagent

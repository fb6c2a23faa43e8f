// The always-on counters' bookkeeping, driven the way the CUPTI callbacks drive it.
#include "agent/counters/launch_counters.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "agent/counters/address_table.h"
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
  c.OnFree(0xa000);
  c.OnFree(0xb000);
  c.OnAlloc(0, 0xc000, 50);  // now 50, the 400 peak happened between two heartbeats
  c.OnFree(0xdead);          // unknown address: ignored
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

// Application threads count while the agent thread reads the heartbeat (what the TSan build
// checks): every call counted once, the counters never going back.
TEST(LaunchCountersTest, ThreadsCountWhileTheHeartbeatReads) {
  LaunchCounters& c = LaunchCounters::Get();
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
    wire::Heartbeat hb;
    c.FillHeartbeat(&hb);
    for (const wire::DeviceCounters& d : hb.devices) {
      if (d.device != 5) continue;
      EXPECT_GE(d.kernel_launches, last);  // a Prometheus counter never goes back
      last = d.kernel_launches;
    }
  }
  for (std::thread& t : threads) t.join();
  wire::Heartbeat hb;
  c.FillHeartbeat(&hb);
  auto d5 = std::find_if(hb.devices.begin(), hb.devices.end(),
                         [](const wire::DeviceCounters& d) { return d.device == 5; });
  ASSERT_NE(d5, hb.devices.end());
  EXPECT_EQ(d5->kernel_launches, 4u * 19800u);
  EXPECT_EQ(d5->graph_launches, 4u * 200u);
}

}  // namespace
}  // namespace profagent

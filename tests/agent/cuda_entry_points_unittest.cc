// The entry-point counters for real, without a GPU: the agent interposes the CUDA entry points of
// a process whose CUDA (tests/agent/cupti_fakes: fake_libcuda, fake_cudart) answers every call,
// and an application library (fake_cuda_app) calls them each way PyTorch's libraries do.
#include "agent/interpose/cuda_entry_points.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "agent/counters/launch_counters.h"
#include "gtest/gtest.h"

extern "C" {
int app_runtime_launches(int n, unsigned grid);
int app_driver_launches(int n);
int app_dlsym_launches(int n);
int app_proc_address_launches(int n);
int app_graph_launches(int n);
void* app_malloc(size_t bytes);
void app_free(void* p);
unsigned long long app_mem_create(size_t bytes, int device);
void app_mem_release(unsigned long long handle);
void* app_load_module(const char* path, const char* entry);
int early_launches(int n);
}

namespace profagent {
namespace {

wire::DeviceCounters Counters(uint32_t device) {
  wire::Heartbeat hb;
  LaunchCounters::Get().FillHeartbeat(&hb);
  for (const wire::DeviceCounters& c : hb.devices) {
    if (c.device == device) return c;
  }
  return wire::DeviceCounters{};
}

class CudaEntryPointsTest : public ::testing::Test {
 protected:
  // What the agent does in a CUDA process: interpose at injection, then pick the route.
  static void SetUpTestSuite() {
    CudaEntryPoints::Get().Interpose();
    ASSERT_EQ(LaunchCounters::Get().Enable(), "");
  }
};

TEST_F(CudaEntryPointsTest, TheDefaultRouteIsTheEntryPointsWithoutCupti) {
  EXPECT_EQ(LaunchCounters::Get().route(), wire::LaunchCounting::kEntryPoints);
  CudaEntryPoints::Coverage c = CudaEntryPoints::Get().Report();
  EXPECT_GT(c.launch_routes, 0u);
  EXPECT_TRUE(c.problems.empty()) << c.problems.front();
  bool app = false;
  for (const std::string& name : c.interposed)
    app |= name.find("fake_cuda_app") != std::string::npos;
  EXPECT_TRUE(app);
  wire::Heartbeat hb;
  LaunchCounters::Get().FillHeartbeat(&hb);
  EXPECT_EQ(hb.launch_counting, wire::LaunchCounting::kEntryPoints);
  EXPECT_EQ(hb.launch_sample_every, 1u);
  EXPECT_FALSE(hb.counters_paused);
}

// The runtime reaches the driver through a cuLaunchKernel it looked up itself (wrapped too): each
// runtime launch is still one launch.
TEST_F(CudaEntryPointsTest, ARuntimeLaunchCountsOnceThoughItReachesAWrappedDriverLaunch) {
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_EQ(app_runtime_launches(100, 1), 100);
  EXPECT_EQ(Counters(0).kernel_launches - before, 100u);
  EXPECT_GT(CudaEntryPoints::Get().Report().lookups_wrapped, 0u);  // the runtime's driver table
}

// A runtime that filled its table of driver entry points before the agent started (PyTorch's,
// a statically linked one): the table's entries are found and point at the wrappers.
TEST_F(CudaEntryPointsTest, ARuntimeInitializedBeforeTheAgentIsCountedThroughItsTable) {
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_EQ(early_launches(33), 33);
  EXPECT_EQ(Counters(0).kernel_launches - before, 33u);
  CudaEntryPoints::Coverage c = CudaEntryPoints::Get().Report();
  EXPECT_GE(c.table_slots, 1u);
  bool early = false;
  for (const std::string& name : c.interposed)
    early |= name.find("fake_early") != std::string::npos;
  EXPECT_TRUE(early);
}

TEST_F(CudaEntryPointsTest, FailedLaunchesAreNotCounted) {
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_EQ(app_runtime_launches(10, /*grid=*/0), 0);
  EXPECT_EQ(Counters(0).kernel_launches, before);
}

TEST_F(CudaEntryPointsTest, DriverLaunchesByImportDlsymAndProcAddressAreCounted) {
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_EQ(app_driver_launches(50), 50);
  EXPECT_EQ(Counters(0).kernel_launches - before, 50u);
  ASSERT_EQ(app_dlsym_launches(40), 40);
  EXPECT_EQ(Counters(0).kernel_launches - before, 90u);
  ASSERT_EQ(app_proc_address_launches(30), 30);  // cuGetProcAddress found through itself, _ptsz
  EXPECT_EQ(Counters(0).kernel_launches - before, 120u);
}

TEST_F(CudaEntryPointsTest, GraphLaunchesAreCountedApart) {
  const wire::DeviceCounters before = Counters(0);
  ASSERT_EQ(app_graph_launches(7), 7);
  const wire::DeviceCounters after = Counters(0);
  EXPECT_EQ(after.graph_launches - before.graph_launches, 7u);
  EXPECT_EQ(after.kernel_launches, before.kernel_launches);
}

TEST_F(CudaEntryPointsTest, AllocationsFreesAndThePeakPerDevice) {
  const wire::DeviceCounters before = Counters(0);
  void* a = app_malloc(1 << 20);
  void* b = app_malloc(3 << 20);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Counters(0).memory_allocated_bytes - before.memory_allocated_bytes, 4u << 20);
  app_free(a);
  app_free(b);
  const wire::DeviceCounters after = Counters(0);
  EXPECT_EQ(after.memory_allocated_bytes, before.memory_allocated_bytes);
  EXPECT_GE(after.memory_peak_bytes, before.memory_allocated_bytes + (4u << 20));

  // Physical memory of the VMM API counts on the device it was created for.
  unsigned long long handle = app_mem_create(2 << 20, /*device=*/1);
  ASSERT_NE(handle, 0u);
  EXPECT_EQ(Counters(1).memory_allocated_bytes, 2u << 20);
  app_mem_release(handle);
  EXPECT_EQ(Counters(1).memory_allocated_bytes, 0u);
  EXPECT_EQ(Counters(1).memory_peak_bytes, 2u << 20);
}

// A module dlopen'ed after the agent started that looks cuLaunchKernelEx up on its first call (a
// Triton launcher): patched when its loader's next dlsym runs, before any code of its own.
TEST_F(CudaEntryPointsTest, AModuleLoadedLaterIsCountedFromItsFirstLaunch) {
  using LaunchFn = int (*)(int);
  auto launch_n = reinterpret_cast<LaunchFn>(app_load_module(FAKE_LAUNCHER_PATH, "launch_n"));
  ASSERT_NE(launch_n, nullptr) << dlerror();
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_EQ(launch_n(25), 25);
  EXPECT_EQ(Counters(0).kernel_launches - before, 25u);
}

// dlsym(RTLD_NEXT) answers relative to its caller: through the agent's hook it must still be the
// module's next object (fake_probe_dep: 2), not whatever follows the agent.
TEST_F(CudaEntryPointsTest, DlsymWithRtldNextStillAnswersForItsCaller) {
  using ProbeFn = int (*)();
  auto next_probe = reinterpret_cast<ProbeFn>(app_load_module(FAKE_LAUNCHER_PATH, "next_probe"));
  ASSERT_NE(next_probe, nullptr);
  EXPECT_EQ(next_probe(), 2);
}

// Bursts of launches, each ending in a wait (a decode step's shape), from several threads at
// several periods, with the heartbeat read all along: every launch counted once, the counter never
// going back.
TEST_F(CudaEntryPointsTest, BurstThenWaitStreamsAreCountedExactlyAtEveryPeriod) {
  for (int period_us : {50, 300, 1000}) {
    const uint64_t before = Counters(0).kernel_launches;
    std::atomic<bool> done{false};
    std::thread reader([&] {
      uint64_t last = 0;
      while (!done.load()) {
        uint64_t now = Counters(0).kernel_launches;
        EXPECT_GE(now, last);
        last = now;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (int burst = 0; burst < 40; ++burst) {
          app_runtime_launches(20 + t, 1);
          app_driver_launches(5);
          std::this_thread::sleep_for(std::chrono::microseconds(period_us));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    done.store(true);
    reader.join();
    EXPECT_EQ(Counters(0).kernel_launches - before, 40u * (20 + 21 + 22 + 3 * 5)) << period_us;
  }
}

TEST_F(CudaEntryPointsTest, CountingCanBeStoppedAndRestarted) {
  LaunchCounters& counters = LaunchCounters::Get();
  const uint64_t before = Counters(0).kernel_launches;
  ASSERT_TRUE(counters.SetActive(false));
  app_runtime_launches(10, 1);
  EXPECT_EQ(Counters(0).kernel_launches, before);
  // Withdrawn: the application's slots point at CUDA again, and stay so across heartbeats.
  EXPECT_TRUE(CudaEntryPoints::Get().Report().interposed.empty());
  CudaEntryPoints::Get().Interpose();
  EXPECT_TRUE(CudaEntryPoints::Get().Report().interposed.empty());
  ASSERT_TRUE(counters.SetActive(true));
  app_runtime_launches(10, 1);
  EXPECT_EQ(Counters(0).kernel_launches - before, 10u);
}

}  // namespace
}  // namespace profagent

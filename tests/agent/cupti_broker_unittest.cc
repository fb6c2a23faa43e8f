// The CUPTI broker with its interposition for real: this binary plays the process (and holds the
// agent's code, as libprofagent.so would), libfake_kineto.so plays PyTorch's Kineto calling CUPTI
// through its PLT, and a fake libcupti.so.13 enforces CUPTI 13.0's one-subscriber rule. Each test
// starts from a fresh broker whose GOT patches are undone first.
#include "agent/cupti/cupti_broker.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/interpose/got_patcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/cupti_fakes/fake_cupti.h"

namespace profagent {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kKernel = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
constexpr int kRuntime = CUPTI_ACTIVITY_KIND_RUNTIME;
constexpr CUpti_CallbackId kLaunch = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
constexpr int kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
constexpr int kResource = CUPTI_CB_DOMAIN_RESOURCE;
constexpr int kRuntimeApi = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr int kContextCreated = CUPTI_CBID_RESOURCE_CONTEXT_CREATED;

// The agent's counters, as the broker's participant 0.
int g_agent_marker = 0;
std::atomic<int> g_agent_calls[8][1024];
std::atomic<int> g_agent_bad_userdata{0};

void CUPTIAPI AgentCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void*) {
  if (userdata != &g_agent_marker) g_agent_bad_userdata.fetch_add(1);
  if (domain < 8 && cbid < 1024) g_agent_calls[domain][cbid].fetch_add(1);
}

// The capture's buffers, as CuptiCapture's pool hands them out.
struct Sink {
  std::mutex mutex;
  std::set<uint8_t*> out;
  std::vector<uint64_t> tags;
  std::vector<uint64_t> timestamps;
  int strangers = 0;  // buffers that were not ours
} g_sink;

void CUPTIAPI SinkRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::malloc(4096));
  *size = 4096;
  *max_records = 0;
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  g_sink.out.insert(*buffer);
}

void CUPTIAPI SinkCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  if (g_sink.out.erase(buffer) == 0) {
    ++g_sink.strangers;
    return;
  }
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    g_sink.tags.push_back(fakecupti_record_tag(record));
    g_sink.timestamps.push_back(fakecupti_record_timestamp(record));
  }
  std::free(buffer);
}

std::vector<uint64_t> SinkTimestamps() {
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  return g_sink.timestamps;
}

std::vector<uint64_t> SinkTags() {
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  return g_sink.tags;
}

struct CutShortSeen {
  std::atomic<int> calls{0};
  std::string by;
  size_t tags_when_told = 0;
} g_cut;

void OnCutShort(void*, const std::string& by) {
  g_cut.calls.fetch_add(1);
  g_cut.by = by;
  g_cut.tags_when_told = SinkTags().size();
}

class CuptiBrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("PROFD_AGENT_SHARE_CUPTI");
    fakecupti_set_version(130001);
    Fresh();
  }
  // A new broker (the previous one's GOT patches undone), fake CUPTI and Kineto reset.
  void Fresh() {
    CuptiBroker::ResetForTesting();
    fakecupti_reset();
    fakekineto_reset();
    for (auto& domain : g_agent_calls) {
      for (auto& n : domain) n.store(0);
    }
    g_agent_bad_userdata = 0;
    {
      std::lock_guard<std::mutex> lock(g_sink.mutex);
      g_sink.out.clear();
      g_sink.tags.clear();
      g_sink.timestamps.clear();
      g_sink.strangers = 0;
    }
    g_cut.calls = 0;
    g_cut.by.clear();
    broker().Interpose();
    broker().SetCutShortListener(&OnCutShort, nullptr);
  }
  CuptiBroker& broker() { return CuptiBroker::Get(); }

  void SubscribeAgentCounters() {
    std::string holder;
    ASSERT_EQ(broker().SubscribeAgent(&AgentCallback, &g_agent_marker, &holder), CUPTI_SUCCESS);
    broker().EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, &kLaunch, 1, true);
  }

  // A capture up to the point where CUPTI traces for it.
  void StartCapture(std::vector<CUpti_ActivityKind> kinds) {
    wire::CaptureError error = wire::CaptureError::kNone;
    std::string message;
    ASSERT_TRUE(broker().ClaimForCapture(&error, &message)) << message;
    std::vector<CUpti_ActivityKind> enabled;
    std::string warnings;
    ASSERT_TRUE(broker().StartAgentTracing(kinds, &SinkRequested, &SinkCompleted, &enabled,
                                           &warnings, &error, &message))
        << message;
    ASSERT_EQ(enabled.size(), kinds.size()) << warnings;
  }
};

TEST_F(CuptiBrokerTest, KinetoGetsASubscriberOfItsOwnBesideTheCounters) {
  SubscribeAgentCounters();
  // Kineto's setupCuptiInitCallback: on CUPTI 13.0 without the broker this is
  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and torch.profiler records no kernels.
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_subscribe_address(), reinterpret_cast<void*>(&CuptiBroker::Subscribe));
  EXPECT_EQ(fakecupti_subscribers(), 1);  // CUPTI still sees one: the broker's

  // Each gets the callbacks it enabled, with its own userdata, and nothing else.
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
  EXPECT_EQ(fakekineto_callbacks(kResource, kContextCreated), 1);
  EXPECT_EQ(g_agent_calls[kResource][kContextCreated].load(), 0);
  EXPECT_EQ(fakecupti_fire(kDriver, kLaunch), 1);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 1);
  EXPECT_EQ(fakekineto_callbacks(kDriver, kLaunch), 0);
  EXPECT_EQ(fakekineto_bad_userdata(), 0);
  EXPECT_EQ(g_agent_bad_userdata.load(), 0);
  EXPECT_EQ(fakekineto_get_state(kResource, kContextCreated), 1);
  EXPECT_EQ(fakekineto_get_state(kDriver, kLaunch), 0);

  wire::CuptiSharing report = broker().Report();
  EXPECT_EQ(report.mode, wire::CuptiSharingMode::kShared);
  EXPECT_THAT(report.interposed, Contains("libfake_kineto.so"));
  EXPECT_THAT(report.clients,
              Contains("libfake_kineto.so: CUPTI subscriber, shared through the agent"));
  EXPECT_FALSE(report.other_tracing);
}

// The counters' CUPTI callbacks step aside while torch.profiler traces: CUPTI stops calling them
// before Kineto's first activity kind is on, and calls them again after its last one is off, so
// Kineto's session runs exactly as it would without the agent.
TEST_F(CuptiBrokerTest, CounterCallbacksStepAsideWhileKinetoTraces) {
  SubscribeAgentCounters();
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  ASSERT_EQ(fakecupti_callback_enabled(kDriver, kLaunch), 1);
  fakecupti_clear_log();
  ASSERT_EQ(fakekineto_start(kRuntime), CUPTI_SUCCESS);
  EXPECT_TRUE(broker().AgentCallbacksPaused());
  EXPECT_EQ(fakecupti_callback_enabled(kDriver, kLaunch), 0);
  const std::string log = fakecupti_log();
  EXPECT_LT(log.find("callback:" + std::to_string(kDriver) + ":" + std::to_string(kLaunch) + "=0"),
            log.find("enable:" + std::to_string(kRuntime)))
      << log;
  EXPECT_EQ(fakecupti_fire(kDriver, kLaunch), 0);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 0);
  // Kineto's own callbacks are untouched.
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
  EXPECT_EQ(fakekineto_callbacks(kResource, kContextCreated), 1);

  ASSERT_EQ(fakekineto_stop(kRuntime), CUPTI_SUCCESS);
  EXPECT_FALSE(broker().AgentCallbacksPaused());
  EXPECT_EQ(fakecupti_callback_enabled(kDriver, kLaunch), 1);
  EXPECT_EQ(fakecupti_fire(kDriver, kLaunch), 1);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 1);
}

TEST_F(CuptiBrokerTest, WithoutSharingKinetoIsLockedOutAsBefore) {
  setenv("PROFD_AGENT_SHARE_CUPTI", "off", 1);
  Fresh();
  SubscribeAgentCounters();
  EXPECT_EQ(fakekineto_init(), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_NE(fakekineto_subscribe_address(), reinterpret_cast<void*>(&CuptiBroker::Subscribe));
  wire::CuptiSharing report = broker().Report();
  EXPECT_EQ(report.mode, wire::CuptiSharingMode::kOff);
  EXPECT_THAT(report.detail, HasSubstr("PROFD_AGENT_SHARE_CUPTI=off"));
}

TEST_F(CuptiBrokerTest, CountersSubscribingAfterKinetoShareItsSubscriber) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  SubscribeAgentCounters();
  EXPECT_EQ(fakecupti_subscribers(), 1);
  fakecupti_fire(kDriver, kLaunch);
  fakecupti_fire(kResource, kContextCreated);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 1);
  EXPECT_EQ(fakekineto_callbacks(kResource, kContextCreated), 1);
}

TEST_F(CuptiBrokerTest, NamedSubscriberKeepsItsName) {
  char old[64] = {};
  ASSERT_EQ(fakekineto_subscribe_v2("Kineto", old, sizeof(old)), CUPTI_SUCCESS);
  EXPECT_STREQ(old, "");
  wire::CuptiSharing report = broker().Report();
  ASSERT_FALSE(report.clients.empty());
  EXPECT_THAT(report.clients[0], StartsWith("Kineto (libfake_kineto.so)"));
}

TEST_F(CuptiBrokerTest, CaptureRefusedWhileKinetoTracesAndAllowedAfter) {
  SubscribeAgentCounters();
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);
  ASSERT_EQ(fakecupti_record(kKernel, 7), 1);

  wire::CaptureError error = wire::CaptureError::kNone;
  std::string message;
  EXPECT_FALSE(broker().ClaimForCapture(&error, &message));
  EXPECT_EQ(error, wire::CaptureError::kCuptiInUse);
  EXPECT_THAT(message, HasSubstr("libfake_kineto.so is tracing CUDA activity in this process"));
  EXPECT_THAT(message, HasSubstr("capture again when its session ends"));
  wire::CuptiSharing report = broker().Report();
  EXPECT_TRUE(report.other_tracing);
  EXPECT_EQ(report.other_tracer, "libfake_kineto.so");

  ASSERT_EQ(fakekineto_stop(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_records(), 1);  // its record came back to it
  EXPECT_EQ(fakekineto_last_tag(), 7u);
  EXPECT_FALSE(broker().Report().other_tracing);

  fakecupti_clear_log();
  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  // Host threads by OS thread id (gettid), as in torch.profiler's traces and top -H.
  EXPECT_THAT(fakecupti_log(),
              HasSubstr("thread_id_type:" + std::to_string(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)));
  ASSERT_EQ(fakecupti_record(kKernel, 8), 1);
  CuptiBroker::StopResult stop = broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_FALSE(stop.cut_short);
  EXPECT_EQ(SinkTags(), std::vector<uint64_t>{8});
  EXPECT_EQ(fakekineto_records(), 1);
  // The counters and Kineto's subscriber are still there.
  EXPECT_EQ(fakecupti_subscribers(), 1);
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
  EXPECT_EQ(fakekineto_callbacks(kResource, kContextCreated), 1);
}

TEST_F(CuptiBrokerTest, KinetoStartingDuringACaptureCutsItShortAfterFlushingIt) {
  SubscribeAgentCounters();
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME});
  ASSERT_EQ(fakecupti_record(kKernel, 1), 1);  // in the capture's current buffer
  ASSERT_EQ(fakecupti_record(kRuntime, 2), 1);
  fakecupti_clear_log();

  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);  // torch.profiler session starts

  // Told once, naming who, after its records were flushed to it.
  EXPECT_EQ(g_cut.calls.load(), 1);
  EXPECT_EQ(g_cut.by, "libfake_kineto.so");
  EXPECT_EQ(g_cut.tags_when_told, 2u);
  EXPECT_EQ(SinkTags(), (std::vector<uint64_t>{1, 2}));
  // In CUPTI: the capture's kinds off and its buffer flushed before Kineto's kind went on.
  std::string log = fakecupti_log();
  size_t flush = log.find("flush:forced");
  size_t enable = log.rfind("enable:" + std::to_string(kKernel));
  ASSERT_NE(flush, std::string::npos) << log;
  ASSERT_NE(enable, std::string::npos) << log;
  EXPECT_LT(log.find("disable:" + std::to_string(kKernel)), flush) << log;
  EXPECT_LT(log.find("disable:" + std::to_string(kRuntime)), flush) << log;
  EXPECT_LT(flush, enable) << log;
  EXPECT_FALSE(fakecupti_kind_enabled(kRuntime));

  // From now on the records are Kineto's.
  ASSERT_EQ(fakecupti_record(kKernel, 3), 1);
  CuptiBroker::StopResult stop = broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_TRUE(stop.cut_short);
  EXPECT_EQ(stop.by, "libfake_kineto.so");
  EXPECT_GT(stop.disabled_realtime_ns, 0u);
  EXPECT_TRUE(fakecupti_kind_enabled(kKernel));  // stopping the capture left Kineto's kind alone
  ASSERT_EQ(fakekineto_stop(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_records(), 1);
  EXPECT_EQ(fakekineto_last_tag(), 3u);
  EXPECT_EQ(SinkTags(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(g_sink.strangers, 0);
  EXPECT_EQ(broker().Report().captures_cut_short, 1u);
}

// The calls torch.profiler drops from its traces (cudaGetDevice, cudaGetLastError, ...) and the
// polls that find work unfinished are not recorded while a capture with their records runs, and are
// again once it ends or is cut short (before the other profiler's own kinds go on); a kernels-only
// capture leaves them alone.
TEST_F(CuptiBrokerTest, FrequentCallsAreNotRecordedDuringACaptureAndAreAgainAfter) {
  constexpr int kRuntimeApi = CUPTI_CB_DOMAIN_RUNTIME_API;
  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  EXPECT_EQ(fakecupti_quiet_apis(kRuntimeApi), 0);
  EXPECT_EQ(fakecupti_all_sync_records(), 1);
  broker().StopAgentTracing();
  broker().ReleaseCapture();

  // Synchronization records: only for waits and queries that found the work done.
  StartCapture({CUPTI_ACTIVITY_KIND_SYNCHRONIZATION});
  EXPECT_EQ(fakecupti_all_sync_records(), 0);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_EQ(fakecupti_all_sync_records(), 1);

  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME});
  EXPECT_EQ(fakecupti_quiet_apis(kRuntimeApi), 6);
  EXPECT_EQ(fakecupti_api_recorded(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020), 0);
  EXPECT_EQ(fakecupti_api_recorded(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020),
            0);
  EXPECT_EQ(fakecupti_api_recorded(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000),
            1);
  EXPECT_EQ(
      fakecupti_api_recorded(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020), 1);
  // Launches made through the driver API (cuBLASLt, Triton) are recorded with the runtime API,
  // the rest of the driver API is not.
  EXPECT_EQ(
      fakecupti_api_recorded(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx),
      1);
  EXPECT_EQ(
      fakecupti_api_recorded(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch), 1);
  EXPECT_EQ(
      fakecupti_api_recorded(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2), 0);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_EQ(fakecupti_quiet_apis(kRuntimeApi), 0);
  EXPECT_EQ(
      fakecupti_api_recorded(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx),
      0);

  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  StartCapture({CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER});
  EXPECT_EQ(fakecupti_quiet_apis(CUPTI_CB_DOMAIN_DRIVER_API), 3);
  fakecupti_clear_log();
  ASSERT_EQ(fakekineto_start(kRuntime), CUPTI_SUCCESS);  // cuts the capture short
  EXPECT_EQ(fakecupti_quiet_apis(kRuntimeApi), 0);
  EXPECT_EQ(fakecupti_quiet_apis(CUPTI_CB_DOMAIN_DRIVER_API), 0);
  const std::string log = fakecupti_log();
  EXPECT_LT(log.find("runtime_api:"), log.rfind("enable:" + std::to_string(kRuntime))) << log;
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  ASSERT_EQ(fakekineto_stop(kRuntime), CUPTI_SUCCESS);
}

// Kineto's timestamp source is raw TSC ticks (7777 here); a capture's must stay CLOCK_REALTIME ns.
TEST_F(CuptiBrokerTest, KinetoTimestampSourceNeverReachesACapture) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_register_tsc(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);
  ASSERT_EQ(fakecupti_record(kKernel, 1), 1);
  ASSERT_EQ(fakekineto_stop(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_last_timestamp(), 7777u);

  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  ASSERT_EQ(fakecupti_record(kKernel, 2), 1);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  std::vector<uint64_t> timestamps = SinkTimestamps();
  ASSERT_EQ(timestamps.size(), 1u);
  EXPECT_NE(timestamps[0], 7777u);
  EXPECT_GT(timestamps[0], 1600000000ull * 1000000000ull);  // CLOCK_REALTIME ns

  // Kineto's next session gets its own source back, even without registering it again.
  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);
  ASSERT_EQ(fakecupti_record(kKernel, 3), 1);
  ASSERT_EQ(fakekineto_stop(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_last_tag(), 3u);
  EXPECT_EQ(fakekineto_last_timestamp(), 7777u);
}

TEST_F(CuptiBrokerTest, KinetoTimestampSourceWaitsUntilTheCaptureIsFlushed) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  ASSERT_EQ(fakecupti_record(kKernel, 1), 1);
  // Kineto's session start: its timestamp source first, then its kinds.
  ASSERT_EQ(fakekineto_register_tsc(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(g_cut.calls.load(), 1);
  std::vector<uint64_t> timestamps = SinkTimestamps();
  ASSERT_EQ(timestamps.size(), 1u);
  EXPECT_EQ(timestamps[0], 42u);  // converted with CUPTI's own source, before Kineto's took over
  ASSERT_EQ(fakecupti_record(kKernel, 2), 1);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  ASSERT_EQ(fakekineto_stop(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_last_timestamp(), 7777u);
}

TEST_F(CuptiBrokerTest, KinetoSwitchingOffAKindItNeverEnabledLeavesTheCaptureAlone) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  EXPECT_EQ(fakekineto_disable(kKernel), CUPTI_SUCCESS);
  EXPECT_TRUE(fakecupti_kind_enabled(kKernel));
  EXPECT_EQ(g_cut.calls.load(), 0);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_FALSE(fakecupti_kind_enabled(kKernel));
}

TEST_F(CuptiBrokerTest, BuffersGoBackToWhoeverGaveThem) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_start(kKernel), CUPTI_SUCCESS);
  ASSERT_EQ(fakecupti_record(kKernel, 11), 1);
  // Kineto switched its kind off but has not flushed: its buffer is still CUPTI's current one.
  ASSERT_EQ(fakekineto_disable(kKernel), CUPTI_SUCCESS);
  EXPECT_EQ(fakekineto_buffers_out(), 1);

  StartCapture({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
  // Starting the capture sent Kineto its buffer, so the capture's records land in its own.
  EXPECT_EQ(fakekineto_buffers_out(), 0);
  EXPECT_EQ(fakekineto_last_tag(), 11u);
  ASSERT_EQ(fakecupti_record(kKernel, 12), 1);
  broker().StopAgentTracing();
  broker().ReleaseCapture();
  EXPECT_EQ(SinkTags(), std::vector<uint64_t>{12});
  EXPECT_EQ(fakekineto_records(), 1);
}

TEST_F(CuptiBrokerTest, KinetoTeardownInsideACallbackKeepsTheCounters) {
  SubscribeAgentCounters();
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  ASSERT_EQ(fakekineto_enable_domain(kRuntimeApi), CUPTI_SUCCESS);
  EXPECT_TRUE(fakecupti_callback_enabled(kRuntimeApi, 1));
  fakekineto_teardown_in_next_callback();
  EXPECT_EQ(fakecupti_fire(kRuntimeApi, 1), 1);  // TEARDOWN_CUPTI=1: unsubscribe + finalize there
  EXPECT_EQ(fakekineto_teardown_result(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_finalizes(), 0);  // not passed on: the counters still need CUPTI
  broker().Tick();
  EXPECT_FALSE(fakecupti_callback_enabled(kRuntimeApi, 1));
  EXPECT_EQ(fakecupti_fire(kRuntimeApi, 1), 0);
  EXPECT_EQ(fakecupti_fire(kDriver, kLaunch), 1);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 1);
  // Kineto subscribes again at its next session (lazy re-init): it still works.
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
}

TEST_F(CuptiBrokerTest, FinalizeIsPassedOnWhenNothingElseUsesCupti) {
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_subscribers(), 1);
  ASSERT_EQ(fakekineto_unsubscribe(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_subscribers(), 0);  // nobody needs the real subscriber any more
  EXPECT_EQ(fakekineto_finalize(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_finalizes(), 1);
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
}

TEST_F(CuptiBrokerTest, ToolThatTookCuptiFirstIsReportedAndCapturesRefused) {
  // Nsight Systems' own injection subscribes before the agent: this binary calls CUPTI directly.
  CUpti_SubscriberHandle nsight = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "Nsight Systems";
  ASSERT_EQ(cuptiSubscribe_v2(&nsight, nullptr, nullptr, &params), CUPTI_SUCCESS);

  std::string holder;
  EXPECT_EQ(broker().SubscribeAgent(&AgentCallback, &g_agent_marker, &holder),
            CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_EQ(holder, "CUPTI for Nsight Systems");
  wire::CaptureError error = wire::CaptureError::kNone;
  std::string message;
  EXPECT_FALSE(broker().ClaimForCapture(&error, &message));
  EXPECT_EQ(error, wire::CaptureError::kCuptiInUse);
  EXPECT_THAT(message, HasSubstr("CUPTI says: CUPTI for Nsight Systems"));
  EXPECT_THAT(message, HasSubstr("before the profd agent could share it"));
  wire::CuptiSharing report = broker().Report();
  EXPECT_EQ(report.mode, wire::CuptiSharingMode::kNotShared);
  EXPECT_THAT(report.detail, HasSubstr("CUPTI NOT SHARED: CUPTI for Nsight Systems"));
  cuptiUnsubscribe(nsight);
}

TEST_F(CuptiBrokerTest, LibraryLoadedLaterIsInterposedAtTheNextRescan) {
  SubscribeAgentCounters();
  void* lib = dlopen(FAKE_LAZY_CLIENT_PATH, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto subscribe = reinterpret_cast<fakelazy_subscribe_fn>(dlsym(lib, "fakelazy_subscribe"));
  auto unsubscribe = reinterpret_cast<fakelazy_unsubscribe_fn>(dlsym(lib, "fakelazy_unsubscribe"));
  // Before the rescan it reaches CUPTI directly, and CUPTI is taken (the case reported as late).
  EXPECT_EQ(subscribe(), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  broker().Tick();
  EXPECT_EQ(subscribe(), CUPTI_SUCCESS);
  EXPECT_THAT(broker().Report().interposed, Contains("libfake_lazy_client.so"));
  EXPECT_EQ(unsubscribe(), CUPTI_SUCCESS);
  dlclose(lib);
}

CUptiResult CUPTIAPI OtherToolSubscribe(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}

TEST_F(CuptiBrokerTest, LibraryAnotherInterposerOwnsIsReportedNotTouched) {
  void* lib = dlopen(FAKE_LAZY_CLIENT_PATH, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto subscribe = reinterpret_cast<fakelazy_subscribe_fn>(dlsym(lib, "fakelazy_subscribe"));
  void* cupti = dlopen("libcupti.so.13", RTLD_LAZY | RTLD_NOLOAD);
  GotPatcher other_tool({{"cuptiSubscribe", reinterpret_cast<void*>(&OtherToolSubscribe),
                          dlsym(cupti, "cuptiSubscribe")}},
                        {reinterpret_cast<const void*>(&OtherToolSubscribe),
                         reinterpret_cast<const void*>(&fakekineto_init)});
  other_tool.Scan();

  broker().Tick();
  wire::CuptiSharing report = broker().Report();
  EXPECT_EQ(report.mode, wire::CuptiSharingMode::kPartial);
  ASSERT_EQ(report.not_interposed.size(), 1u);
  EXPECT_THAT(report.not_interposed[0],
              StartsWith("libfake_lazy_client.so: cuptiSubscribe already leads to"));
  EXPECT_EQ(subscribe(), CUPTI_ERROR_NOT_SUPPORTED);  // still the other tool's
  other_tool.RestoreAll();
  dlclose(lib);
}

TEST_F(CuptiBrokerTest, Cupti132GivesKinetoARealSubscriberOfItsOwn) {
  fakecupti_set_version(130200);
  Fresh();
  SubscribeAgentCounters();
  EXPECT_EQ(fakecupti_last_allow_multiple(), 1);
  ASSERT_EQ(fakekineto_init(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_subscribers(), 2);  // CUPTI dispatches to each
  EXPECT_EQ(fakecupti_fire(kResource, kContextCreated), 1);
  EXPECT_EQ(fakekineto_callbacks(kResource, kContextCreated), 1);
  EXPECT_EQ(fakecupti_fire(kDriver, kLaunch), 1);
  EXPECT_EQ(g_agent_calls[kDriver][kLaunch].load(), 1);
  wire::CuptiSharing report = broker().Report();
  EXPECT_TRUE(report.native_multiple_subscribers);
  EXPECT_THAT(report.clients, Contains(HasSubstr("CUPTI subscriber of its own")));
  ASSERT_EQ(fakekineto_unsubscribe(), CUPTI_SUCCESS);
  EXPECT_EQ(fakecupti_subscribers(), 1);
}

TEST_F(CuptiBrokerTest, Cupti130NeverSeesTheLongerSubscriberParams) {
  SubscribeAgentCounters();
  EXPECT_EQ(fakecupti_last_allow_multiple(), 0);
  EXPECT_FALSE(broker().Report().native_multiple_subscribers);
}

}  // namespace
}  // namespace profagent

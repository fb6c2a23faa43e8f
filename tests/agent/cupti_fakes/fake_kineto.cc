// A stand-in for Kineto inside PyTorch 2.11: it calls CUPTI through its PLT (linked with full
// RELRO, as PyTorch's libraries are), subscribes at init and keeps the subscriber, registers its
// activity buffer callbacks and enables kinds at each session start, disables and force-flushes
// at the end, and (TEARDOWN_CUPTI=1) unsubscribes and finalizes from inside a callback.
#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>

#include "tests/agent/cupti_fakes/fake_cupti.h"

namespace {

int g_userdata_marker = 0;
CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<int> g_callbacks[8][1024];
std::atomic<int> g_bad_userdata{0};
std::atomic<bool> g_teardown_next{false};
std::atomic<int> g_teardown_result{-1};
std::mutex g_mutex;
std::set<uint8_t*> g_buffers;  // handed to CUPTI, not back yet
std::atomic<int> g_records{0};
std::atomic<uint64_t> g_last_tag{0};
std::atomic<uint64_t> g_last_timestamp{0};

uint64_t CUPTIAPI Tsc() { return 7777; }

void CUPTIAPI Switchboard(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void*) {
  if (userdata != &g_userdata_marker) g_bad_userdata.fetch_add(1);
  if (domain < 8 && cbid < 1024) g_callbacks[domain][cbid].fetch_add(1);
  if (g_teardown_next.exchange(false)) {
    // Kineto's teardown: from inside the callback.
    cuptiUnsubscribe(g_subscriber);
    g_subscriber = nullptr;
    g_teardown_result.store(cuptiFinalize());
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::malloc(4096));
  *size = 4096;
  *max_records = 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_buffers.insert(*buffer);
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_buffers.erase(buffer) == 0) return;  // not ours: Kineto logs "unknown buffer"
  }
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    g_records.fetch_add(1);
    g_last_tag.store(fakecupti_record_tag(record));
    g_last_timestamp.store(fakecupti_record_timestamp(record));
  }
  std::free(buffer);
}

}  // namespace

extern "C" {

void fakekineto_reset(void) {
  g_subscriber = nullptr;
  for (auto& domain : g_callbacks) {
    for (auto& n : domain) n.store(0);
  }
  g_bad_userdata.store(0);
  g_teardown_next.store(false);
  g_teardown_result.store(-1);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_buffers.clear();
  g_records.store(0);
  g_last_tag.store(0);
  g_last_timestamp.store(0);
}

int fakekineto_register_tsc(void) { return cuptiActivityRegisterTimestampCallback(&Tsc); }
uint64_t fakekineto_last_timestamp(void) { return g_last_timestamp.load(); }

int fakekineto_init(void) {
  CUptiResult r = cuptiSubscribe(&g_subscriber, &Switchboard, &g_userdata_marker);
  if (r != CUPTI_SUCCESS) return r;
  return cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                             CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
}

int fakekineto_subscribe_v2(const char* name, char* old_name, size_t old_size) {
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = name;
  params.oldSubscriberName = old_name;
  params.oldSubscriberSize = old_size;
  return cuptiSubscribe_v2(&g_subscriber, &Switchboard, &g_userdata_marker, &params);
}

int fakekineto_enable_domain(int domain) {
  return cuptiEnableDomain(1, g_subscriber, static_cast<CUpti_CallbackDomain>(domain));
}

int fakekineto_start(int kind) {
  CUptiResult r = cuptiActivityRegisterCallbacks(&BufferRequested, &BufferCompleted);
  if (r != CUPTI_SUCCESS) return r;
  return cuptiActivityEnable(static_cast<CUpti_ActivityKind>(kind));
}

int fakekineto_stop(int kind) {
  CUptiResult r = cuptiActivityDisable(static_cast<CUpti_ActivityKind>(kind));
  if (r != CUPTI_SUCCESS) return r;
  return cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// For agent_host (argument-less calls): a CUDA-kernel session, as torch.profiler(CUDA) starts one.
int fakekineto_start_session(void) {
  return fakekineto_start(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
}
int fakekineto_stop_session(void) { return fakekineto_stop(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); }

int fakekineto_disable(int kind) {
  return cuptiActivityDisable(static_cast<CUpti_ActivityKind>(kind));
}

int fakekineto_unsubscribe(void) {
  CUptiResult r = cuptiUnsubscribe(g_subscriber);
  g_subscriber = nullptr;
  return r;
}

int fakekineto_finalize(void) { return cuptiFinalize(); }

void fakekineto_teardown_in_next_callback(void) { g_teardown_next.store(true); }
int fakekineto_teardown_result(void) { return g_teardown_result.load(); }

int fakekineto_callbacks(int domain, int cbid) { return g_callbacks[domain][cbid].load(); }
int fakekineto_bad_userdata(void) { return g_bad_userdata.load(); }
int fakekineto_records(void) { return g_records.load(); }
uint64_t fakekineto_last_tag(void) { return g_last_tag.load(); }

int fakekineto_buffers_out(void) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int>(g_buffers.size());
}

void* fakekineto_subscribe_address(void) { return reinterpret_cast<void*>(&cuptiSubscribe); }

int fakekineto_get_state(int domain, int cbid) {
  uint32_t enabled = 0;
  if (cuptiGetCallbackState(&enabled, g_subscriber, static_cast<CUpti_CallbackDomain>(domain),
                            static_cast<CUpti_CallbackId>(cbid)) != CUPTI_SUCCESS) {
    return -1;
  }
  return static_cast<int>(enabled);
}

}  // extern "C"

// A stand-in for libcupti.so.13 with CUPTI's rules that matter to sharing it: one callback
// subscriber per process (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "CUPTI for <name>"),
// unless the version says 13.2+ and every subscriber asks for allowMultipleSubscribers; one
// process-wide pair of activity buffer callbacks; a current buffer that CUPTI keeps until a
// forced flush completes it through whatever callback is registered then. fakecupti_* functions
// let tests fire callbacks, produce activity records and read what happened.
#include "tests/agent/cupti_fakes/fake_cupti.h"

#include <cupti.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Subscriber {
  bool live = false;
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::string name;
  bool allow_multiple = false;
  std::set<std::pair<int, int>> enabled;  // (domain, cbid)
  std::set<int> domains;                  // whole domains
};

// What cuptiActivityGetNextRecord walks: a CUpti_Activity header, a tag, and a timestamp that,
// as CUPTI does for GPU records, is converted when the buffer completes, with the timestamp
// source registered then (kDefaultTimestamp stands for CUPTI's own CLOCK_REALTIME).
constexpr uint64_t kDefaultTimestamp = 42;
struct Record {
  CUpti_ActivityKind kind;
  uint32_t pad;
  uint64_t tag;
  uint64_t timestamp;
};

struct State {
  std::recursive_mutex mutex;  // CUPTI's own lock: callbacks run under it, re-entry allowed
  uint32_t version = 130001;
  Subscriber subscribers[8];
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  std::set<int> kinds;
  std::set<int> quiet_runtime, quiet_driver;  // cbids whose records are off
  // Driver cbids recorded without CUPTI_ACTIVITY_KIND_DRIVER (cuptiActivityEnableDriverApi(cbid,
  // 1) alone); enabling that kind afterwards overrides both sets, as in CUPTI.
  std::set<int> picked_driver;
  bool all_sync_records = true;  // unfinished event/stream queries recorded too
  uint8_t* buffer = nullptr;     // the current buffer, until flushed
  size_t buffer_size = 0;
  size_t buffer_used = 0;
  int dropped = 0;
  size_t pending_dropped = 0;  // what cuptiActivityGetNumDroppedRecords says next (then 0)
  int finalizes = 0;
  int enable_callback_calls = 0;
  size_t last_struct_size = 0;
  int last_allow_multiple = -1;
  std::string log;
};

State& S() {
  static State* state = new State;
  return *state;
}

void Note(const std::string& event) {
  State& s = S();
  if (!s.log.empty()) s.log += ",";
  s.log += event;
}

int LiveCount() {
  int n = 0;
  for (const Subscriber& sub : S().subscribers) n += sub.live ? 1 : 0;
  return n;
}

Subscriber* Find(CUpti_SubscriberHandle handle) {
  for (Subscriber& sub : S().subscribers) {
    if (sub.live && reinterpret_cast<CUpti_SubscriberHandle>(&sub) == handle) return &sub;
  }
  return nullptr;
}

CUptiResult DoSubscribe(CUpti_SubscriberHandle* out, CUpti_CallbackFunc callback, void* userdata,
                        const char* name, bool allow_multiple, char* old, size_t old_size) {
  State& s = S();
  if (out == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (LiveCount() > 0) {
    bool all_allow = s.version >= 130200 && allow_multiple;
    for (const Subscriber& sub : s.subscribers) all_allow &= !sub.live || sub.allow_multiple;
    if (!all_allow) {
      for (const Subscriber& sub : s.subscribers) {
        if (sub.live && old != nullptr && old_size > 0) {
          std::snprintf(old, old_size, "CUPTI for %s",
                        sub.name.empty() ? "<not provided>" : sub.name.c_str());
          break;
        }
      }
      Note("subscribe:refused");
      return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
  }
  for (Subscriber& sub : s.subscribers) {
    if (sub.live) continue;
    sub = Subscriber{};
    sub.live = true;
    sub.callback = callback;
    sub.userdata = userdata;
    sub.name = name ? name : "";
    sub.allow_multiple = allow_multiple;
    *out = reinterpret_cast<CUpti_SubscriberHandle>(&sub);
    Note("subscribe:" + sub.name);
    return CUPTI_SUCCESS;
  }
  return CUPTI_ERROR_MAX_LIMIT_REACHED;
}

void CompleteCurrent() {
  State& s = S();
  if (s.buffer == nullptr) return;
  uint8_t* buffer = s.buffer;
  size_t size = s.buffer_size, used = s.buffer_used;
  s.buffer = nullptr;
  s.buffer_size = s.buffer_used = 0;
  for (size_t at = 0; at + sizeof(Record) <= used; at += sizeof(Record)) {
    uint64_t t = s.timestamp ? s.timestamp() : kDefaultTimestamp;
    std::memcpy(buffer + at + offsetof(Record, timestamp), &t, sizeof(t));
  }
  if (s.completed != nullptr) s.completed(nullptr, 0, buffer, size, used);
}

// cuptiActivityEnableRuntimeApi/DriverApi: whether calls of one cbid make records.
CUptiResult SetApiRecorded(std::set<int> State::*quiet, const char* what, CUpti_CallbackId cbid,
                           uint8_t enable) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  if (enable) {
    (S().*quiet).erase(static_cast<int>(cbid));
    if (quiet == &State::quiet_driver) S().picked_driver.insert(static_cast<int>(cbid));
  } else {
    (S().*quiet).insert(static_cast<int>(cbid));
    if (quiet == &State::quiet_driver) S().picked_driver.erase(static_cast<int>(cbid));
  }
  Note(std::string(what) + ":" + std::to_string(cbid) + "=" + std::to_string(enable));
  return CUPTI_SUCCESS;
}
}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = S().version;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  switch (result) {
    case CUPTI_SUCCESS:
      *str = "CUPTI_SUCCESS";
      break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      break;
    case CUPTI_ERROR_INVALID_PARAMETER:
      *str = "CUPTI_ERROR_INVALID_PARAMETER";
      break;
    default:
      *str = "CUPTI_ERROR_UNKNOWN";
      break;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  return DoSubscribe(subscriber, callback, userdata, nullptr, false, nullptr, 0);
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                       CUpti_CallbackFunc callback, void* userdata,
                                       CUpti_SubscriberParams* params) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  State& s = S();
  if (params == nullptr)
    return DoSubscribe(subscriber, callback, userdata, nullptr, false, nullptr, 0);
  if (params->structSize < CUpti_SubscriberParams_STRUCT_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  s.last_struct_size = params->structSize;
  // CUPTI 13.2's field follows oldSubscriberSize.
  bool allow = false;
  if (s.version >= 130200 && params->structSize > CUpti_SubscriberParams_STRUCT_SIZE) {
    allow = reinterpret_cast<const uint8_t*>(params)[CUpti_SubscriberParams_STRUCT_SIZE] != 0;
  }
  s.last_allow_multiple = allow ? 1 : 0;
  return DoSubscribe(subscriber, callback, userdata, params->subscriberName, allow,
                     params->oldSubscriberName, params->oldSubscriberSize);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle handle) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  Subscriber* sub = Find(handle);
  if (sub == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  Note("unsubscribe:" + sub->name);
  *sub = Subscriber{};
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle handle,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  ++S().enable_callback_calls;
  Subscriber* sub = Find(handle);
  if (sub == nullptr || domain <= 0 || domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= 1000) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  if (enable) {
    sub->enabled.insert({domain, static_cast<int>(cbid)});
  } else {
    sub->enabled.erase({domain, static_cast<int>(cbid)});
  }
  Note("callback:" + std::to_string(domain) + ":" + std::to_string(cbid) + "=" +
       std::to_string(enable));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle handle,
                                       CUpti_CallbackDomain domain) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  Subscriber* sub = Find(handle);
  if (sub == nullptr || domain <= 0 || domain >= CUPTI_CB_DOMAIN_SIZE) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  if (enable) {
    sub->domains.insert(domain);
  } else {
    sub->domains.erase(domain);
    for (auto it = sub->enabled.begin(); it != sub->enabled.end();) {
      it = it->first == domain ? sub->enabled.erase(it) : std::next(it);
    }
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle handle) {
  for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    CUptiResult r = cuptiEnableDomain(enable, handle, static_cast<CUpti_CallbackDomain>(d));
    if (r != CUPTI_SUCCESS) return r;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle handle,
                                           CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  Subscriber* sub = Find(handle);
  if (sub == nullptr || enable == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *enable = sub->domains.count(domain) || sub->enabled.count({domain, static_cast<int>(cbid)});
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiFinalize(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  State& s = S();
  ++s.finalizes;
  Note("finalize");
  for (Subscriber& sub : s.subscribers) sub = Subscriber{};
  s.kinds.clear();
  s.quiet_runtime.clear();
  s.quiet_driver.clear();
  s.picked_driver.clear();
  s.all_sync_records = true;
  s.requested = nullptr;
  s.completed = nullptr;
  s.timestamp = nullptr;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                    CUpti_BuffersCallbackCompleteFunc completed) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  S().requested = requested;
  S().completed = completed;
  Note("register");
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  if (fn == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  S().timestamp = fn;
  Note("timestamps");
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  S().kinds.insert(kind);
  if (kind == CUPTI_ACTIVITY_KIND_DRIVER) {
    S().quiet_driver.clear();
    S().picked_driver.clear();
  }
  Note("enable:" + std::to_string(kind));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  S().kinds.erase(kind);
  Note("disable:" + std::to_string(kind));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableContext(CUcontext, CUpti_ActivityKind kind) {
  return cuptiActivityEnable(kind);
}

CUptiResult CUPTIAPI cuptiActivityDisableContext(CUcontext, CUpti_ActivityKind kind) {
  return cuptiActivityDisable(kind);
}

CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  return SetApiRecorded(&State::quiet_runtime, "runtime_api", cbid, enable);
}

CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  return SetApiRecorded(&State::quiet_driver, "driver_api", cbid, enable);
}

CUptiResult CUPTIAPI cuptiActivityEnableAllSyncRecords(uint8_t enable) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  S().all_sync_records = enable != 0;
  Note("all_sync_records:" + std::to_string(enable));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  Note("thread_id_type:" + std::to_string(type));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  Note(flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED ? "flush:forced" : "flush");
  if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) CompleteCurrent();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid_size,
                                                CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* next =
      *record == nullptr ? buffer : reinterpret_cast<uint8_t*>(*record) + sizeof(Record);
  if (next + sizeof(Record) > buffer + valid_size) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

// As CUPTI: records dropped for want of a buffer since the last call, then reset.
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  *dropped = S().pending_dropped;
  S().pending_dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  *timestamp = 1;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain, uint32_t, const char** name) {
  *name = "cuFake";
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext, uint32_t* device) {
  *device = 0;
  return CUPTI_SUCCESS;
}

// --- Test controls ------------------------------------------------------------------------------

void fakecupti_reset(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  State& s = S();
  uint32_t version = s.version;
  for (Subscriber& sub : s.subscribers) sub = Subscriber{};
  s.requested = nullptr;
  s.completed = nullptr;
  s.timestamp = nullptr;
  s.kinds.clear();
  s.buffer = nullptr;  // the test owns (and may leak) buffers left with us
  s.buffer_size = s.buffer_used = 0;
  s.dropped = s.finalizes = s.enable_callback_calls = 0;
  s.pending_dropped = 0;
  s.last_struct_size = 0;
  s.last_allow_multiple = -1;
  s.log.clear();
  s.version = version;
}

void fakecupti_set_version(uint32_t version) { S().version = version; }

int fakecupti_fire(int domain, int cbid) {
  std::vector<std::pair<CUpti_CallbackFunc, void*>> targets;
  {
    std::lock_guard<std::recursive_mutex> lock(S().mutex);
    for (const Subscriber& sub : S().subscribers) {
      if (!sub.live || sub.callback == nullptr) continue;
      if (sub.domains.count(domain) || sub.enabled.count({domain, cbid})) {
        targets.push_back({sub.callback, sub.userdata});
      }
    }
  }
  static const CUresult kSuccess = CUDA_SUCCESS;
  CUpti_CallbackData data{};
  data.callbackSite = CUPTI_API_EXIT;
  data.functionName = "cuFake";
  data.functionReturnValue = const_cast<CUresult*>(&kSuccess);
  for (const auto& [callback, userdata] : targets) {
    callback(userdata, static_cast<CUpti_CallbackDomain>(domain),
             static_cast<CUpti_CallbackId>(cbid), &data);
  }
  return static_cast<int>(targets.size());
}

int fakecupti_record(int kind, uint64_t tag) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  State& s = S();
  if (!s.kinds.count(kind)) return 0;
  if (s.buffer != nullptr && s.buffer_used + sizeof(Record) > s.buffer_size) CompleteCurrent();
  if (s.buffer == nullptr) {
    if (s.requested == nullptr) {
      ++s.dropped;
      ++s.pending_dropped;
      return 0;
    }
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    s.requested(&buffer, &size, &max_records);
    if (buffer == nullptr || size < sizeof(Record)) {
      ++s.dropped;
      ++s.pending_dropped;
      return 0;
    }
    s.buffer = buffer;
    s.buffer_size = size;
    s.buffer_used = 0;
  }
  Record r{static_cast<CUpti_ActivityKind>(kind), 0, tag, 0};
  std::memcpy(s.buffer + s.buffer_used, &r, sizeof(r));
  s.buffer_used += sizeof(r);
  return 1;
}

uint64_t fakecupti_record_tag(const CUpti_Activity* record) {
  return reinterpret_cast<const Record*>(record)->tag;
}

uint64_t fakecupti_record_timestamp(const CUpti_Activity* record) {
  return reinterpret_cast<const Record*>(record)->timestamp;
}

int fakecupti_subscribers(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  return LiveCount();
}

int fakecupti_quiet_apis(int domain) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  return static_cast<int>(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? S().quiet_runtime.size()
                                                                : S().quiet_driver.size());
}

int fakecupti_api_recorded(int domain, int cbid) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) return S().quiet_runtime.count(cbid) ? 0 : 1;
  if (!S().kinds.count(CUPTI_ACTIVITY_KIND_DRIVER)) return S().picked_driver.count(cbid) ? 1 : 0;
  return S().quiet_driver.count(cbid) ? 0 : 1;
}

int fakecupti_all_sync_records(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  return S().all_sync_records ? 1 : 0;
}

int fakecupti_kind_enabled(int kind) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  return S().kinds.count(kind) ? 1 : 0;
}

int fakecupti_callback_enabled(int domain, int cbid) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  for (const Subscriber& sub : S().subscribers) {
    if (sub.live && (sub.domains.count(domain) || sub.enabled.count({domain, cbid}))) return 1;
  }
  return 0;
}

int fakecupti_subscriber_callback(int index, CUpti_CallbackFunc* callback, void** userdata) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  int seen = 0;
  for (const Subscriber& sub : S().subscribers) {
    if (!sub.live) continue;
    if (seen++ == index) {
      *callback = sub.callback;
      *userdata = sub.userdata;
      return 1;
    }
  }
  return 0;
}

int fakecupti_dropped(void) { return S().dropped; }

int fakecupti_drop_one(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  ++S().dropped;
  ++S().pending_dropped;
  return 0;
}

// A runtime-API record: the agent's converter reads only numbers from one (a kernel record would
// send it after a name pointer the fake's records do not have).
int fakecupti_record_api_call(void) { return fakecupti_record(CUPTI_ACTIVITY_KIND_RUNTIME, 1); }
int fakecupti_finalizes(void) { return S().finalizes; }
int fakecupti_last_allow_multiple(void) { return S().last_allow_multiple; }

const char* fakecupti_log(void) {
  static std::string copy;
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  copy = S().log;
  return copy.c_str();
}

void fakecupti_clear_log(void) {
  std::lock_guard<std::recursive_mutex> lock(S().mutex);
  S().log.clear();
}

}  // extern "C"

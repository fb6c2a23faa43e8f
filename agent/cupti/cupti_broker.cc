#include "agent/cupti/cupti_broker.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "agent/cupti/cupti_library.h"
#include "agent/interpose/got_patcher.h"
#include "agent/log.h"

namespace profagent {
namespace {

// API calls a process makes constantly whose records no reader wants: torch.profiler drops these
// from its traces (Kineto's CuptiCbidRegistry), and Kineto stops CUPTI recording cudaGetDevice
// at the source. The agent stops all of them at the source while it traces, so CUPTI builds no
// record for each, and puts them back when its capture ends. Likewise the polls: a
// cudaEventQuery or cudaStreamQuery whose work has not finished yet (NCCL and PyTorch's caching
// allocator poll in loops) makes no synchronization record; a wait that ends still does.
constexpr CUpti_CallbackId kQuietRuntimeCbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaSetDevice_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventCreate_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020,
};
constexpr CUpti_CallbackId kQuietDriverCbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState,
    CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
};

// Turns the recording of those calls off (quiet) or back on, for the API kinds in `kinds`.
void QuietFrequentApis(const CuptiLibrary& cupti, const std::vector<CUpti_ActivityKind>& kinds,
                       bool quiet) {
  const uint8_t record = quiet ? 0 : 1;
  for (CUpti_ActivityKind kind : kinds) {
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME && cupti.ActivityEnableRuntimeApi != nullptr) {
      for (CUpti_CallbackId cbid : kQuietRuntimeCbids) cupti.ActivityEnableRuntimeApi(cbid, record);
    }
    if (kind == CUPTI_ACTIVITY_KIND_DRIVER && cupti.ActivityEnableDriverApi != nullptr) {
      for (CUpti_CallbackId cbid : kQuietDriverCbids) cupti.ActivityEnableDriverApi(cbid, record);
    }
    if (kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION &&
        cupti.ActivityEnableAllSyncRecords != nullptr) {
      cupti.ActivityEnableAllSyncRecords(record);
    }
  }
}

// Kernel launches made through the driver API (cuBLASLt's nvjet kernels, Triton, cuDNN's
// runtime-compiled kernels, NCCL) have no runtime call. With the runtime API traced, the driver API
// is traced too, but only its launch calls, as torch.profiler records them (a launch the runtime
// makes inside a runtime call is not recorded twice by CUPTI). CUPTI 13.0 records a driver call
// only with CUPTI_ACTIVITY_KIND_DRIVER on; the rest of the driver API is then switched off one
// callback id at a time, as Kineto does for the few it drops.
bool IsDriverLaunch(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      return true;
    default:
      return false;
  }
}

// With the runtime API asked for and not the whole driver API: the driver kind is added, to be cut
// down to its launches once enabled (DriverLaunchesOnly).
bool WantsDriverLaunchesOnly(const std::vector<CUpti_ActivityKind>& kinds) {
  bool runtime = false;
  for (CUpti_ActivityKind kind : kinds) {
    if (kind == CUPTI_ACTIVITY_KIND_DRIVER) return false;
    runtime |= kind == CUPTI_ACTIVITY_KIND_RUNTIME;
  }
  return runtime;
}

void DriverLaunchesOnly(const CuptiLibrary& cupti) {
  if (cupti.ActivityEnableDriverApi == nullptr) return;
  for (uint32_t cbid = 1; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE; ++cbid) {
    if (!IsDriverLaunch(cbid)) cupti.ActivityEnableDriverApi(cbid, 0);
  }
}

std::atomic<CuptiBroker*> g_broker{nullptr};

// > 0 while another client's callback runs on this thread: calls it makes into the broker must
// not block on a mutex whose holder may be waiting for CUPTI, which may be waiting for this thread.
thread_local int t_in_dispatch = 0;

// CUPTI 13.2 added CUpti_SubscriberParams.allowMultipleSubscribers after oldSubscriberSize; the
// 13.0 header we build with lacks it. structSize tells CUPTI which fields the caller filled in.
constexpr uint32_t kFirstMultiSubscriberVersion = 130200;
struct SubscriberParams132 {
  size_t structSize;
  const char* subscriberName;
  char* oldSubscriberName;
  size_t oldSubscriberSize;
  uint8_t allowMultipleSubscribers;
};
static_assert(offsetof(SubscriberParams132, oldSubscriberSize) ==
              offsetof(CUpti_SubscriberParams, oldSubscriberSize));
constexpr size_t kParams132Size =
    offsetof(SubscriberParams132, allowMultipleSubscribers) + sizeof(uint8_t);

uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The library a call came from: the name users recognise a client by.
std::string ObjectOf(const void* address) {
  Dl_info info{};
  if (address != nullptr && dladdr(address, &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] != '\0') {
    return Basename(info.dli_fname);
  }
  return "the main program";
}

// Kineto lives inside PyTorch's libraries: say "torch.profiler", which is what users started.
std::string DescribeClient(const std::string& object) {
  if (object.empty()) return "another profiler";
  if (object.rfind("libtorch", 0) == 0 || object.rfind("libkineto", 0) == 0) {
    return "torch.profiler (Kineto in " + object + ")";
  }
  return object;
}

struct DispatchScope {
  DispatchScope() { ++t_in_dispatch; }
  ~DispatchScope() { --t_in_dispatch; }
};

}  // namespace

// --- Set-up ------------------------------------------------------------------------------------

CuptiBroker::CuptiBroker() {
  const char* share = std::getenv("PROFD_AGENT_SHARE_CUPTI");
  sharing_off_ =
      share != nullptr && (std::strcmp(share, "off") == 0 || std::strcmp(share, "0") == 0 ||
                           std::strcmp(share, "false") == 0);
}

CuptiBroker* CuptiBroker::Current() {
  CuptiBroker* broker = g_broker.load(std::memory_order_acquire);
  return broker != nullptr ? broker : &Get();
}

CuptiBroker& CuptiBroker::Get() {
  CuptiBroker* broker = g_broker.load(std::memory_order_acquire);
  if (broker != nullptr) return *broker;
  auto* fresh = new CuptiBroker;  // never destroyed: CUPTI and patched GOTs point into it
  if (!g_broker.compare_exchange_strong(broker, fresh)) {
    delete fresh;
    return *broker;
  }
  pthread_atfork(nullptr, nullptr, &CuptiBroker::AtForkChild);
  return *fresh;
}

// A forked child (a DataLoader worker) inherits the patched GOTs and this broker, with one thread:
// a mutex another thread of the parent held at the fork would never be released. Start them
// afresh so a child that calls CUPTI cannot hang on one.
void CuptiBroker::AtForkChild() {
  CuptiBroker* broker = g_broker.load();
  if (broker == nullptr) return;
  new (&broker->interpose_mutex_) std::mutex;
  new (&broker->names_mutex_) std::mutex;
  new (&broker->subscriber_mutex_) std::mutex;
  new (&broker->activity_mutex_) std::mutex;
}

void CuptiBroker::ResetForTesting() {
  CuptiBroker* old = g_broker.exchange(new CuptiBroker);
  if (old == nullptr) return;
  // Kept, not deleted: a fake library may still hold one of its handles. Reachable, so leak
  // checkers do not count it.
  static std::vector<CuptiBroker*>* retired = new std::vector<CuptiBroker*>;
  retired->push_back(old);
  std::lock_guard<std::mutex> lock(old->interpose_mutex_);
  if (old->patcher_ != nullptr) old->patcher_->RestoreAll();
}

void CuptiBroker::Interpose() {
  if (sharing_off_) return;
  std::lock_guard<std::mutex> lock(interpose_mutex_);
  if (patcher_ == nullptr) {
    // Never load CUPTI for this: a process without one has nothing to share yet.
    if (!CuptiInProcess()) return;
    const CuptiLibrary& cupti = LoadCupti();
    if (!cupti.loaded) return;
    uint32_t version = cupti.version;
    cupti.GetVersion(&version);
    native_multi_.store(version >= kFirstMultiSubscriberVersion && cupti.SubscribeV2 != nullptr);
    std::vector<ImportHook> hooks;
    auto hook = [&](const char* name, void* replacement, void* original) {
      if (original != nullptr) hooks.push_back({name, replacement, original});
    };
    hook("cuptiSubscribe", reinterpret_cast<void*>(&Subscribe),
         reinterpret_cast<void*>(cupti.Subscribe));
    hook("cuptiSubscribe_v2", reinterpret_cast<void*>(&SubscribeV2),
         reinterpret_cast<void*>(cupti.SubscribeV2));
    hook("cuptiUnsubscribe", reinterpret_cast<void*>(&Unsubscribe),
         reinterpret_cast<void*>(cupti.Unsubscribe));
    hook("cuptiEnableCallback", reinterpret_cast<void*>(&EnableCallback),
         reinterpret_cast<void*>(cupti.EnableCallback));
    hook("cuptiEnableDomain", reinterpret_cast<void*>(&EnableDomain),
         reinterpret_cast<void*>(cupti.EnableDomain));
    hook("cuptiEnableAllDomains", reinterpret_cast<void*>(&EnableAllDomains),
         reinterpret_cast<void*>(cupti.EnableAllDomains));
    hook("cuptiGetCallbackState", reinterpret_cast<void*>(&GetCallbackState),
         reinterpret_cast<void*>(cupti.GetCallbackState));
    hook("cuptiFinalize", reinterpret_cast<void*>(&Finalize),
         reinterpret_cast<void*>(cupti.Finalize));
    hook("cuptiActivityRegisterCallbacks", reinterpret_cast<void*>(&ActivityRegisterCallbacks),
         reinterpret_cast<void*>(cupti.ActivityRegisterCallbacks));
    hook("cuptiActivityEnable", reinterpret_cast<void*>(&ActivityEnable),
         reinterpret_cast<void*>(cupti.ActivityEnable));
    hook("cuptiActivityDisable", reinterpret_cast<void*>(&ActivityDisable),
         reinterpret_cast<void*>(cupti.ActivityDisable));
    hook("cuptiActivityEnableContext", reinterpret_cast<void*>(&ActivityEnableContext),
         reinterpret_cast<void*>(cupti.ActivityEnableContext));
    hook("cuptiActivityDisableContext", reinterpret_cast<void*>(&ActivityDisableContext),
         reinterpret_cast<void*>(cupti.ActivityDisableContext));
    hook("cuptiActivityRegisterTimestampCallback",
         reinterpret_cast<void*>(&ActivityRegisterTimestampCallback),
         reinterpret_cast<void*>(cupti.ActivityRegisterTimestampCallback));
    // Never the agent's own calls (they must reach CUPTI), nor libcupti's calls to itself.
    patcher_ =
        new GotPatcher(std::move(hooks), {reinterpret_cast<const void*>(&CuptiBroker::Dispatch),
                                          reinterpret_cast<const void*>(cupti.Subscribe)});
    uint64_t start = MonotonicNs();
    patcher_->Scan();
    Log(LogLevel::kInfo,
        "sharing CUPTI (%s, version %u%s) with the process's other CUPTI clients; %zu libraries "
        "checked in %.1f ms",
        cupti.path.c_str(), version, native_multi_.load() ? ", multiple subscribers supported" : "",
        patcher_->objects(), static_cast<double>(MonotonicNs() - start) / 1e6);
  }
  patcher_->Scan();
  uint64_t generation = patcher_->generation();
  if (generation == reported_generation_) return;
  reported_generation_ = generation;
  std::vector<GotPatcher::ObjectReport> report = patcher_->Report();
  {
    std::lock_guard<std::mutex> names_lock(names_mutex_);
    interposed_names_.clear();
    for (const GotPatcher::ObjectReport& o : report) {
      if (o.slots > 0) interposed_names_.push_back(Basename(o.path));
    }
  }
  for (const GotPatcher::ObjectReport& o : report) {
    std::string line = o.path + "|" + std::to_string(o.slots) + "|" + o.problem;
    bool seen = false;
    for (const std::string& l : logged_) seen |= l == line;
    if (seen) continue;
    logged_.push_back(line);
    if (!o.problem.empty()) {
      Log(LogLevel::kWarning,
          "CUPTI cannot be shared with %s: %s. It calls CUPTI directly: if it is a profiler, it "
          "and the agent (counters, captures) exclude each other",
          o.path.c_str(), o.problem.c_str());
    } else if (o.slots > 0) {
      Log(LogLevel::kInfo, "CUPTI calls from %s go through the agent (%u GOT slots)",
          o.path.c_str(), o.slots);
    }
  }
}

// The library a CUPTI call came from. A tail call (`return cuptiActivityEnable(...)`) leaves its
// caller's caller as the return address: then the interposed library it must have come from.
std::string CuptiBroker::CallerName(const void* return_address) {
  std::string object = ObjectOf(return_address);
  std::lock_guard<std::mutex> lock(names_mutex_);
  if (interposed_names_.empty()) return object;
  for (const std::string& name : interposed_names_) {
    if (name == object) return object;
  }
  for (const std::string& name : interposed_names_) {
    if (name.rfind("libtorch", 0) == 0) return name;
  }
  return interposed_names_.front();
}

void CuptiBroker::Tick() {
  Interpose();
  if (dirty_.load()) WithSubscriberLock([] {});
}

// --- Subscribers ---------------------------------------------------------------------------------

bool CuptiBroker::Participant::Wants(uint32_t domain, uint32_t cbid) const {
  if (domain >= static_cast<uint32_t>(kDomains)) return false;
  if (cbid < static_cast<uint32_t>(kCbidWords * 64)) {
    return (bits[domain][cbid >> 6].load(std::memory_order_relaxed) >> (cbid & 63)) & 1;
  }
  return whole_domain[domain].load(std::memory_order_relaxed);
}

void CuptiBroker::Participant::Clear() {
  for (int d = 0; d < kDomains; ++d) {
    for (int w = 0; w < kCbidWords; ++w) bits[d][w].store(0, std::memory_order_relaxed);
    whole_domain[d].store(false, std::memory_order_relaxed);
  }
}

template <typename Fn>
bool CuptiBroker::WithSubscriberLock(Fn&& fn) {
  if (t_in_dispatch > 0) {
    if (!subscriber_mutex_.try_lock()) {
      dirty_.store(true);
      return false;
    }
  } else {
    subscriber_mutex_.lock();
  }
  fn();
  DrainDeferredLocked();
  subscriber_mutex_.unlock();
  // A change left while we held the mutex, after our last drain: apply it unless someone else can.
  while (dirty_.load() && subscriber_mutex_.try_lock()) {
    DrainDeferredLocked();
    subscriber_mutex_.unlock();
  }
  return true;
}

void CuptiBroker::DrainDeferredLocked() {
  while (dirty_.exchange(false)) {
    for (int n = deferred_releases_.exchange(0); n > 0; --n) ReleaseRealLocked();
    ReconcileLocked();
  }
}

// The one real subscriber, shared by every user the broker serves. Its callback is Dispatch.
CUptiResult CuptiBroker::AcquireRealLocked(std::string* holder) {
  if (real_ != nullptr) {
    ++real_users_;
    return CUPTI_SUCCESS;
  }
  const CuptiLibrary& cupti = LoadCupti();
  if (!cupti.loaded) return CUPTI_ERROR_NOT_INITIALIZED;
  char old[2 * CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUptiResult r;
  if (cupti.SubscribeV2 != nullptr) {
    SubscriberParams132 params{};
    bool multi = native_multi_.load();
    params.structSize = multi ? kParams132Size : CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "profd";
    params.oldSubscriberName = old;
    params.oldSubscriberSize = sizeof(old);
    params.allowMultipleSubscribers = multi ? 1 : 0;
    r = cupti.SubscribeV2(&real_, &CuptiBroker::Dispatch, this,
                          reinterpret_cast<CUpti_SubscriberParams*>(&params));
    if (r == CUPTI_ERROR_INVALID_PARAMETER && multi) {
      // A CUPTI that reports 13.2 but refuses the longer struct: go on as on 13.0.
      native_multi_.store(false);
      params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
      params.allowMultipleSubscribers = 0;
      r = cupti.SubscribeV2(&real_, &CuptiBroker::Dispatch, this,
                            reinterpret_cast<CUpti_SubscriberParams*>(&params));
    }
  } else {
    r = cupti.Subscribe(&real_, &CuptiBroker::Dispatch, this);
  }
  if (r != CUPTI_SUCCESS) {
    real_ = nullptr;
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      std::string who = old[0] ? std::string(old) : "another CUPTI client";
      if (who != holder_) {
        Log(LogLevel::kWarning,
            "CUPTI is held by %s, which took it before the profd agent could share it: launch and "
            "memory counters off, captures refused while it holds CUPTI",
            who.c_str());
      }
      holder_ = who;
      if (holder != nullptr) *holder = who;
    }
    return r;
  }
  holder_.clear();
  real_users_ = 1;
  std::memset(real_bits_, 0, sizeof(real_bits_));
  std::memset(real_domain_, 0, sizeof(real_domain_));
  ReconcileLocked();  // what the users want, after a release and a new subscription
  return CUPTI_SUCCESS;
}

void CuptiBroker::ReleaseRealLocked() {
  if (real_users_ <= 0) return;
  if (--real_users_ > 0 || real_ == nullptr) return;
  LoadCupti().Unsubscribe(real_);
  real_ = nullptr;
}

// Brings CUPTI's callback switches for the real subscriber in line with the union of what every
// participant enabled. A whole domain is switched on in CUPTI as a domain (so ids newer than our
// table are covered); Dispatch filters per participant.
void CuptiBroker::ReconcileLocked() {
  if (real_ == nullptr) return;
  const CuptiLibrary& cupti = LoadCupti();
  uint32_t mask = ReconcileMask();
  for (int d = 1; d < kDomains; ++d) {
    bool whole = false;
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      whole |= participants_[__builtin_ctz(m)].whole_domain[d].load();
    }
    if (whole != real_domain_[d] && cupti.EnableDomain != nullptr) {
      if (cupti.EnableDomain(whole ? 1 : 0, real_, static_cast<CUpti_CallbackDomain>(d)) ==
          CUPTI_SUCCESS) {
        real_domain_[d] = whole;
        for (int w = 0; w < kCbidWords; ++w) real_bits_[d][w] = whole ? ~0ull : 0;
      }
    }
    if (real_domain_[d]) continue;
    for (int w = 0; w < kCbidWords; ++w) {
      uint64_t want = 0;
      for (uint32_t m = mask; m != 0; m &= m - 1) {
        want |= participants_[__builtin_ctz(m)].bits[d][w].load();
      }
      for (uint64_t diff = want ^ real_bits_[d][w]; diff != 0; diff &= diff - 1) {
        int b = __builtin_ctzll(diff);
        bool on = (want >> b) & 1;
        CUptiResult r =
            cupti.EnableCallback(on ? 1 : 0, real_, static_cast<CUpti_CallbackDomain>(d),
                                 static_cast<CUpti_CallbackId>(w * 64 + b));
        if (r == CUPTI_SUCCESS || !on) real_bits_[d][w] ^= 1ull << b;
      }
    }
  }
}

CUptiResult CuptiBroker::ReconcileOneLocked(uint32_t domain, uint32_t cbid) {
  if (real_ == nullptr || real_domain_[domain]) return CUPTI_SUCCESS;
  uint64_t bit = 1ull << (cbid & 63);
  bool want = false;
  for (uint32_t m = ReconcileMask(); m != 0; m &= m - 1) {
    want |= participants_[__builtin_ctz(m)].Wants(domain, cbid);
  }
  bool have = real_bits_[domain][cbid >> 6] & bit;
  if (want == have) return CUPTI_SUCCESS;
  CUptiResult r = LoadCupti().EnableCallback(want ? 1 : 0, real_,
                                             static_cast<CUpti_CallbackDomain>(domain), cbid);
  if (r == CUPTI_SUCCESS || !want) real_bits_[domain][cbid >> 6] ^= bit;
  return r;
}

void CUPTIAPI CuptiBroker::Dispatch(void* userdata, CUpti_CallbackDomain domain,
                                    CUpti_CallbackId cbid, const void* data) {
  auto* self = static_cast<CuptiBroker*>(userdata);
  for (uint32_t mask = self->active_mask_.load(std::memory_order_acquire); mask != 0;
       mask &= mask - 1) {
    int i = __builtin_ctz(mask);
    const Participant& p = self->participants_[i];
    if (!p.Wants(domain, cbid)) continue;
    const Registration* registration = p.registration.load(std::memory_order_acquire);
    if (registration == nullptr || registration->callback == nullptr) continue;
    if (i == 0) {  // the agent's counters: the hot path, nothing more
      if (!self->agent_paused_.load(std::memory_order_relaxed)) {
        registration->callback(registration->userdata, domain, cbid, data);
      }
      continue;
    }
    DispatchScope scope;
    registration->callback(registration->userdata, domain, cbid, data);
  }
}

CUptiResult CuptiBroker::SubscribeAgent(CUpti_CallbackFunc callback, void* userdata,
                                        std::string* holder) {
  CUptiResult result = CUPTI_SUCCESS;
  WithSubscriberLock([&] {
    if (agent_subscribed_) return;
    result = AcquireRealLocked(holder);
    if (result != CUPTI_SUCCESS) return;
    agent_subscribed_ = true;
    Participant& p = participants_[0];
    p.Clear();
    std::snprintf(p.name, sizeof(p.name), "profd agent");
    p.registration.store(new Registration{callback, userdata}, std::memory_order_release);
    p.state.store(kLive);
    active_mask_.fetch_or(1u);
  });
  return result;
}

void CuptiBroker::EnableAgentCallbacks(CUpti_CallbackDomain domain, const CUpti_CallbackId* cbids,
                                       size_t n, bool on) {
  if (domain <= 0 || domain >= kDomains) return;
  Participant& p = participants_[0];
  for (size_t i = 0; i < n; ++i) {
    if (cbids[i] >= static_cast<uint32_t>(kCbidWords * 64)) continue;
    uint64_t bit = 1ull << (cbids[i] & 63);
    if (on) {
      p.bits[domain][cbids[i] >> 6].fetch_or(bit);
    } else {
      p.bits[domain][cbids[i] >> 6].fetch_and(~bit);
    }
  }
  WithSubscriberLock([&] {
    for (size_t i = 0; i < n; ++i) {
      if (cbids[i] < static_cast<uint32_t>(kCbidWords * 64)) ReconcileOneLocked(domain, cbids[i]);
    }
  });
}

uint32_t CuptiBroker::ReconcileMask() const {
  uint32_t mask = active_mask_.load();
  return agent_paused_.load() ? mask & ~1u : mask;
}

void CuptiBroker::PauseAgentCallbacks(bool pause) {
  if (agent_paused_.exchange(pause) == pause) return;
  Log(LogLevel::kInfo,
      pause ? "another profiler traces CUDA activity: the agent's CUPTI counters step aside"
            : "the other profiler stopped tracing: the agent's CUPTI counters resume");
  dirty_.store(true);
  WithSubscriberLock([&] { ReconcileLocked(); });
  if (void (*listener)() = tracing_listener_.load()) listener();
}

CuptiBroker::Participant* CuptiBroker::VirtualParticipant(CUpti_SubscriberHandle handle) {
  auto address = reinterpret_cast<uintptr_t>(handle);
  auto first = reinterpret_cast<uintptr_t>(&participants_[1]);
  auto end = reinterpret_cast<uintptr_t>(&participants_[kParticipants]);
  if (address < first || address >= end || (address - first) % sizeof(Participant) != 0) {
    return nullptr;
  }
  return reinterpret_cast<Participant*>(address);
}

CUptiResult CuptiBroker::SubscribeOther(CUpti_SubscriberHandle* out, CUpti_CallbackFunc callback,
                                        void* userdata, CUpti_SubscriberParams* params,
                                        const std::string& caller) {
  if (out == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  const bool has_name = params != nullptr &&
                        params->structSize >= offsetof(CUpti_SubscriberParams, subscriberName) +
                                                  sizeof(params->subscriberName) &&
                        params->subscriberName != nullptr && params->subscriberName[0] != '\0';
  const bool has_old = params != nullptr &&
                       params->structSize >= CUpti_SubscriberParams_STRUCT_SIZE &&
                       params->oldSubscriberName != nullptr && params->oldSubscriberSize > 0;
  std::string name = has_name ? std::string(params->subscriberName) + " (" + caller + ")" : caller;
  const CuptiLibrary& cupti = LoadCupti();
  CUptiResult result = CUPTI_ERROR_UNKNOWN;
  bool ran = WithSubscriberLock([&] {
    if (native_multi_.load() && cupti.SubscribeV2 != nullptr) {
      // CUPTI 13.2+: a real subscriber of its own; CUPTI dispatches.
      SubscriberParams132 p{};
      p.structSize = kParams132Size;
      p.subscriberName = has_name ? params->subscriberName : nullptr;
      p.oldSubscriberName = has_old ? params->oldSubscriberName : nullptr;
      p.oldSubscriberSize = has_old ? params->oldSubscriberSize : 0;
      p.allowMultipleSubscribers = 1;
      CUptiResult r =
          cupti.SubscribeV2(out, callback, userdata, reinterpret_cast<CUpti_SubscriberParams*>(&p));
      if (r == CUPTI_SUCCESS) {
        native_clients_.push_back({*out, name});
        Log(LogLevel::kInfo, "%s subscribed to CUPTI beside the agent (multiple subscribers)",
            name.c_str());
        result = r;
        return;
      }
      if (r != CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        result = r;
        return;
      }
      // CUPTI would not share: fall back to a subscriber the broker dispatches.
    }
    int slot = -1;
    for (int i = 1; i < kParticipants && slot < 0; ++i) {
      if (participants_[i].state.load() == kFree) slot = i;
    }
    if (slot < 0) {
      Log(LogLevel::kWarning, "%s: more than %d CUPTI subscribers in this process, refused",
          name.c_str(), kParticipants - 1);
      result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
      return;
    }
    std::string holder;
    result = AcquireRealLocked(&holder);
    if (result != CUPTI_SUCCESS) {
      if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && has_old) {
        std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", holder.c_str());
      }
      return;
    }
    Participant& p = participants_[slot];
    p.Clear();
    std::snprintf(p.name, sizeof(p.name), "%s", name.c_str());
    p.registration.store(new Registration{callback, userdata}, std::memory_order_release);
    p.state.store(kLive);
    active_mask_.fetch_or(1u << slot);
    *out = reinterpret_cast<CUpti_SubscriberHandle>(&p);
    Log(LogLevel::kInfo, "%s subscribed to CUPTI: it shares the agent's subscriber", name.c_str());
  });
  // Subscribing from inside a CUPTI callback while the broker is busy: CUPTI could not either.
  return ran ? result : CUPTI_ERROR_NOT_READY;
}

__attribute__((noinline)) CUptiResult CUPTIAPI CuptiBroker::Subscribe(
    CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  return self->SubscribeOther(subscriber, callback, userdata, nullptr, caller);
}

__attribute__((noinline)) CUptiResult CUPTIAPI
CuptiBroker::SubscribeV2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                         void* userdata, CUpti_SubscriberParams* params) {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  return self->SubscribeOther(subscriber, callback, userdata, params, caller);
}

CUptiResult CUPTIAPI CuptiBroker::Unsubscribe(CUpti_SubscriberHandle handle) {
  CuptiBroker* self = Current();
  Participant* p = self->VirtualParticipant(handle);
  if (p == nullptr) {
    CUptiResult r = LoadCupti().Unsubscribe(handle);
    if (r == CUPTI_SUCCESS) {
      self->WithSubscriberLock([&] {
        for (size_t i = 0; i < self->native_clients_.size(); ++i) {
          if (self->native_clients_[i].handle == handle) {
            self->native_clients_.erase(self->native_clients_.begin() + static_cast<long>(i));
            break;
          }
        }
      });
    }
    return r;
  }
  int live = kLive;
  if (!p->state.compare_exchange_strong(live, kRetiring)) return CUPTI_ERROR_INVALID_PARAMETER;
  int index = static_cast<int>(p - self->participants_);
  // Dispatch stops calling it at once; CUPTI's switches follow as soon as the mutex is free
  // (Kineto unsubscribes from inside a callback, where waiting for it is not an option).
  self->active_mask_.fetch_and(~(1u << index));
  if (Registration* old =
          const_cast<Registration*>(p->registration.exchange(nullptr, std::memory_order_acq_rel))) {
    old->next_retired = self->retired_registrations_.load(std::memory_order_relaxed);
    while (!self->retired_registrations_.compare_exchange_weak(old->next_retired, old,
                                                               std::memory_order_release)) {
    }
  }
  p->Clear();
  p->state.store(kFree);
  self->deferred_releases_.fetch_add(1);
  self->dirty_.store(true);
  self->WithSubscriberLock([] {});
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI CuptiBroker::EnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                 CUpti_CallbackDomain domain,
                                                 CUpti_CallbackId cbid) {
  CuptiBroker* self = Current();
  Participant* p = self->VirtualParticipant(subscriber);
  if (p == nullptr) return LoadCupti().EnableCallback(enable, subscriber, domain, cbid);
  if (p->state.load() != kLive || domain <= 0 || domain >= kDomains ||
      cbid >= static_cast<uint32_t>(kCbidWords * 64)) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  uint64_t bit = 1ull << (cbid & 63);
  if (enable) {
    p->bits[domain][cbid >> 6].fetch_or(bit);
  } else {
    p->bits[domain][cbid >> 6].fetch_and(~bit);
  }
  CUptiResult result = CUPTI_SUCCESS;
  self->WithSubscriberLock([&] {
    result = self->ReconcileOneLocked(domain, cbid);
    if (result != CUPTI_SUCCESS && enable) p->bits[domain][cbid >> 6].fetch_and(~bit);
  });
  return result;
}

CUptiResult CUPTIAPI CuptiBroker::EnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                               CUpti_CallbackDomain domain) {
  CuptiBroker* self = Current();
  Participant* p = self->VirtualParticipant(subscriber);
  if (p == nullptr) {
    const CuptiLibrary& cupti = LoadCupti();
    return cupti.EnableDomain ? cupti.EnableDomain(enable, subscriber, domain)
                              : CUPTI_ERROR_NOT_SUPPORTED;
  }
  if (p->state.load() != kLive || domain <= 0 || domain >= kDomains) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  for (int w = 0; w < kCbidWords; ++w) p->bits[domain][w].store(enable ? ~0ull : 0);
  p->whole_domain[domain].store(enable != 0);
  self->WithSubscriberLock([&] { self->ReconcileLocked(); });
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI CuptiBroker::EnableAllDomains(uint32_t enable,
                                                   CUpti_SubscriberHandle subscriber) {
  CuptiBroker* self = Current();
  Participant* p = self->VirtualParticipant(subscriber);
  if (p == nullptr) {
    const CuptiLibrary& cupti = LoadCupti();
    return cupti.EnableAllDomains ? cupti.EnableAllDomains(enable, subscriber)
                                  : CUPTI_ERROR_NOT_SUPPORTED;
  }
  if (p->state.load() != kLive) return CUPTI_ERROR_INVALID_PARAMETER;
  for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE && d < kDomains; ++d) {
    for (int w = 0; w < kCbidWords; ++w) p->bits[d][w].store(enable ? ~0ull : 0);
    p->whole_domain[d].store(enable != 0);
  }
  self->WithSubscriberLock([&] { self->ReconcileLocked(); });
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI CuptiBroker::GetCallbackState(uint32_t* enable,
                                                   CUpti_SubscriberHandle subscriber,
                                                   CUpti_CallbackDomain domain,
                                                   CUpti_CallbackId cbid) {
  CuptiBroker* self = Current();
  Participant* p = self->VirtualParticipant(subscriber);
  if (p == nullptr) {
    const CuptiLibrary& cupti = LoadCupti();
    return cupti.GetCallbackState ? cupti.GetCallbackState(enable, subscriber, domain, cbid)
                                  : CUPTI_ERROR_NOT_SUPPORTED;
  }
  if (enable == nullptr || p->state.load() != kLive || domain <= 0 || domain >= kDomains) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  *enable = p->Wants(domain, cbid) ? 1 : 0;
  return CUPTI_SUCCESS;
}

__attribute__((noinline)) CUptiResult CUPTIAPI CuptiBroker::Finalize() {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  bool passed = false;
  CUptiResult result = CUPTI_SUCCESS;
  self->WithSubscriberLock([&] {
    // Finalizing detaches CUPTI from the process: every subscriber and activity goes. Only when
    // nothing else uses CUPTI through us (Kineto's TEARDOWN_CUPTI with the counters off).
    bool others = (self->active_mask_.load() & ~1u) != 0 || !self->native_clients_.empty();
    if (self->agent_subscribed_ || self->capture_claims_ > 0 || others) return;
    const CuptiLibrary& cupti = LoadCupti();
    if (cupti.Finalize == nullptr) return;
    if (self->real_ != nullptr) {
      cupti.Unsubscribe(self->real_);
      self->real_ = nullptr;
      self->real_users_ = 0;
    }
    self->trampolines_registered_.store(false);
    self->requester_.store(kNobody);
    for (auto& word : self->other_kinds_) word.store(0);
    self->other_context_kinds_.store(0);
    self->other_buffers_out_.store(0);
    self->current_timestamp_.store(nullptr);  // CUPTI forgets the source too
    result = cupti.Finalize();
    passed = true;
  });
  if (!passed && !self->finalize_noted_.exchange(true)) {
    Log(LogLevel::kInfo,
        "cuptiFinalize from %s not passed on: the agent or another client still uses CUPTI (it "
        "can subscribe and trace again as before)",
        caller.c_str());
  }
  return result;
}

// --- Activity tracing ----------------------------------------------------------------------------

bool CuptiBroker::OtherTracingLocked() const {
  for (const auto& word : other_kinds_) {
    if (word.load() != 0) return true;
  }
  return other_context_kinds_.load() > 0;
}

std::string CuptiBroker::OtherTracerLocked() const {
  return DescribeClient(other_activity_client_);
}

bool CuptiBroker::BufferGiven(uint8_t* buffer) {
  for (auto& slot : agent_buffers_) {
    uint8_t* expected = nullptr;
    if (slot.compare_exchange_strong(expected, buffer)) return true;
  }
  return false;
}

bool CuptiBroker::BufferTaken(uint8_t* buffer) {
  for (auto& slot : agent_buffers_) {
    uint8_t* expected = buffer;
    if (slot.compare_exchange_strong(expected, nullptr)) return true;
  }
  return false;
}

// CUPTI asks whoever traces now; each buffer goes back to whoever gave it, so records of a client
// that stopped (its buffers still with CUPTI) never reach the next one.
void CUPTIAPI CuptiBroker::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  CuptiBroker* self = Current();
  switch (self->requester_.load(std::memory_order_acquire)) {
    case kAgent: {
      CUpti_BuffersCallbackRequestFunc requested = self->agent_requested_.load();
      if (requested == nullptr) return;
      requested(buffer, size, max_records);
      if (*buffer != nullptr && !self->BufferGiven(*buffer)) {
        // Cannot keep track of it: give it straight back rather than lose whose it is.
        if (CUpti_BuffersCallbackCompleteFunc completed = self->agent_completed_.load()) {
          completed(nullptr, 0, *buffer, *size, 0);
        }
        *buffer = nullptr;
        *size = 0;
      }
      return;
    }
    case kOther: {
      const BufferFns* fns = self->other_fns_.load(std::memory_order_acquire);
      if (fns == nullptr) return;
      fns->requested(buffer, size, max_records);
      if (*buffer != nullptr) self->other_buffers_out_.fetch_add(1);
      return;
    }
    default:
      return;
  }
}

void CUPTIAPI CuptiBroker::BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                           size_t size, size_t valid_size) {
  CuptiBroker* self = Current();
  if (buffer != nullptr && self->BufferTaken(buffer)) {
    if (CUpti_BuffersCallbackCompleteFunc completed = self->agent_completed_.load()) {
      completed(context, stream_id, buffer, size, valid_size);
    }
    return;
  }
  if (const BufferFns* fns = self->other_fns_.load(std::memory_order_acquire)) {
    if (buffer != nullptr && self->other_buffers_out_.fetch_sub(1) <= 0) {
      self->other_buffers_out_.store(0);
    }
    fns->completed(context, stream_id, buffer, size, valid_size);
  }
}

__attribute__((noinline)) CUptiResult CUPTIAPI CuptiBroker::ActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed) {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(self->activity_mutex_);
  const BufferFns* current = self->other_fns_.load();
  if (current == nullptr || current->requested != requested || current->completed != completed) {
    self->other_fns_.store(new BufferFns{requested, completed}, std::memory_order_release);
  }
  if (!self->trampolines_registered_.load()) {
    CUptiResult r = LoadCupti().ActivityRegisterCallbacks(&CuptiBroker::BufferRequested,
                                                          &CuptiBroker::BufferCompleted);
    if (r != CUPTI_SUCCESS) return r;
    self->trampolines_registered_.store(true);
  }
  if (!self->agent_tracing_ || self->cut_short_) self->requester_.store(kOther);
  if (self->other_activity_client_.empty()) self->other_activity_client_ = caller;
  return CUPTI_SUCCESS;
}

// activity_mutex_ held. Another client starts tracing during a capture: the capture's kinds off,
// its buffers flushed to it, then the other client's call proceeds.
void CuptiBroker::CutShortLocked(const std::string& by) {
  const CuptiLibrary& cupti = LoadCupti();
  requester_.store(kNobody);
  for (CUpti_ActivityKind kind : agent_kinds_) cupti.ActivityDisable(kind);
  if (driver_added_) cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
  QuietFrequentApis(cupti, agent_kinds_, false);
  cut_short_at_ = RealtimeNs();
  // No lock of ours that a buffer callback takes is held: CUPTI calls them under its own lock.
  cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cut_short_ = true;
  cut_short_by_ = by;
  captures_cut_short_.fetch_add(1);
  Log(LogLevel::kWarning,
      "profd capture cut short: %s started tracing CUDA activity in this process and gets CUPTI; "
      "the capture's events until now are kept",
      by.c_str());
  if (cut_short_fn_ != nullptr) cut_short_fn_(cut_short_context_, by);
}

__attribute__((noinline)) CUptiResult CUPTIAPI
CuptiBroker::ActivityEnable(CUpti_ActivityKind kind) {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  self->PauseAgentCallbacks(true);
  std::lock_guard<std::mutex> lock(self->activity_mutex_);
  self->other_activity_client_ = caller;
  if (self->agent_tracing_ && !self->cut_short_) self->CutShortLocked(DescribeClient(caller));
  self->UseOtherTimestampsLocked();
  if (self->other_fns_.load() != nullptr) {
    self->requester_.store(kOther);
  } else if (self->trampolines_registered_.load() && !self->unrouted_noted_.exchange(true)) {
    Log(LogLevel::kWarning,
        "%s enables CUPTI activity without having registered its buffer callbacks through the "
        "agent (before the agent started?): its records may be dropped",
        caller.c_str());
  }
  CUptiResult r = LoadCupti().ActivityEnable(kind);
  int k = static_cast<int>(kind);
  if (r == CUPTI_SUCCESS && k >= 0 && k < kKindWords * 64) {
    self->other_kinds_[k >> 6].fetch_or(1ull << (k & 63));
  }
  return r;
}

CUptiResult CUPTIAPI CuptiBroker::ActivityDisable(CUpti_ActivityKind kind) {
  CuptiBroker* self = Current();
  std::unique_lock<std::mutex> lock(self->activity_mutex_);
  int k = static_cast<int>(kind);
  bool in_range = k >= 0 && k < kKindWords * 64;
  bool theirs = in_range && ((self->other_kinds_[k >> 6].load() >> (k & 63)) & 1);
  if (!theirs && self->agent_tracing_ && !self->cut_short_) {
    for (CUpti_ActivityKind k : self->agent_kinds_) {
      // A kind they never enabled is the capture's: as far as they can tell it is already off.
      if (k == kind) return CUPTI_SUCCESS;
    }
    if (self->driver_added_ && kind == CUPTI_ACTIVITY_KIND_DRIVER) return CUPTI_SUCCESS;
  }
  if (in_range) self->other_kinds_[k >> 6].fetch_and(~(1ull << (k & 63)));
  CUptiResult r = LoadCupti().ActivityDisable(kind);
  if (!self->OtherTracingLocked()) {
    lock.unlock();
    self->PauseAgentCallbacks(false);
  }
  return r;
}

__attribute__((noinline)) CUptiResult CUPTIAPI
CuptiBroker::ActivityEnableContext(CUcontext context, CUpti_ActivityKind kind) {
  CuptiBroker* self = Current();
  std::string caller = self->CallerName(__builtin_return_address(0));
  const CuptiLibrary& cupti = LoadCupti();
  if (cupti.ActivityEnableContext == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  self->PauseAgentCallbacks(true);
  std::lock_guard<std::mutex> lock(self->activity_mutex_);
  self->other_activity_client_ = caller;
  if (self->agent_tracing_ && !self->cut_short_) self->CutShortLocked(DescribeClient(caller));
  self->UseOtherTimestampsLocked();
  if (self->other_fns_.load() != nullptr) self->requester_.store(kOther);
  CUptiResult r = cupti.ActivityEnableContext(context, kind);
  if (r == CUPTI_SUCCESS) {
    bool known = false;
    for (const auto& c : self->other_contexts_) known |= c.first == context && c.second == kind;
    if (!known) {
      self->other_contexts_.push_back({context, kind});
      self->other_context_kinds_.store(static_cast<int>(self->other_contexts_.size()));
    }
  }
  return r;
}

CUptiResult CUPTIAPI CuptiBroker::ActivityDisableContext(CUcontext context,
                                                         CUpti_ActivityKind kind) {
  CuptiBroker* self = Current();
  const CuptiLibrary& cupti = LoadCupti();
  if (cupti.ActivityDisableContext == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  std::unique_lock<std::mutex> lock(self->activity_mutex_);
  for (size_t i = 0; i < self->other_contexts_.size(); ++i) {
    if (self->other_contexts_[i].first == context && self->other_contexts_[i].second == kind) {
      self->other_contexts_.erase(self->other_contexts_.begin() + static_cast<long>(i));
      break;
    }
  }
  self->other_context_kinds_.store(static_cast<int>(self->other_contexts_.size()));
  CUptiResult r = cupti.ActivityDisableContext(context, kind);
  if (!self->OtherTracingLocked()) {
    lock.unlock();
    self->PauseAgentCallbacks(false);
  }
  return r;
}

uint64_t CUPTIAPI CuptiBroker::RealtimeTimestamp() { return RealtimeNs(); }

// activity_mutex_ held, nothing of the agent's in flight: the other client's timestamps from now.
void CuptiBroker::UseOtherTimestampsLocked() {
  const CuptiLibrary& cupti = LoadCupti();
  if (other_timestamp_ == nullptr || current_timestamp_.load() == other_timestamp_ ||
      cupti.ActivityRegisterTimestampCallback == nullptr) {
    return;
  }
  if (cupti.ActivityRegisterTimestampCallback(other_timestamp_) == CUPTI_SUCCESS) {
    current_timestamp_.store(other_timestamp_);
  }
}

CUptiResult CUPTIAPI
CuptiBroker::ActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  CuptiBroker* self = Current();
  const CuptiLibrary& cupti = LoadCupti();
  if (cupti.ActivityRegisterTimestampCallback == nullptr) return CUPTI_ERROR_NOT_SUPPORTED;
  if (fn == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(self->activity_mutex_);
  self->other_timestamp_ = fn;
  // A capture traces: its buffers still wait for conversion with CLOCK_REALTIME. Kineto registers
  // its source just before enabling its kinds; the switch happens then, after the capture is cut
  // short and flushed (ActivityEnable).
  if (self->agent_tracing_ && !self->cut_short_) return CUPTI_SUCCESS;
  CUptiResult r = cupti.ActivityRegisterTimestampCallback(fn);
  if (r == CUPTI_SUCCESS) self->current_timestamp_.store(fn);
  return r;
}

// --- The agent's captures ------------------------------------------------------------------------

void CuptiBroker::SetCutShortListener(CutShortFn fn, void* context) {
  std::lock_guard<std::mutex> lock(activity_mutex_);
  cut_short_fn_ = fn;
  cut_short_context_ = context;
}

std::string CuptiBroker::OtherTracer() {
  std::lock_guard<std::mutex> lock(activity_mutex_);
  return OtherTracingLocked() ? OtherTracerLocked() : "";
}

bool CuptiBroker::ClaimForCapture(wire::CaptureError* error, std::string* message) {
  Interpose();  // a library loaded since the last heartbeat
  std::string holder;
  CUptiResult r = CUPTI_SUCCESS;
  WithSubscriberLock([&] {
    r = AcquireRealLocked(&holder);
    if (r == CUPTI_SUCCESS) ++capture_claims_;
  });
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    *error = wire::CaptureError::kCuptiInUse;
    *message = "CUPTI is held by another profiler in this process (CUPTI says: " + holder +
               "), which took it before the profd agent could share it — Nsight Systems, "
               "compute-sanitizer, or a library loaded after CUDA started: stop it, then capture "
               "again";
    return false;
  }
  if (r != CUPTI_SUCCESS) {
    *error = wire::CaptureError::kCuptiFailed;
    *message = "cuptiSubscribe: " + LoadCupti().Describe(r);
    return false;
  }
  std::string tracer;
  {
    std::lock_guard<std::mutex> lock(activity_mutex_);
    if (OtherTracingLocked()) tracer = OtherTracerLocked();
  }
  if (tracer.empty()) return true;
  ReleaseCapture();
  *error = wire::CaptureError::kCuptiInUse;
  *message = tracer +
             " is tracing CUDA activity in this process right now, and profd does not take "
             "another profiler's records: capture again when its session ends";
  return false;
}

bool CuptiBroker::StartAgentTracing(const std::vector<CUpti_ActivityKind>& kinds,
                                    CUpti_BuffersCallbackRequestFunc requested,
                                    CUpti_BuffersCallbackCompleteFunc completed,
                                    std::vector<CUpti_ActivityKind>* enabled, std::string* warnings,
                                    wire::CaptureError* error, std::string* message) {
  const CuptiLibrary& cupti = LoadCupti();
  std::lock_guard<std::mutex> lock(activity_mutex_);
  if (OtherTracingLocked()) {
    *error = wire::CaptureError::kCuptiInUse;
    *message = OtherTracerLocked() +
               " started tracing CUDA activity in this process before the capture began, and "
               "profd does not take another profiler's records: capture again when its session "
               "ends";
    return false;
  }
  // Buffers the other client still has with CUPTI would receive our records: send them home
  // (converted with its timestamp source, still registered).
  if (other_buffers_out_.load() > 0) cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  // Another client's timestamp source (Kineto's TSC ticks) would give the capture timestamps
  // that are not CLOCK_REALTIME ns: CUPTI's default source back for the capture.
  CUpti_TimestampCallbackFunc source = current_timestamp_.load();
  if (source != nullptr && source != &CuptiBroker::RealtimeTimestamp &&
      cupti.ActivityRegisterTimestampCallback != nullptr) {
    CUptiResult r = cupti.ActivityRegisterTimestampCallback(&CuptiBroker::RealtimeTimestamp);
    if (r != CUPTI_SUCCESS) {
      *error = wire::CaptureError::kCuptiFailed;
      *message = OtherTracerLocked() +
                 " set CUPTI's timestamp source and it cannot be set back to CLOCK_REALTIME (" +
                 cupti.Describe(r) + ")";
      return false;
    }
    current_timestamp_.store(&CuptiBroker::RealtimeTimestamp);
  }
  agent_requested_.store(requested);
  agent_completed_.store(completed);
  for (auto& slot : agent_buffers_) slot.store(nullptr);
  if (!trampolines_registered_.load()) {
    CUptiResult r = cupti.ActivityRegisterCallbacks(&CuptiBroker::BufferRequested,
                                                    &CuptiBroker::BufferCompleted);
    if (r != CUPTI_SUCCESS) {
      *error = wire::CaptureError::kCuptiFailed;
      *message = "cuptiActivityRegisterCallbacks: " + cupti.Describe(r);
      return false;
    }
    trampolines_registered_.store(true);
  }
  // Host threads by their OS thread ids (gettid), as Kineto asks for too: what top -H, py-spy
  // and torch.profiler's traces show, not CUPTI's default pthread handles.
  if (cupti.SetThreadIdType != nullptr) {
    CUptiResult r = cupti.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (r != CUPTI_SUCCESS) {
      *warnings += (warnings->empty() ? "" : "; ") +
                   std::string("thread ids stay CUPTI's default: ") + cupti.Describe(r);
    }
  }
  requester_.store(kAgent);
  cut_short_ = false;
  cut_short_by_.clear();
  enabled->clear();
  for (CUpti_ActivityKind kind : kinds) {
    CUptiResult r = cupti.ActivityEnable(kind);
    if (r == CUPTI_SUCCESS) {
      enabled->push_back(kind);
    } else {
      *warnings += (warnings->empty() ? "" : "; ") + std::string("activity kind ") +
                   std::to_string(static_cast<int>(kind)) + ": " + cupti.Describe(r);
    }
  }
  agent_kinds_ = *enabled;
  driver_added_ = false;
  QuietFrequentApis(cupti, agent_kinds_, true);
  if (WantsDriverLaunchesOnly(agent_kinds_) && cupti.ActivityEnableDriverApi != nullptr &&
      cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_SUCCESS) {
    DriverLaunchesOnly(cupti);
    driver_added_ = true;
  }
  agent_tracing_ = !enabled->empty();
  if (!agent_tracing_) requester_.store(other_fns_.load() != nullptr ? kOther : kNobody);
  return true;
}

CuptiBroker::StopResult CuptiBroker::StopAgentTracing() {
  const CuptiLibrary& cupti = LoadCupti();
  std::lock_guard<std::mutex> lock(activity_mutex_);
  StopResult result;
  if (!agent_tracing_) return result;
  agent_tracing_ = false;
  if (cut_short_) {
    result.cut_short = true;
    result.by = cut_short_by_;
    result.disabled_realtime_ns = cut_short_at_;
    agent_kinds_.clear();
    return result;
  }
  for (CUpti_ActivityKind kind : agent_kinds_) cupti.ActivityDisable(kind);
  if (driver_added_) cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
  QuietFrequentApis(cupti, agent_kinds_, false);
  result.disabled_realtime_ns = RealtimeNs();
  cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  requester_.store(other_fns_.load() != nullptr ? kOther : kNobody);
  agent_kinds_.clear();
  return result;
}

void CuptiBroker::ReleaseCapture() {
  WithSubscriberLock([&] {
    if (capture_claims_ <= 0) return;
    --capture_claims_;
    ReleaseRealLocked();
  });
}

// --- Report --------------------------------------------------------------------------------------

wire::CuptiSharing CuptiBroker::Report() {
  wire::CuptiSharing s;
  bool interposing = false;
  {
    std::lock_guard<std::mutex> lock(interpose_mutex_);
    if (patcher_ != nullptr) {
      interposing = true;
      for (const GotPatcher::ObjectReport& o : patcher_->Report()) {
        if (o.slots > 0) s.interposed.push_back(Basename(o.path));
        if (!o.problem.empty()) s.not_interposed.push_back(Basename(o.path) + ": " + o.problem);
      }
    }
  }
  std::string holder;
  {
    std::lock_guard<std::mutex> lock(subscriber_mutex_);
    holder = holder_;
    for (int i = 1; i < kParticipants; ++i) {
      if (participants_[i].state.load() == kLive) {
        s.clients.push_back(std::string(participants_[i].name) +
                            ": CUPTI subscriber, shared through the agent");
      }
    }
    for (const NativeClient& c : native_clients_) {
      s.clients.push_back(c.name + ": CUPTI subscriber of its own (CUPTI multiple subscribers)");
    }
  }
  s.native_multiple_subscribers = native_multi_.load();
  {
    std::lock_guard<std::mutex> lock(activity_mutex_);
    s.other_tracing = OtherTracingLocked();
    if (s.other_tracing) s.other_tracer = OtherTracerLocked();
    if (!other_activity_client_.empty()) {
      s.clients.push_back(other_activity_client_ + ": CUPTI activity tracing, " +
                          (s.other_tracing ? "on now" : "off now"));
    }
  }
  s.captures_cut_short = captures_cut_short_.load();

  if (sharing_off_) {
    s.mode = wire::CuptiSharingMode::kOff;
    s.detail =
        "PROFD_AGENT_SHARE_CUPTI=off: the agent does not share CUPTI; with its counters on, "
        "torch.profiler in this process records no GPU activity";
  } else if (!holder.empty()) {
    s.mode = wire::CuptiSharingMode::kNotShared;
    s.detail = "CUPTI NOT SHARED: " + holder +
               " took CUPTI before the agent could share it; counters off, captures refused "
               "while it holds CUPTI";
  } else if (!interposing) {
    s.mode = wire::CuptiSharingMode::kWaiting;
    s.detail = "no CUPTI in this process yet: it is shared once loaded";
  } else if (!s.not_interposed.empty()) {
    s.mode = wire::CuptiSharingMode::kPartial;
    s.detail =
        "some libraries call CUPTI directly (not_interposed): a profiler among them cannot "
        "share CUPTI with the agent";
  } else {
    s.mode = wire::CuptiSharingMode::kShared;
    s.detail =
        "torch.profiler and other CUPTI clients work beside profd; captures wait for their "
        "sessions, and a session started during a capture cuts it short";
  }
  if (s.other_tracing) s.detail += "; now: " + s.other_tracer + " is tracing";
  return s;
}

}  // namespace profagent

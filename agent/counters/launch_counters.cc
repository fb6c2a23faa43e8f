#include "agent/counters/launch_counters.h"

#include <cuda.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>

#include "agent/cuda_devices.h"
#include "agent/cupti/cupti_broker.h"
#include "agent/cupti/cupti_library.h"
#include "agent/log.h"

namespace profagent {
namespace {

constexpr CUpti_CallbackId kLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};
constexpr CUpti_CallbackId kGraphLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
constexpr CUpti_CallbackId kMemory[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
};

// Most threads use one context: remember the last one's device without asking CUPTI again.
thread_local CUcontext t_context = nullptr;
thread_local uint32_t t_device = 0;

uint32_t DeviceOf(CUcontext context) {
  if (context == t_context) return t_device;
  uint32_t device = 0;
  const CuptiLibrary& cupti = LoadCupti();
  if (context != nullptr && cupti.GetDeviceId(context, &device) == CUPTI_SUCCESS) {
    t_context = context;
    t_device = device;
  }
  return device;
}

// Sampled mode: one window per 10 ms period (launch_sampler.h).
constexpr uint64_t kSamplePeriodNs = 10'000'000;

std::mutex g_toggle_mutex;  // EnableLaunchCallbacks: the sampler thread and SetActive

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntil(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// A forked child has only the forking thread: a mutex the sampler held stays locked for good.
void ResetToggleMutexInChild() { new (&g_toggle_mutex) std::mutex; }

}  // namespace

LaunchCounters& LaunchCounters::Get() {
  static LaunchCounters* counters = new LaunchCounters;  // leaked: callbacks outlive statics
  return *counters;
}

void LaunchCounters::OnLaunch(uint32_t device, bool graph) {
  if (device >= kMaxDevices) return;
  Device& d = devices_[device];
  (graph ? d.graph_launches : d.launches).fetch_add(1, std::memory_order_relaxed);
  if (!d.seen.load(std::memory_order_relaxed)) d.seen.store(true, std::memory_order_relaxed);
}

void LaunchCounters::OnAlloc(uint32_t device, uint64_t key, uint64_t bytes) {
  if (device >= kMaxDevices || bytes == 0) return;
  if (!pointers_.Insert(key, bytes)) return;  // table full: leave this one out entirely
  Device& d = devices_[device];
  d.seen.store(true, std::memory_order_relaxed);
  uint64_t now = d.allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = d.peak.load(std::memory_order_relaxed);
  while (now > peak && !d.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void LaunchCounters::OnFree(uint32_t device, uint64_t key) {
  uint64_t bytes = pointers_.Remove(key);
  if (bytes == 0 || device >= kMaxDevices) return;
  devices_[device].allocated.fetch_sub(bytes, std::memory_order_relaxed);
}

void CUPTIAPI LaunchCounters::Callback(void* userdata, CUpti_CallbackDomain domain,
                                       CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_EXIT) return;
  if (cb->functionReturnValue == nullptr ||
      *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS) {
    return;
  }
  auto* self = static_cast<LaunchCounters*>(userdata);
  const void* p = cb->functionParams;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      self->OnLaunch(DeviceOf(cb->context), /*graph=*/true);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      auto* a = static_cast<const cuMemAlloc_v2_params*>(p);
      self->OnAlloc(DeviceOf(cb->context), *a->dptr, a->bytesize);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto* a = static_cast<const cuMemAllocPitch_v2_params*>(p);
      self->OnAlloc(DeviceOf(cb->context), *a->dptr, *a->pPitch * a->Height);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      auto* a = static_cast<const cuMemAllocManaged_params*>(p);
      self->OnAlloc(DeviceOf(cb->context), *a->dptr, a->bytesize);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocAsync_params*>(p);
      self->OnAlloc(DeviceOf(cb->context), *a->dptr, a->bytesize);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(p);
      self->OnAlloc(DeviceOf(cb->context), *a->dptr, a->bytesize);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      self->OnFree(DeviceOf(cb->context), static_cast<const cuMemFree_v2_params*>(p)->dptr);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      self->OnFree(DeviceOf(cb->context), static_cast<const cuMemFreeAsync_params*>(p)->dptr);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      // Physical memory of the VMM API; a handle, not an address. The top bit keeps handles and
      // addresses apart in one table.
      auto* a = static_cast<const cuMemCreate_params*>(p);
      uint32_t device =
          a->prop ? static_cast<uint32_t>(a->prop->location.id) : DeviceOf(cb->context);
      self->OnAlloc(device, *a->handle | (1ull << 63), a->size);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
      self->OnFree(DeviceOf(cb->context),
                   static_cast<const cuMemRelease_params*>(p)->handle | (1ull << 63));
      return;
    default:
      self->OnLaunch(DeviceOf(cb->context), /*graph=*/false);
      return;
  }
}

std::string LaunchCounters::Enable() {
  const char* mode = std::getenv("PROFD_AGENT_COUNTERS");
  if (mode && (std::strcmp(mode, "off") == 0 || std::strcmp(mode, "0") == 0)) {
    return "turned off by PROFD_AGENT_COUNTERS=off";
  }
  if (mode && std::strcmp(mode, "exact") == 0) {
    sample_every_ = 1;
  } else if (mode && std::strcmp(mode, "memory") == 0) {
    sample_every_ = 0;  // memory only: no launch callbacks at all
  } else {
    const char* every = std::getenv("PROFD_AGENT_LAUNCH_SAMPLE_EVERY");
    sample_every_ = every && std::atoi(every) > 0 ? static_cast<uint32_t>(std::atoi(every)) : 10;
  }
  if (!QueryCudaDevices().driver_loaded) return "the process has no CUDA driver loaded";
  const CuptiLibrary& cupti = LoadCupti();
  if (!cupti.loaded) return "cannot load CUPTI: " + cupti.error;
  // Through the broker: it holds CUPTI's one subscriber and shares it with the other CUPTI
  // clients of the process (torch.profiler), so counting never locks them out.
  std::string holder;
  CUptiResult r = CuptiBroker::Get().SubscribeAgent(&LaunchCounters::Callback, this, &holder);
  if (r != CUPTI_SUCCESS) {
    return "cannot subscribe to CUPTI: " + cupti.Describe(r) +
           (holder.empty() ? std::string() : " (held by " + holder + ")");
  }
  subscribed_.store(true);
  if (!SetActive(true)) return "cannot enable CUPTI callbacks";
  if (sample_every_ > 1) {
    pthread_atfork(nullptr, nullptr, &ResetToggleMutexInChild);
    std::thread([this] { SampleLoop(); }).detach();  // sleeps; never holds up the exit
  }
  return "";
}

bool LaunchCounters::SetActive(bool active) {
  if (!subscribed_.load()) return false;
  CuptiBroker::Get().EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kMemory,
                                          sizeof(kMemory) / sizeof(kMemory[0]), active);
  active_.store(active);
  // Exact counting; sampled windows are the sampler thread's.
  EnableLaunchCallbacks(active && sample_every_ == 1);
  return true;
}

void LaunchCounters::EnableLaunchCallbacks(bool on) {
  std::lock_guard<std::mutex> lock(g_toggle_mutex);
  if (!subscribed_.load() || launches_on_.load() == on) return;
  CuptiBroker& broker = CuptiBroker::Get();
  broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kLaunches,
                              sizeof(kLaunches) / sizeof(kLaunches[0]), on);
  broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kGraphLaunches,
                              sizeof(kGraphLaunches) / sizeof(kGraphLaunches[0]), on);
  launches_on_.store(on);
}

void LaunchCounters::SampleLoop() {
  pthread_setname_np(pthread_self(), "profagent-smpl");
  WindowSchedule schedule(kSamplePeriodNs, kSamplePeriodNs / sample_every_,
                          MonotonicNs() ^ (static_cast<uint64_t>(getpid()) << 32));
  const uint64_t period = schedule.period_ns();
  uint64_t period_start = MonotonicNs();
  for (;;) {
    SleepUntil(period_start + schedule.NextOffset());
    if (active_.load()) {
      // The callbacks start and stop somewhere inside each toggle: count from the middles.
      uint64_t before = MonotonicNs();
      EnableLaunchCallbacks(true);
      uint64_t on = before + (MonotonicNs() - before) / 2;
      SleepUntil(on + schedule.window_ns());
      before = MonotonicNs();
      EnableLaunchCallbacks(false);
      uint64_t off = before + (MonotonicNs() - before) / 2;
      FoldWindow(period, off - on);
    }
    period_start += period;
    uint64_t now = MonotonicNs();
    if (now >= period_start + period) period_start = now - (now - period_start) % period;
    SleepUntil(period_start);
  }
}

void LaunchCounters::FoldWindow(uint64_t period_ns, uint64_t watched_ns) {
  for (Device& d : devices_) {
    if (!d.seen.load(std::memory_order_relaxed)) continue;
    d.launches_estimate.Fold(d.launches.load(std::memory_order_relaxed), period_ns, watched_ns);
    d.graph_launches_estimate.Fold(d.graph_launches.load(std::memory_order_relaxed), period_ns,
                                   watched_ns);
    d.launches_reported.store(d.launches_estimate.estimate(), std::memory_order_relaxed);
    d.graph_launches_reported.store(d.graph_launches_estimate.estimate(),
                                    std::memory_order_relaxed);
  }
}

void LaunchCounters::FillHeartbeat(wire::Heartbeat* heartbeat) const {
  heartbeat->launch_sample_every = sample_every_;
  const bool sampled = sample_every_ > 1;
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    const Device& d = devices_[i];
    if (!d.seen.load(std::memory_order_relaxed)) continue;
    wire::DeviceCounters c;
    c.device = i;
    c.kernel_launches =
        (sampled ? d.launches_reported : d.launches).load(std::memory_order_relaxed);
    c.graph_launches =
        (sampled ? d.graph_launches_reported : d.graph_launches).load(std::memory_order_relaxed);
    c.memory_allocated_bytes = d.allocated.load(std::memory_order_relaxed);
    c.memory_peak_bytes = d.peak.load(std::memory_order_relaxed);
    heartbeat->devices.push_back(c);
  }
}

}  // namespace profagent

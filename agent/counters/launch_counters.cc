#include "agent/counters/launch_counters.h"

#include <cuda.h>

#include <cstdlib>
#include <cstring>

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

}  // namespace

LaunchCounters& LaunchCounters::Get() {
  static LaunchCounters* counters = new LaunchCounters;  // leaked: callbacks outlive statics
  return *counters;
}

void LaunchCounters::OnLaunch(uint32_t device, bool graph) {
  if (device >= kMaxDevices) return;
  Device& d = devices_[device];
  (graph ? d.graph_launches : d.launches)
      .fetch_add(weight_.load(std::memory_order_relaxed), std::memory_order_relaxed);
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
  weight_.store(sample_every_ == 0 ? 1 : sample_every_);
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
  return "";
}

bool LaunchCounters::SetActive(bool active) {
  if (!subscribed_.load()) return false;
  CuptiBroker::Get().EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kMemory,
                                          sizeof(kMemory) / sizeof(kMemory[0]), active);
  active_.store(active);
  // Exact counting, or the start of a sampling interval.
  EnableLaunchCallbacks(active && sample_every_ != 0 &&
                        (sample_every_ == 1 || ticks_ % sample_every_ == 0));
  return true;
}

void LaunchCounters::EnableLaunchCallbacks(bool on) {
  if (!subscribed_.load() || launches_on_.load() == on) return;
  CuptiBroker& broker = CuptiBroker::Get();
  broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kLaunches,
                              sizeof(kLaunches) / sizeof(kLaunches[0]), on);
  broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kGraphLaunches,
                              sizeof(kGraphLaunches) / sizeof(kGraphLaunches[0]), on);
  launches_on_.store(on);
}

void LaunchCounters::Tick() {
  if (sample_every_ <= 1 || !active_.load()) return;
  ++ticks_;
  EnableLaunchCallbacks(ticks_ % sample_every_ == 0);
}

void LaunchCounters::FillHeartbeat(wire::Heartbeat* heartbeat) const {
  heartbeat->launch_sample_every = sample_every_;
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    const Device& d = devices_[i];
    if (!d.seen.load(std::memory_order_relaxed)) continue;
    wire::DeviceCounters c;
    c.device = i;
    c.kernel_launches = d.launches.load(std::memory_order_relaxed);
    c.graph_launches = d.graph_launches.load(std::memory_order_relaxed);
    c.memory_allocated_bytes = d.allocated.load(std::memory_order_relaxed);
    c.memory_peak_bytes = d.peak.load(std::memory_order_relaxed);
    heartbeat->devices.push_back(c);
  }
}

}  // namespace profagent

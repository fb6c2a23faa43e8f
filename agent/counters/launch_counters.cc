#include "agent/counters/launch_counters.h"

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

#include "agent/cuda_devices.h"
#include "agent/cupti/cupti_broker.h"
#include "agent/cupti/cupti_library.h"
#include "agent/interpose/cuda_entry_points.h"
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

LaunchCounters::Mode ModeFromEnvironment() {
  const char* mode = std::getenv("PROFD_AGENT_COUNTERS");
  if (mode == nullptr || mode[0] == '\0' || std::strcmp(mode, "auto") == 0 ||
      std::strcmp(mode, "on") == 0) {
    return LaunchCounters::Mode::kAuto;
  }
  if (std::strcmp(mode, "off") == 0 || std::strcmp(mode, "0") == 0) {
    return LaunchCounters::Mode::kOff;
  }
  if (std::strcmp(mode, "entry-points") == 0) return LaunchCounters::Mode::kEntryPoints;
  if (std::strcmp(mode, "cupti") == 0 || std::strcmp(mode, "exact") == 0) {
    return LaunchCounters::Mode::kCupti;
  }
  // "sampled" and "memory" were modes of older agents: every launch is counted now.
  Log(LogLevel::kWarning,
      "PROFD_AGENT_COUNTERS=%s is not a mode (auto, entry-points, cupti, off): counting as auto",
      mode);
  return LaunchCounters::Mode::kAuto;
}

}  // namespace

LaunchCounters& LaunchCounters::Get() {
  static LaunchCounters* counters = new LaunchCounters;  // leaked: callbacks outlive statics
  return *counters;
}

LaunchCounters::LaunchCounters() : mode_(ModeFromEnvironment()) {}

void LaunchCounters::OnLaunch(uint32_t device, bool graph) {
  if (device >= kMaxDevices) return;
  Device& d = devices_[device];
  (graph ? d.graph_launches : d.launches).fetch_add(1, std::memory_order_relaxed);
  if (!d.seen.load(std::memory_order_relaxed)) d.seen.store(true, std::memory_order_relaxed);
}

// The table keeps the device with the size (top byte): a free is often made with another device
// current than the allocation's (cuMemRelease of memory created for any device, a cudaFree on a
// thread that switched devices), and must come off the device that got it.
constexpr int kDeviceShift = 56;

void LaunchCounters::OnAlloc(uint32_t device, uint64_t key, uint64_t bytes) {
  if (device >= kMaxDevices || bytes == 0 || bytes >> kDeviceShift != 0) return;
  // Table full: leave this one out entirely.
  if (!pointers_.Insert(key, bytes | static_cast<uint64_t>(device) << kDeviceShift)) return;
  Device& d = devices_[device];
  d.seen.store(true, std::memory_order_relaxed);
  uint64_t now = d.allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = d.peak.load(std::memory_order_relaxed);
  while (now > peak && !d.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void LaunchCounters::OnFree(uint64_t key) {
  const uint64_t entry = pointers_.Remove(key);
  if (entry == 0) return;
  devices_[entry >> kDeviceShift].allocated.fetch_sub(entry & ((1ull << kDeviceShift) - 1),
                                                      std::memory_order_relaxed);
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
      self->OnFree(static_cast<const cuMemFree_v2_params*>(p)->dptr);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      self->OnFree(static_cast<const cuMemFreeAsync_params*>(p)->dptr);
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
      self->OnFree(static_cast<const cuMemRelease_params*>(p)->handle | (1ull << 63));
      return;
    default:
      self->OnLaunch(DeviceOf(cb->context), /*graph=*/false);
      return;
  }
}

std::string LaunchCounters::Enable() {
  if (mode_ == Mode::kOff) return "turned off by PROFD_AGENT_COUNTERS=off";
  if (!QueryCudaDevices().driver_loaded) return "the process has no CUDA driver loaded";
  if (mode_ != Mode::kCupti) {
    CudaEntryPoints& entry_points = CudaEntryPoints::Get();
    entry_points.Interpose();  // libraries loaded since InitializeInjection
    CudaEntryPoints::Coverage coverage = entry_points.Report();
    if (coverage.launch_routes > 0 || mode_ == Mode::kEntryPoints) {
      route_.store(wire::LaunchCounting::kEntryPoints);
      entry_points_on_.store(true);
      return "";
    }
    Log(LogLevel::kInfo,
        "no library of this process launches kernels through a CUDA entry point the agent can "
        "interpose (a static CUDA runtime?): counting through CUPTI callbacks instead");
  }
  return EnableCupti();
}

std::string LaunchCounters::EnableCupti() {
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
  route_.store(wire::LaunchCounting::kCupti);
  if (!SetActive(true)) return "cannot enable CUPTI callbacks";
  return "";
}

bool LaunchCounters::SetActive(bool active) {
  switch (route_.load()) {
    case wire::LaunchCounting::kEntryPoints:
      entry_points_on_.store(active);
      CudaEntryPoints::Get().SetWithdrawn(!active);
      return true;
    case wire::LaunchCounting::kCupti: {
      if (!subscribed_.load()) return false;
      CuptiBroker& broker = CuptiBroker::Get();
      broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kMemory, std::size(kMemory), active);
      broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kLaunches, std::size(kLaunches),
                                  active);
      broker.EnableAgentCallbacks(CUPTI_CB_DOMAIN_DRIVER_API, kGraphLaunches,
                                  std::size(kGraphLaunches), active);
      return true;
    }
    default:
      return false;
  }
}

void LaunchCounters::FillHeartbeat(wire::Heartbeat* heartbeat) const {
  const wire::LaunchCounting route = route_.load();
  heartbeat->launch_counting = route;
  heartbeat->launch_sample_every = route == wire::LaunchCounting::kOff ? 0 : 1;
  heartbeat->counters_paused =
      route == wire::LaunchCounting::kCupti && CuptiBroker::Get().AgentCallbacksPaused();
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

#include "daemon/metrics/gpu_sampler.h"

#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/log.h"
#include "daemon/metrics/nvml.h"

namespace profd {
namespace {

constexpr char kComponent[] = "nvml";

std::string ReadComm(uint32_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string comm;
  std::getline(in, comm);
  return std::string(absl::StripAsciiWhitespace(comm));
}

// What the sampler thread keeps about one GPU between ticks.
struct DeviceState {
  NvmlDevice handle = nullptr;
  GpuSample identity;                 // index, uuid, model
  uint64_t last_seen_us = 0;          // newest process-utilization sample already used
  std::set<std::string> unsupported;  // calls this GPU answered NOT_SUPPORTED: not asked again
  std::set<std::string> warned;       // calls whose failure has been logged once
};

// Counts and logs (once per GPU and call) a failed NVML call. NOT_SUPPORTED disables the call on
// that GPU: asking every second would only fill the log and the error counter.
void NoteFailure(const absl::Status& status, const std::string& call, DeviceState& device,
                 GpuSnapshot& snapshot) {
  ++snapshot.errors_by_call[call];
  if (absl::IsUnimplemented(status)) {
    device.unsupported.insert(call);
    LogInfo(kComponent, "GPU %d does not support %s (%s); that metric is left out for it",
            device.identity.index, call, status.message());
    return;
  }
  if (device.warned.insert(call).second) {
    LogWarning(kComponent, "GPU %d: %s; counted in profd_nvml_errors_total, logged once",
               device.identity.index, status.message());
  }
}

}  // namespace

GpuSampler::GpuSampler(Options options) : options_(std::move(options)) {
  auto initial = std::make_shared<GpuSnapshot>();
  initial->nvml_error = "NVML not loaded yet";
  snapshot_ = std::move(initial);
}

GpuSampler::~GpuSampler() { Stop(); }

void GpuSampler::Start() {
  thread_ = std::thread([this] { Run(); });
}

void GpuSampler::Stop() {
  {
    MutexLock lock(&mutex_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const GpuSnapshot> GpuSampler::snapshot() const {
  MutexLock lock(&mutex_);
  return snapshot_;
}

bool GpuSampler::WaitUntilSettled(absl::Duration timeout) const {
  MutexLock lock(&mutex_);
  return WaitUntil(&changed_, &mutex_, absl::Now() + timeout,
                   [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return settled_; });
}

void GpuSampler::PublishForTesting(GpuSnapshot snapshot) {
  Publish(std::make_shared<const GpuSnapshot>(std::move(snapshot)), true);
}

void GpuSampler::Publish(std::shared_ptr<const GpuSnapshot> snapshot, bool settled) {
  MutexLock lock(&mutex_);
  snapshot_ = std::move(snapshot);
  settled_ = settled_ || settled;
  if (settled_) changed_.SignalAll();
}

void GpuSampler::Run() {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> loaded = NvmlLibrary::Load(options_.library_path);
  std::vector<DeviceState> devices;
  std::map<std::string, uint64_t> errors;
  if (loaded.ok()) {
    NvmlLibrary& nvml = **loaded;
    absl::StatusOr<uint32_t> count = nvml.DeviceCount();
    if (!count.ok()) {
      loaded = count.status();
    } else {
      for (uint32_t i = 0; i < *count; ++i) {
        DeviceState d;
        d.identity.index = i;
        absl::StatusOr<NvmlDevice> handle = nvml.DeviceByIndex(i);
        if (!handle.ok()) {
          // A GPU NVML cannot open (lost, or not ours in a container) is left out, not fatal.
          ++errors["nvmlDeviceGetHandleByIndex"];
          LogWarning(kComponent, "GPU %d left out: %s", i, handle.status().message());
          continue;
        }
        d.handle = *handle;
        if (auto uuid = nvml.Uuid(d.handle); uuid.ok())
          d.identity.uuid = *uuid;
        else
          ++errors["nvmlDeviceGetUUID"];
        if (auto name = nvml.Name(d.handle); name.ok())
          d.identity.model = *name;
        else
          ++errors["nvmlDeviceGetName"];
        devices.push_back(std::move(d));
      }
    }
  }
  if (!loaded.ok()) {
    LogWarning(kComponent,
               "GPU metrics are off: %s. profd runs on; agent counters are still exported, and "
               "profd_nvml_available is 0.",
               loaded.status().message());
    auto snapshot = std::make_shared<GpuSnapshot>();
    snapshot->nvml_error = std::string(loaded.status().message());
    snapshot->errors_by_call = std::move(errors);
    snapshot->taken = absl::Now();
    Publish(std::move(snapshot), true);
    return;  // nothing to sample; the thread ends and Stop() joins it
  }
  NvmlLibrary& nvml = **loaded;
  // Every call sampled is counted from 0, so a rate() over the error counter exists before the
  // first error.
  for (const char* call :
       {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization"}) {
    errors.try_emplace(call, 0);
  }
  LogInfo(kComponent, "NVML loaded from %s: %d GPU(s), sampled every %s", options_.library_path,
          devices.size(), absl::FormatDuration(options_.interval));

  std::map<uint32_t, std::string> comms;  // pid -> comm, for pids seen on the last tick
  absl::Time next = absl::Now();
  while (true) {
    auto snapshot = std::make_shared<GpuSnapshot>();
    snapshot->nvml_available = true;
    snapshot->errors_by_call = errors;
    std::map<uint32_t, std::string> seen_comms;
    for (DeviceState& d : devices) {
      GpuSample gpu = d.identity;
      auto allowed = [&](const std::string& call) { return !d.unsupported.count(call); };
      if (allowed("nvmlDeviceGetUtilizationRates")) {
        if (auto u = nvml.Utilization(d.handle); u.ok()) {
          gpu.utilization = u->gpu_percent / 100.0;
          gpu.memory_bandwidth_utilization = u->memory_percent / 100.0;
        } else {
          NoteFailure(u.status(), "nvmlDeviceGetUtilizationRates", d, *snapshot);
        }
      }
      if (allowed("nvmlDeviceGetMemoryInfo")) {
        if (auto m = nvml.Memory(d.handle); m.ok()) {
          gpu.memory_used_bytes = m->used_bytes;
          gpu.memory_total_bytes = m->total_bytes;
        } else {
          NoteFailure(m.status(), "nvmlDeviceGetMemoryInfo", d, *snapshot);
        }
      }
      std::map<uint32_t, GpuProcessSample> processes;
      if (allowed("nvmlDeviceGetComputeRunningProcesses")) {
        if (auto ps = nvml.ComputeProcesses(d.handle); ps.ok()) {
          for (const NvmlProcessMemory& p : *ps) {
            GpuProcessSample& s = processes[p.pid];
            s.pid = p.pid;
            // MIG lists a process once per instance: add its parts up.
            if (p.used_bytes) s.memory_used_bytes = s.memory_used_bytes.value_or(0) + *p.used_bytes;
          }
        } else {
          NoteFailure(ps.status(), "nvmlDeviceGetComputeRunningProcesses", d, *snapshot);
        }
      }
      if (allowed("nvmlDeviceGetProcessUtilization")) {
        if (auto us = nvml.ProcessUtilization(d.handle, d.last_seen_us); us.ok()) {
          // Processes with a context and no sample were idle over the interval: 0, not absent.
          for (auto& [pid, s] : processes) s.sm_utilization = 0.0;
          std::map<uint32_t, std::pair<double, int>> sums;
          for (const NvmlProcessUtilization& u : *us) {
            d.last_seen_us = std::max(d.last_seen_us, u.timestamp_us);
            sums[u.pid].first += u.sm_percent;
            sums[u.pid].second += 1;
          }
          for (const auto& [pid, sum] : sums) {
            GpuProcessSample& s = processes[pid];
            s.pid = pid;
            s.sm_utilization = std::min(1.0, sum.first / sum.second / 100.0);
          }
        } else {
          NoteFailure(us.status(), "nvmlDeviceGetProcessUtilization", d, *snapshot);
        }
      }
      for (auto& [pid, s] : processes) {
        auto known = comms.find(pid);
        s.comm = known != comms.end() ? known->second : ReadComm(pid);
        seen_comms[pid] = s.comm;
        gpu.processes.push_back(std::move(s));
      }
      snapshot->gpus.push_back(std::move(gpu));
    }
    comms = std::move(seen_comms);
    errors = snapshot->errors_by_call;
    snapshot->taken = absl::Now();
    Publish(std::move(snapshot), true);

    next += options_.interval;
    absl::Time now = absl::Now();
    if (next < now) next = now;  // a slow tick (sick driver) skips ahead instead of bursting
    MutexLock lock(&mutex_);
    if (WaitUntil(&changed_, &mutex_, next,
                  [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return stop_; }))
      return;
  }
}

}  // namespace profd

#include "daemon/metrics/gpu_sampler.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
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

constexpr char kSamplesCall[] = "nvmlDeviceGetSamples";
constexpr char kRatesCall[] = "nvmlDeviceGetUtilizationRates";

// What the sampler thread keeps about one GPU between ticks.
struct DeviceState {
  NvmlDevice handle = nullptr;
  GpuSample identity;               // index, uuid, model
  uint64_t last_seen_us = 0;        // newest process-utilization sample already used
  UtilizationAverager gpu_busy;     // NVML_GPU_UTILIZATION_SAMPLES
  UtilizationAverager memory_busy;  // NVML_MEMORY_UTILIZATION_SAMPLES
  double busy_seconds = 0;          // sums of the windows so far
  double memory_busy_seconds = 0;
  std::set<std::string> unsupported;  // calls this GPU answered NOT_SUPPORTED: not asked again
  std::set<std::string> warned;       // calls whose failure has been logged once
};

// Counts and logs (once per GPU and call) a failed NVML call. NOT_SUPPORTED disables the call on
// that GPU: asking every second would only fill the log and the error counter. `instead` says
// what the GPU's series show without the call.
void NoteFailure(const absl::Status& status, const std::string& call, DeviceState& device,
                 GpuSnapshot& snapshot, const char* instead = "that metric is left out for it") {
  ++snapshot.errors_by_call[call];
  if (absl::IsUnimplemented(status)) {
    device.unsupported.insert(call);
    LogInfo(kComponent, "GPU %d does not support %s (%s); %s", device.identity.index, call,
            status.message(), instead);
    return;
  }
  if (device.warned.insert(call).second) {
    LogWarning(kComponent, "GPU %d: %s; counted in profd_nvml_errors_total, logged once",
               device.identity.index, status.message());
  }
}

constexpr char kRatesFallback[] =
    "profd_gpu_utilization_ratio and profd_gpu_memory_bandwidth_utilization_ratio read "
    "nvmlDeviceGetUtilizationRates instead: NVML's last sample period only, which misreads a "
    "load that comes and goes in step with profd's reads";

// Every GPU NVML lists and can open, with its uuid and model; the calls that failed are counted
// in `errors`.
absl::StatusOr<std::vector<DeviceState>> OpenDevices(NvmlLibrary& nvml,
                                                     std::map<std::string, uint64_t>& errors) {
  absl::StatusOr<uint32_t> count = nvml.DeviceCount();
  if (!count.ok()) return count.status();
  std::vector<DeviceState> devices;
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
  return devices;
}

bool Allowed(const DeviceState& d, const std::string& call) { return !d.unsupported.count(call); }

// Utilization: the mean of NVML's samples since the last tick. NVML's last sample period
// (GetUtilizationRates) fills in only where the samples could not be read this tick.
void SampleUtilization(NvmlLibrary& nvml, DeviceState& d, GpuSample& gpu, GpuSnapshot& snapshot) {
  if (nvml.has_utilization_samples() && Allowed(d, kSamplesCall)) {
    auto read = [&](NvmlSampling type, UtilizationAverager& averager, double& busy_seconds,
                    std::optional<double>& mean) -> absl::Status {
      auto samples = nvml.UtilizationSamples(d.handle, type, averager.last_seen_us());
      if (!samples.ok()) return samples.status();
      if (auto window = averager.Add(std::move(*samples))) {
        busy_seconds += window->busy_seconds;
        mean = window->mean;
      }
      return absl::OkStatus();
    };
    absl::Status status =
        read(NvmlSampling::kGpuUtilization, d.gpu_busy, d.busy_seconds, gpu.utilization);
    if (status.ok()) {
      status = read(NvmlSampling::kMemoryUtilization, d.memory_busy, d.memory_busy_seconds,
                    gpu.memory_bandwidth_utilization);
    }
    if (!status.ok()) NoteFailure(status, kSamplesCall, d, snapshot, kRatesFallback);
    if (Allowed(d, kSamplesCall)) {
      gpu.busy_seconds_total = d.busy_seconds;
      gpu.memory_bandwidth_busy_seconds_total = d.memory_busy_seconds;
    }
  }
  if ((!gpu.utilization || !gpu.memory_bandwidth_utilization) && Allowed(d, kRatesCall)) {
    if (auto u = nvml.Utilization(d.handle); u.ok()) {
      if (!gpu.utilization) gpu.utilization = u->gpu_percent / 100.0;
      if (!gpu.memory_bandwidth_utilization) {
        gpu.memory_bandwidth_utilization = u->memory_percent / 100.0;
      }
    } else {
      NoteFailure(u.status(), kRatesCall, d, snapshot);
    }
  }
}

void SampleMemory(NvmlLibrary& nvml, DeviceState& d, GpuSample& gpu, GpuSnapshot& snapshot) {
  if (!Allowed(d, "nvmlDeviceGetMemoryInfo")) return;
  if (auto m = nvml.Memory(d.handle); m.ok()) {
    gpu.memory_used_bytes = m->used_bytes;
    gpu.memory_total_bytes = m->total_bytes;
  } else {
    NoteFailure(m.status(), "nvmlDeviceGetMemoryInfo", d, snapshot);
  }
}

// The processes with a context on the GPU, by pid, with the memory they hold.
void SampleProcessMemory(NvmlLibrary& nvml, DeviceState& d, GpuSnapshot& snapshot,
                         std::map<uint32_t, GpuProcessSample>& processes) {
  if (!Allowed(d, "nvmlDeviceGetComputeRunningProcesses")) return;
  if (auto ps = nvml.ComputeProcesses(d.handle); ps.ok()) {
    for (const NvmlProcessMemory& p : *ps) {
      GpuProcessSample& s = processes[p.pid];
      s.pid = p.pid;
      // MIG lists a process once per instance: add its parts up.
      if (p.used_bytes) s.memory_used_bytes = s.memory_used_bytes.value_or(0) + *p.used_bytes;
    }
  } else {
    NoteFailure(ps.status(), "nvmlDeviceGetComputeRunningProcesses", d, snapshot);
  }
}

// Each process's SM utilization over the interval, the mean of its samples since the last read.
void SampleProcessUtilization(NvmlLibrary& nvml, DeviceState& d, GpuSnapshot& snapshot,
                              std::map<uint32_t, GpuProcessSample>& processes) {
  if (!Allowed(d, "nvmlDeviceGetProcessUtilization")) return;
  auto us = nvml.ProcessUtilization(d.handle, d.last_seen_us);
  if (!us.ok()) {
    NoteFailure(us.status(), "nvmlDeviceGetProcessUtilization", d, snapshot);
    return;
  }
  // NVML gives each process one sample per sample period, 0 while it is idle (seen on
  // an H200: every 200 ms), so the plain mean of the samples since the last read is the
  // interval's mean. The first read, like the GPU's, keeps the last second only.
  if (d.last_seen_us == 0 && !us->empty()) {
    uint64_t newest = 0;
    for (const NvmlProcessUtilization& u : *us) newest = std::max(newest, u.timestamp_us);
    const uint64_t window = absl::ToInt64Microseconds(UtilizationAverager::kFirstWindow);
    std::erase_if(*us, [&](const NvmlProcessUtilization& u) {
      return newest > window && u.timestamp_us <= newest - window;
    });
  }
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
}

// One GPU's tick. `comms` are the names of the pids seen on the last tick; those seen on this
// one go to `seen_comms`.
GpuSample SampleDevice(NvmlLibrary& nvml, DeviceState& d, GpuSnapshot& snapshot,
                       const std::map<uint32_t, std::string>& comms,
                       std::map<uint32_t, std::string>& seen_comms) {
  GpuSample gpu = d.identity;
  SampleUtilization(nvml, d, gpu, snapshot);
  SampleMemory(nvml, d, gpu, snapshot);
  std::map<uint32_t, GpuProcessSample> processes;
  SampleProcessMemory(nvml, d, snapshot, processes);
  SampleProcessUtilization(nvml, d, snapshot, processes);
  for (auto& [pid, s] : processes) {
    auto known = comms.find(pid);
    s.comm = known != comms.end() ? known->second : ReadComm(pid);
    seen_comms[pid] = s.comm;
    gpu.processes.push_back(std::move(s));
  }
  return gpu;
}

}  // namespace

std::optional<UtilizationAverager::Window> UtilizationAverager::Add(
    std::vector<NvmlUtilizationSample> samples) {
  std::sort(samples.begin(), samples.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  // Entries of 0 are slots NVML has not filled; equal timestamps are one sample.
  std::erase_if(samples, [this](const NvmlUtilizationSample& s) {
    return s.timestamp_us == 0 || s.timestamp_us <= last_seen_us_;
  });
  samples.erase(
      std::unique(samples.begin(), samples.end(),
                  [](const auto& a, const auto& b) { return a.timestamp_us == b.timestamp_us; }),
      samples.end());
  if (samples.empty()) return std::nullopt;

  const uint64_t newest = samples.back().timestamp_us;
  uint64_t start = last_seen_us_;
  size_t first = 0;
  uint64_t previous = last_seen_us_;
  if (last_seen_us_ == 0) {
    const uint64_t first_window = absl::ToInt64Microseconds(kFirstWindow);
    start = newest > first_window ? newest - first_window : 0;
    // The sample at or before the window's start only marks where the next one's period began.
    while (first < samples.size() && samples[first].timestamp_us <= start) ++first;
    if (first == 0) {  // the buffer is shorter than the window: its oldest period is unknown
      start = samples[0].timestamp_us;
      first = 1;
    }
    previous = samples[first - 1].timestamp_us;
  }
  last_seen_us_ = newest;

  const uint64_t max_period = absl::ToInt64Microseconds(kMaxSamplePeriod);
  // Integers (percent x microseconds) until the one division, so a steady 37% reads 0.37 exactly.
  uint64_t covered_us = 0;
  uint64_t busy_percent_us = 0;
  for (size_t i = first; i < samples.size(); ++i) {
    const uint64_t begin = std::max(previous, start);
    const uint64_t period = std::min(samples[i].timestamp_us - begin, max_period);
    covered_us += period;
    busy_percent_us += period * std::min(samples[i].percent, 100u);
    previous = samples[i].timestamp_us;
  }
  if (covered_us == 0) return std::nullopt;
  Window w;
  w.busy_seconds = static_cast<double>(busy_percent_us) / 1e8;
  w.covered_seconds = static_cast<double>(covered_us) / 1e6;
  w.mean = static_cast<double>(busy_percent_us) / (100.0 * static_cast<double>(covered_us));
  w.start_us = start;
  w.end_us = newest;
  return w;
}

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
    absl::StatusOr<std::vector<DeviceState>> opened = OpenDevices(**loaded, errors);
    if (opened.ok()) {
      devices = *std::move(opened);
    } else {
      loaded = opened.status();
    }
  }
  if (!loaded.ok()) {
    PublishUnavailable(loaded.status(), std::move(errors));
    return;  // nothing to sample; the thread ends and Stop() joins it
  }
  NvmlLibrary& nvml = **loaded;
  // Every call sampled is counted from 0, so a rate() over the error counter exists before the
  // first error.
  for (const char* call :
       {kRatesCall, "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetProcessUtilization"}) {
    errors.try_emplace(call, 0);
  }
  if (nvml.has_utilization_samples()) errors.try_emplace(kSamplesCall, 0);
  LogInfo(kComponent, "NVML loaded from %s: %d GPU(s), sampled every %s", options_.library_path,
          devices.size(), absl::FormatDuration(options_.interval));
  if (!nvml.has_utilization_samples()) {
    LogWarning(kComponent, "%s does not export %s; %s", options_.library_path, kSamplesCall,
               kRatesFallback);
  }

  std::map<uint32_t, std::string> comms;  // pid -> comm, for pids seen on the last tick
  absl::Time next = absl::Now();
  while (true) {
    auto snapshot = std::make_shared<GpuSnapshot>();
    snapshot->nvml_available = true;
    snapshot->errors_by_call = errors;
    std::map<uint32_t, std::string> seen_comms;
    for (DeviceState& d : devices) {
      snapshot->gpus.push_back(SampleDevice(nvml, d, *snapshot, comms, seen_comms));
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

void GpuSampler::PublishUnavailable(const absl::Status& why,
                                    std::map<std::string, uint64_t> errors) {
  LogWarning(kComponent,
             "GPU metrics are off: %s. profd runs on; agent counters are still exported, and "
             "profd_nvml_available is 0.",
             why.message());
  auto snapshot = std::make_shared<GpuSnapshot>();
  snapshot->nvml_error = std::string(why.message());
  snapshot->errors_by_call = std::move(errors);
  snapshot->taken = absl::Now();
  Publish(std::move(snapshot), true);
}

GpuIndex::GpuIndex(const GpuSnapshot& gpus) {
  for (const GpuSample& g : gpus.gpus) {
    if (!g.uuid.empty()) nvml_index_of_uuid_[g.uuid] = g.index;
  }
}

uint32_t GpuIndex::Of(const v1::AgentInfo& process, uint32_t ordinal) const {
  for (const v1::DeviceInfo& d : process.devices()) {
    if (d.ordinal() != ordinal) continue;
    auto nvml = nvml_index_of_uuid_.find(d.uuid());
    if (nvml != nvml_index_of_uuid_.end()) return nvml->second;
  }
  return ordinal;
}

}  // namespace profd

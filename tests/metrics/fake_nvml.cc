// A stand-in for libnvidia-ml.so.1 on hosts without a GPU (CI): the entry points profd's NVML
// sampler uses, with the ABI of NVML's header and fixed, known values, so tests can check the
// whole path NVML -> sampler -> /metrics -> Prometheus -> dashboard. It is loaded by
// `profd --nvml_library=<this>`; the real library is only exercised on the GPU host
// (docs/METRICS.md says what to run there).
//
// Two GPUs, index 0 and 1, 80 GiB total and 10 GiB used each. Utilization comes as NVML gives
// it: nvmlDeviceGetSamples keeps the last 2 s of samples, one every 20 ms of CLOCK_REALTIME,
// and nvmlDeviceGetUtilizationRates is the newest of them. GPU 0 is steady: every sample 37%
// (memory 12%). GPU 1 runs a periodic load, busy the first 300 ms of every wall-clock second:
// its samples are 100% (memory 40%) then, 0 otherwise, so its true utilization is 0.30 (memory
// 0.12) and the newest sample alone reads 0 or 1. FAKE_NVML_SAMPLES_UNSUPPORTED=<index> makes
// that GPU answer nvmlDeviceGetSamples NOT_SUPPORTED; built with FAKE_NVML_NO_SAMPLES
// (libfake_nvml_no_samples.so) the library does not export it at all.
//
// The processes on the GPUs are read, on every call, from the file named by
// FAKE_NVML_PIDS_FILE: lines "<pid> <gpu index>"; each holds 1 GiB and uses 25% of the SMs.
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

namespace {

struct Process {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct Sample {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
};

struct Gpu {
  int index;
};
Gpu g_gpus[2] = {{0}, {1}};

std::vector<std::pair<unsigned, int>> Pids() {
  std::vector<std::pair<unsigned, int>> out;
  const char* file = std::getenv("FAKE_NVML_PIDS_FILE");
  if (file == nullptr) return out;
  std::ifstream in(file);
  unsigned pid;
  int gpu;
  while (in >> pid >> gpu) out.push_back({pid, gpu});
  return out;
}

int IndexOf(void* device) { return static_cast<Gpu*>(device)->index; }

unsigned long long NowUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000ull + ts.tv_nsec / 1000;
}

constexpr unsigned long long kSamplePeriodUs = 20000;

// The sample NVML would have stamped at timestamp_us: the busy percent of the 20 ms before it.
std::pair<unsigned, unsigned> PercentAt(int gpu, unsigned long long timestamp_us) {
  if (gpu == 0) return {37, 12};
  const bool busy = (timestamp_us - kSamplePeriodUs) % 1000000 < 300000;
  return busy ? std::pair{100u, 40u} : std::pair{0u, 0u};
}

unsigned long long NewestSampleUs() { return NowUs() / kSamplePeriodUs * kSamplePeriodUs; }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() { return 0; }
__attribute__((visibility("default"))) int nvmlShutdown() { return 0; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int code) {
  return code == 7 ? "Insufficient Size" : "Fake NVML error";
}
__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                         void** device) {
  if (index > 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &g_gpus[index];
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void*, char* name, unsigned int n) {
  std::strncpy(name, "Fake GPU (profd test)", n);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* device, char* uuid,
                                                             unsigned int n) {
  std::strncpy(uuid,
               IndexOf(device) == 0 ? "GPU-00000000-0000-0000-0000-000000000000"
                                    : "GPU-11111111-1111-1111-1111-111111111111",
               n);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(void* device,
                                                                         unsigned int* rates) {
  auto [gpu, memory] = PercentAt(IndexOf(device), NewestSampleUs());
  rates[0] = gpu;
  rates[1] = memory;
  return 0;
}

#ifndef FAKE_NVML_NO_SAMPLES
struct NvmlSample {
  unsigned long long timeStamp;
  union {
    unsigned int uiVal;
    unsigned long long ullVal;
  } sampleValue;
};

__attribute__((visibility("default"))) int nvmlDeviceGetSamples(void* device, int type,
                                                                unsigned long long last_seen_us,
                                                                int* value_type,
                                                                unsigned int* count,
                                                                NvmlSample* samples) {
  const char* unsupported = std::getenv("FAKE_NVML_SAMPLES_UNSUPPORTED");
  if (unsupported != nullptr && std::atoi(unsupported) == IndexOf(device)) {
    return 3;  // NVML_ERROR_NOT_SUPPORTED
  }
  if (type != 1 && type != 2) return 2;                 // NVML_ERROR_INVALID_ARGUMENT
  constexpr unsigned long long kBufferedSamples = 100;  // what NVML keeps of each GPU
  const unsigned long long newest = NewestSampleUs();
  const unsigned long long oldest = newest - (kBufferedSamples - 1) * kSamplePeriodUs;
  std::vector<NvmlSample> mine;
  for (unsigned long long t = oldest; t <= newest; t += kSamplePeriodUs) {
    if (t <= last_seen_us) continue;
    auto [gpu, memory] = PercentAt(IndexOf(device), t);
    NvmlSample s{};
    s.timeStamp = t;
    s.sampleValue.uiVal = type == 1 ? gpu : memory;
    mine.push_back(s);
  }
  *value_type = 1;             // NVML_VALUE_TYPE_UNSIGNED_INT
  if (mine.empty()) return 6;  // NVML_ERROR_NOT_FOUND: nothing newer than last_seen_us
  if (samples == nullptr) {
    *count = static_cast<unsigned>(mine.size());
    return 0;
  }
  // As NVML does: as many as the buffer holds, and the count says how many.
  *count = std::min(*count, static_cast<unsigned>(mine.size()));
  for (unsigned i = 0; i < *count; ++i) samples[i] = mine[i];
  return 0;
}
#endif
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void*,
                                                                   unsigned long long* memory) {
  memory[0] = 80ull << 30;  // total
  memory[2] = 10ull << 30;  // used
  memory[1] = memory[0] - memory[2];
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses_v3(
    void* device, unsigned int* count, Process* infos) {
  std::vector<Process> mine;
  for (auto [pid, gpu] : Pids()) {
    if (gpu == IndexOf(device)) mine.push_back({pid, 1ull << 30, ~0u, ~0u});
  }
  if (*count < mine.size()) {
    *count = static_cast<unsigned>(mine.size());
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  *count = static_cast<unsigned>(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) infos[i] = mine[i];
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetProcessUtilization(
    void* device, Sample* samples, unsigned int* count, unsigned long long since_us) {
  const unsigned long long now_us = NowUs();
  std::vector<Sample> mine;
  for (auto [pid, gpu] : Pids()) {
    if (gpu == IndexOf(device) && now_us > since_us) mine.push_back({pid, now_us, 25, 5, 0, 0});
  }
  if (mine.empty()) return 6;  // NVML_ERROR_NOT_FOUND: no sample since since_us
  if (samples == nullptr || *count < mine.size()) {
    *count = static_cast<unsigned>(mine.size());
    return 7;
  }
  *count = static_cast<unsigned>(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) samples[i] = mine[i];
  return 0;
}

}  // extern "C"

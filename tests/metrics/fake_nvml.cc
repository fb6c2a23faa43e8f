// A stand-in for libnvidia-ml.so.1 on hosts without a GPU (CI): the entry points profd's NVML
// sampler uses, with the ABI of NVML's header and fixed, known values, so tests can check the
// whole path NVML -> sampler -> /metrics -> Prometheus -> dashboard. It is loaded by
// `profd --nvml_library=<this>`; the real library is only exercised on the GPU host
// (docs/METRICS.md says what to run there).
//
// Two GPUs, index 0 and 1: utilization 37% / 50%, memory-bandwidth 12% / 20%, 80 GiB total and
// 10 GiB used each. The processes on them are read, on every call, from the file named by
// FAKE_NVML_PIDS_FILE: lines "<pid> <gpu index>"; each holds 1 GiB and uses 25% of the SMs.
#include <time.h>

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
  rates[0] = IndexOf(device) == 0 ? 37 : 50;
  rates[1] = IndexOf(device) == 0 ? 12 : 20;
  return 0;
}
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
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const unsigned long long now_us = ts.tv_sec * 1000000ull + ts.tv_nsec / 1000;
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

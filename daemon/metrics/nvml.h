// NVML (libnvidia-ml.so.1), loaded at run time with dlopen so that profd starts on hosts without
// an NVIDIA driver. There is no nvml.h on the build machines: the few entry points and structs
// used are declared in nvml.cc, with the layouts of NVML's public header (stable ABI, versioned
// symbols). Only the GpuSampler thread uses an NvmlLibrary; it is not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace profd {

// An NVML device handle (nvmlDevice_t), opaque to callers.
using NvmlDevice = void*;

struct NvmlUtilization {
  uint32_t gpu_percent = 0;     // time a kernel ran, over NVML's last sample period
  uint32_t memory_percent = 0;  // time device memory was read or written (bandwidth use)
};

// The two utilization sample buffers NVML keeps per device (nvmlSamplingType_t).
enum class NvmlSampling : int {
  kGpuUtilization = 1,     // NVML_GPU_UTILIZATION_SAMPLES: a kernel was running
  kMemoryUtilization = 2,  // NVML_MEMORY_UTILIZATION_SAMPLES: device memory was read or written
};

// One entry of such a buffer: the percent of NVML's sample period (the time since the previous
// sample) in which the engine was busy, stamped with the end of that period.
struct NvmlUtilizationSample {
  uint64_t timestamp_us = 0;  // CPU clock (CLOCK_REALTIME), microseconds
  uint32_t percent = 0;
};

struct NvmlMemory {
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
};

struct NvmlProcessMemory {
  uint32_t pid = 0;
  std::optional<uint64_t> used_bytes;  // absent when NVML may not say (no permission, MIG)
};

struct NvmlProcessUtilization {
  uint32_t pid = 0;
  uint64_t timestamp_us = 0;  // CPU time of the sample, microseconds
  uint32_t sm_percent = 0;
  uint32_t memory_percent = 0;
};

class NvmlLibrary {
 public:
  // dlopens library_path (normally "libnvidia-ml.so.1") and calls nvmlInit. The error says
  // whether the library is missing, lacks an entry point, or the driver refused to start.
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Load(const std::string& library_path);
  ~NvmlLibrary();  // nvmlShutdown, dlclose

  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // Errors map NVML's codes onto absl's: NOT_SUPPORTED -> Unimplemented, NOT_FOUND -> NotFound,
  // anything else -> Unavailable; the message names the call, the device and NVML's own words.
  absl::StatusOr<uint32_t> DeviceCount();
  absl::StatusOr<NvmlDevice> DeviceByIndex(uint32_t index);
  absl::StatusOr<std::string> Name(NvmlDevice device);
  absl::StatusOr<std::string> Uuid(NvmlDevice device);
  absl::StatusOr<NvmlUtilization> Utilization(NvmlDevice device);
  // nvmlDeviceGetSamples: the samples of one buffer newer than since_us, oldest first (0: the
  // whole buffer: 71 samples, ~14 s, on an H200). None newer is an empty vector.
  absl::StatusOr<std::vector<NvmlUtilizationSample>> UtilizationSamples(NvmlDevice device,
                                                                        NvmlSampling type,
                                                                        uint64_t since_us);
  // False when the library does not export nvmlDeviceGetSamples (an old driver, a stand-in).
  bool has_utilization_samples() const;
  absl::StatusOr<NvmlMemory> Memory(NvmlDevice device);
  // Processes holding a compute context on the device, with their memory.
  absl::StatusOr<std::vector<NvmlProcessMemory>> ComputeProcesses(NvmlDevice device);
  // Per-process utilization samples newer than since_us (NVML's CPU timestamp, microseconds).
  // No sample newer than since_us is an empty vector, not an error.
  absl::StatusOr<std::vector<NvmlProcessUtilization>> ProcessUtilization(NvmlDevice device,
                                                                         uint64_t since_us);

  struct Api;  // the resolved entry points (nvml.cc)

 private:
  NvmlLibrary(void* handle, std::unique_ptr<Api> api);

  void* handle_;
  std::unique_ptr<Api> api_;
};

}  // namespace profd

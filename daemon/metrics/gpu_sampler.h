// The NVML sampler: one thread of its own loads NVML, then every interval reads each GPU's
// utilization and memory and the processes on it, and publishes an immutable GpuSnapshot. The
// /metrics scrape only takes the latest snapshot (a shared_ptr copy under a mutex): it never
// calls NVML, whose calls can take milliseconds per GPU and hang on a sick driver.
//
// Without NVML (no driver, no library, nvmlInit failing) the sampler says why once in the log,
// publishes nvml_available = false with that reason, and its thread ends; profd goes on and the
// agents' counters are still exported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace profd {

struct GpuProcessSample {
  uint32_t pid = 0;                           // as NVML reports it (the host's pid namespace)
  std::string comm;                           // /proc/<pid>/comm, read once per pid
  std::optional<uint64_t> memory_used_bytes;  // nvmlDeviceGetComputeRunningProcesses
  std::optional<double> sm_utilization;       // 0..1, mean of NVML's samples in the interval
};

struct GpuSample {
  uint32_t index = 0;                                  // NVML index, the order nvidia-smi shows
  std::string uuid;                                    // GPU-xxxxxxxx-...
  std::string model;                                   // e.g. "NVIDIA H100 80GB HBM3"
  std::optional<double> utilization;                   // 0..1
  std::optional<double> memory_bandwidth_utilization;  // 0..1
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::vector<GpuProcessSample> processes;
};

struct GpuSnapshot {
  bool nvml_available = false;
  std::string nvml_error;  // why NVML is not available; empty while it is
  std::vector<GpuSample> gpus;
  std::map<std::string, uint64_t> errors_by_call;  // failed NVML calls since start, by entry point
  absl::Time taken = absl::InfinitePast();
};

class GpuSampler {
 public:
  struct Options {
    std::string library_path = "libnvidia-ml.so.1";
    absl::Duration interval = absl::Seconds(1);
  };

  explicit GpuSampler(Options options);
  ~GpuSampler();  // Stop()

  // Starts the sampler thread; NVML is loaded there, since nvmlInit can take seconds.
  void Start();
  void Stop();

  // Any thread. Never null: before the first sample it says NVML is "not loaded yet".
  std::shared_ptr<const GpuSnapshot> snapshot() const;

  // Any thread. Waits until the sampler has either published its first sample or given up on
  // NVML; false on timeout.
  bool WaitUntilSettled(absl::Duration timeout) const;

  // Tests and benchmarks: publish a snapshot as if sampled (use without Start()).
  void PublishForTesting(GpuSnapshot snapshot);

 private:
  void Run();
  void Publish(std::shared_ptr<const GpuSnapshot> snapshot, bool settled);

  const Options options_;
  std::thread thread_;

  mutable absl::Mutex mutex_;
  std::shared_ptr<const GpuSnapshot> snapshot_ ABSL_GUARDED_BY(mutex_);
  bool settled_ ABSL_GUARDED_BY(mutex_) = false;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  mutable absl::CondVar changed_;  // settled_ or stop_ set
};

}  // namespace profd

// The NVML sampler: one thread of its own loads NVML, then every interval reads each GPU's
// utilization and memory and the processes on it, and publishes an immutable GpuSnapshot. The
// /metrics scrape only takes the latest snapshot (a shared_ptr copy under a mutex): it never
// calls NVML, whose calls can take milliseconds per GPU and hang on a sick driver.
//
// GPU utilization is the mean of all of NVML's samples since the sampler's previous read
// (UtilizationAverager), not nvmlDeviceGetUtilizationRates: that one is NVML's last sample period
// alone (200 ms on an H200), so a load that comes and goes in step with the reads aliased (busy
// 300 ms of every second read 0 in every 1 s scrape).
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
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/metrics/nvml.h"
#include "profd/v1/profd.pb.h"

namespace profd {

// The one definition of GPU utilization in profd: turns the samples NVML buffers for one GPU
// (nvmlDeviceGetSamples) into the busy fraction of the interval between two reads. Each sample
// is NVML's percent of its own sample period, the time since the sample before it, so the mean is
// weighted by those periods: samples spaced unevenly do not bias it. The first read covers the
// last kFirstWindow of the buffer only (it holds ~14 s on an H200). Used on the sampler thread
// only; the tests feed it recorded buffers.
class UtilizationAverager {
 public:
  // The first read's window: about one sampler interval, so that the first value means what
  // every later one does rather than an average over the whole buffer's history.
  static constexpr absl::Duration kFirstWindow = absl::Seconds(1);
  // A gap between two samples longer than this means NVML lost or skipped samples (its sample
  // period is 1/6 s to 1 s depending on the product, 200 ms on an H200): the sample after the
  // gap speaks for this much time at most, and the rest is left out of the mean.
  static constexpr absl::Duration kMaxSamplePeriod = absl::Seconds(1);

  struct Window {
    double mean = 0;             // 0..1: busy_seconds / covered_seconds
    double busy_seconds = 0;     // sum of each sample's fraction times its period
    double covered_seconds = 0;  // sum of the periods
    uint64_t start_us = 0;       // the window, in NVML's timestamps: the previous read's newest
    uint64_t end_us = 0;         // sample (or kFirstWindow before the newest) to the newest one
  };

  // What to pass as nvmlDeviceGetSamples' lastSeenTimeStamp: the newest sample already used, 0
  // before the first read (the whole buffer).
  uint64_t last_seen_us() const { return last_seen_us_; }

  // The samples nvmlDeviceGetSamples returned for last_seen_us(), in any order; any at or before
  // it are ignored. Nullopt when none is new (or only one, on the first read: its period is
  // unknown).
  std::optional<Window> Add(std::vector<NvmlUtilizationSample> samples);

 private:
  uint64_t last_seen_us_ = 0;
};

struct GpuProcessSample {
  uint32_t pid = 0;                           // as NVML reports it (the host's pid namespace)
  std::string comm;                           // /proc/<pid>/comm, read once per pid
  std::optional<uint64_t> memory_used_bytes;  // nvmlDeviceGetComputeRunningProcesses
  std::optional<double> sm_utilization;       // 0..1, mean of NVML's samples in the interval
};

struct GpuSample {
  uint32_t index = 0;  // NVML index, the order nvidia-smi shows
  std::string uuid;    // GPU-xxxxxxxx-...
  std::string model;   // e.g. "NVIDIA H100 80GB HBM3"
  // 0..1; the mean of NVML's samples since the sampler's previous read (UtilizationAverager),
  // or, where nvmlDeviceGetSamples is missing or failed, NVML's last sample period alone.
  std::optional<double> utilization;
  std::optional<double> memory_bandwidth_utilization;  // 0..1, the same for memory
  // Seconds busy since the sampler started, summed over the same samples: rate() of it is the
  // exact mean over any range. Absent where the samples are not read (the fallback).
  std::optional<double> busy_seconds_total;
  std::optional<double> memory_bandwidth_busy_seconds_total;
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

// What `gpu` means for a process's CUDA device everywhere (its /metrics series, an alert's gpu
// label): NVML's index of the device's uuid, the order nvidia-smi shows. The agent counts by CUDA
// ordinal, which CUDA_VISIBLE_DEVICES renumbers; without NVML, or for a uuid NVML does not list,
// the ordinal stands in.
class GpuIndex {
 public:
  explicit GpuIndex(const GpuSnapshot& gpus);
  uint32_t Of(const v1::AgentInfo& process, uint32_t ordinal) const;

 private:
  std::unordered_map<std::string, uint32_t> nvml_index_of_uuid_;
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
  // NVML could not be loaded or asked for its GPUs: said once in the log, and published.
  void PublishUnavailable(const absl::Status& why, std::map<std::string, uint64_t> errors);

  const Options options_;
  std::thread thread_;

  mutable absl::Mutex mutex_;
  std::shared_ptr<const GpuSnapshot> snapshot_ ABSL_GUARDED_BY(mutex_);
  bool settled_ ABSL_GUARDED_BY(mutex_) = false;
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  mutable absl::CondVar changed_;  // settled_ or stop_ set
};

}  // namespace profd

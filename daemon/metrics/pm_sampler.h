// Device-wide hardware counters of every GPU, sampled by profd itself with CUPTI's PM sampling
// (issue 11; docs/HARDWARE_COUNTERS.md): one thread of its own loads the CUDA driver and CUPTI
// with dlopen (profd links neither), enables PM sampling on each GPU at `interval` — no CUDA
// context, nothing added to the profiled processes, one sampler for every process on the GPU —
// and every `publish_every` decodes what the GPUs recorded and publishes each GPU's
// time-weighted means (gpu_counters.h) as an immutable snapshot that /metrics reads.
//
// Unavailable (no driver or CUPTI, profiling restricted to admin users, MIG, a GPU without PM
// sampling, another profiler holding the counters): said once in the log, published with the
// reason, and profd goes on without these series.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace profd {

struct GpuCounterSample {
  uint32_t cuda_index = 0;
  std::string uuid;  // GPU-xxxxxxxx-..., as NVML prints it
  std::string name;
  std::vector<double> values;  // per GpuCounterDefs(); NaN: not measured on this GPU
};

struct GpuCounterSnapshot {
  bool available = false;
  std::string error;  // why not, while not available
  std::vector<GpuCounterSample> gpus;
  absl::Time taken = absl::InfinitePast();
};

class PmSampler {
 public:
  struct Options {
    std::string cupti_library;  // empty: libcupti.so.13 on the library path, then the toolkit's
    absl::Duration interval = absl::Milliseconds(10);
    absl::Duration publish_every = absl::Seconds(1);
    // Host memory CUPTI fills between decodes: ~1.3 KB a sample, so 4 MiB holds ~30 s at 10 ms.
    uint64_t hardware_buffer_bytes = 4ull << 20;
  };

  explicit PmSampler(Options options);
  ~PmSampler();  // Stop()

  void Start();
  void Stop();

  // Any thread; never null (before the first publication: not available, "starting").
  std::shared_ptr<const GpuCounterSnapshot> snapshot() const;

  // Tests: publish a snapshot as if sampled (use without Start()).
  void PublishForTesting(GpuCounterSnapshot snapshot) { Publish(std::move(snapshot)); }

 private:
  void Run();
  void Publish(GpuCounterSnapshot snapshot);
  bool Stopping(absl::Time until);  // waits until then or Stop(); true when stopping

  const Options options_;
  std::thread thread_;
  mutable absl::Mutex mutex_;
  std::shared_ptr<const GpuCounterSnapshot> snapshot_ ABSL_GUARDED_BY(mutex_);
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  absl::CondVar stop_cv_;
};

}  // namespace profd

// Device-wide hardware counters of every GPU, sampled by profd itself with CUPTI's PM sampling
// (issue 11; docs/HARDWARE_COUNTERS.md): one thread of its own loads the CUDA driver and CUPTI
// with dlopen (profd links neither), enables PM sampling on each GPU at `interval` — no CUDA
// context, nothing added to the profiled processes, one sampler for every process on the GPU —
// and every `publish_every` decodes what the GPUs recorded and publishes each GPU's
// time-weighted means (gpu_counters.h) as an immutable snapshot that /metrics reads.
//
// A capture with --gpu-metrics borrows the same sampling (BeginCapture/EndCapture): every GPU at
// the capture's interval, decoded every few milliseconds, each reading handed to the capture;
// /metrics keeps its means meanwhile. Without --gpu_counters the sampler starts at the first
// capture, and after each one the GPUs stop sampling; CUPTI's profiler stays initialised until
// profd stops (tearing it down between captures crashed the profiled application's CUPTI).
//
// Unavailable (no driver or CUPTI, profiling restricted to admin users, MIG, a GPU without PM
// sampling, another profiler holding the counters): said once in the log, published with the
// reason, and profd goes on without these series.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "analysis/gpu_counters.h"

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
    // Host memory CUPTI fills between decodes, for /metrics: ~1.3 KB a sample, so 4 MiB holds
    // ~30 s at 10 ms.
    uint64_t hardware_buffer_bytes = 4ull << 20;
    // For a capture, decoded every 20 ms: at 100 us the H200 filled 4 MiB in under 40 ms;
    // 32 MiB holds ~0.3 s. Taken while the capture runs.
    uint64_t capture_hardware_buffer_bytes = 32ull << 20;
  };

  explicit PmSampler(Options options);
  ~PmSampler();  // Stop()

  // /metrics (--gpu_counters): sample at options.interval and publish until Stop().
  void Start();
  void Stop();

  // A capture: every GPU sampled at `interval` from now until EndCapture, each decode's readings
  // of a GPU handed to `sink` on the sampler's thread. One capture at a time: false with *why
  // when another has them.
  using CaptureSink = std::function<void(GpuCounterBatch batch)>;
  bool BeginCapture(absl::Duration interval, CaptureSink sink, std::string* why);
  // Waits (at most `timeout`) until the capture's sampling has started or could not start (the
  // first start loads CUPTI and initialises its profiler, 0.3-0.6 s on the H200): a capture
  // waits so that the counters cover its whole window.
  void AwaitCaptureStart(absl::Duration timeout);
  // Ends it: the readings up to now have reached the sink when it returns. Returns why there
  // were none ("" when the GPUs were sampled).
  std::string EndCapture();

  // Any thread; never null (before the first publication: not available, "starting").
  std::shared_ptr<const GpuCounterSnapshot> snapshot() const;

  // What the sampler does now, for `profctl status`. Any thread.
  struct State {
    bool metrics = false;                            // Start()ed: /metrics wants the counters
    bool capture = false;                            // a capture's --gpu-metrics has them now
    absl::Duration interval = absl::ZeroDuration();  // sampling now at; zero: not sampling
    uint32_t gpus = 0;                               // GPUs sampled now
    std::string error;  // why the last try could not sample every GPU ("" when it could)
  };
  State state() const;

  // Tests: publish a snapshot as if sampled (use without Start()).
  void PublishForTesting(GpuCounterSnapshot snapshot) { Publish(std::move(snapshot)); }

 private:
  struct Wanted;
  struct Session;
  void Run();
  // Loads the libraries, samples while /metrics or a capture wants it, and lets go of the GPUs.
  void Sample();
  // Sample's parts, on the sampler's thread. Loads the libraries and initialises CUPTI's profiler;
  // says once (log, snapshot, state) when the GPUs cannot be sampled.
  void OpenSession(Session& s);
  // What `profctl status` says: sampling at `interval` on the GPUs without an error.
  void SetState(const Session& s, absl::Duration interval, std::string why);
  // (Re)starts every GPU still sampled for a capture at its interval, or for /metrics.
  void Configure(Session& s, const Wanted& wanted);
  // Nothing wants the counters: the GPUs stop sampling and their errors are forgotten.
  void PauseSampling(Session& s);
  void MarkCaptureStarted();
  // The capture's readings go to it, every sample to /metrics' means.
  void Decode(Session& s, const Wanted& wanted);
  // Tells EndCapture why there were no readings ("" when sampled) and wakes it.
  void EndCaptureSampling(const Session& s);
  void PublishMeans(Session& s);
  // Stops every GPU and lets go of CUPTI's profiler and what it took.
  void CloseSession(Session& s);
  void EnsureThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Publish(GpuCounterSnapshot snapshot);
  // Waits until `until` or until what is wanted differs from `known` (what the thread acts on;
  // null: what is wanted at the call); returns what is wanted then.
  Wanted AwaitChange(absl::Time until, const Wanted* known = nullptr);

  const Options options_;
  std::thread thread_;
  mutable absl::Mutex mutex_;
  std::shared_ptr<const GpuCounterSnapshot> snapshot_ ABSL_GUARDED_BY(mutex_);
  bool stop_ ABSL_GUARDED_BY(mutex_) = false;
  bool metrics_ ABSL_GUARDED_BY(mutex_) = false;      // Start()ed
  bool running_ ABSL_GUARDED_BY(mutex_) = false;      // the thread has not returned
  CaptureSink capture_sink_ ABSL_GUARDED_BY(mutex_);  // set between BeginCapture and its end
  absl::Duration capture_interval_ ABSL_GUARDED_BY(mutex_);
  bool capture_ending_ ABSL_GUARDED_BY(mutex_) = false;
  bool capture_started_ ABSL_GUARDED_BY(mutex_) = false;  // configured for it (or failed)
  std::string capture_error_ ABSL_GUARDED_BY(mutex_);
  State state_ ABSL_GUARDED_BY(mutex_);  // interval, gpus and error: set by the thread
  absl::CondVar changed_cv_;             // what is wanted changed (the sampler's thread waits)
  absl::CondVar ended_cv_;               // a capture's sampling ended (EndCapture waits)
  absl::CondVar started_cv_;             // ... started (AwaitCaptureStart waits)
};

}  // namespace profd

// Runs captures: validates a request against the agents profd knows, tells each agent when to
// enable CUPTI and for how long, streams the event batches that come back into one trace file
// per process, builds the summary, writes the capture folder, and hands it to the store.
// It coordinates the parts that do the work: CaptureTargets (which processes, and how),
// CaptureSession (phase, per-process states, timeouts), ProcessSink (one process's batches into
// its trace, raw record and the streaming analysis) and CaptureFolder (the files and digests).
//
// Threads: Start/Get/List/Cancel/WaitForChange run on gRPC threads and take mutex_ briefly. The
// AgentEventSink calls come from the agent I/O thread and only queue work. Each capture has one
// pipeline thread that owns its trace writers, summary and deadlines, and publishes a CaptureInfo
// snapshot (with a version) that the gRPC side reads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "analysis/gpu_counters.h"
#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/capture/capture_targets.h"
#include "daemon/kineto/kineto_ipc_server.h"
#include "daemon/trace/trace_writer.h"
#include "profd/v1/profd.pb.h"

namespace profd {

struct CaptureOptions {
  std::string hostname;
  std::string capture_dir;  // capture folders are written here
  absl::Duration max_duration = absl::Seconds(60);
  uint64_t max_events = 50'000'000;                   // per process; the trace says when it was cut
  absl::Duration start_timeout = absl::Seconds(5);    // agent must enable CUPTI by then
  absl::Duration finish_timeout = absl::Seconds(30);  // ... and report the end by then
  absl::Duration cancel_timeout = absl::Seconds(5);   // ... or this long after a cancel
  uint64_t min_free_bytes = 64u << 20;                // refuse captures when the disk is this full
  int gzip_level = 1;
  // The traces' format when a request does not name one (--trace_format).
  TraceFormat trace_format = TraceFormat::kChromeJson;
  // Through Kineto: the largest trace profd takes from a process (--kineto_max_trace_bytes).
  uint64_t kineto_max_trace_bytes = uint64_t{2} << 30;
  // Through Kineto: the capture's report holds the traces in memory (the operator table's CUDA
  // time needs every CPU operator, API call and kernel at once: ~150 bytes per event at its
  // peak) up to this many events in all; past it they are analysed streaming, in bounded memory,
  // and the operator table has no CUDA time. ~300 k events keep profd within its budget of
  // 100 MB + 16 MB per process; a 3 s on-demand trace of a large model has ~1 M.
  uint64_t kineto_max_exact_events = 300'000;
  // What one process's string table (kernel, API and NVTX names) may hold, as malloc counts it;
  // past it that process's trace stops. Real captures need a few MiB (100 k names of 40 bytes
  // fit); the agent chooses ids and texts, and profd's budget is 16 MB per process captured.
  uint64_t max_string_bytes_per_process = 12u << 20;
  // Also keep the raw event batches (batches-<pid>.pb, varint-delimited EventBatch) for replay
  // in tests and bug reports.
  bool record_batches = false;
  // Called on the pipeline thread with the finished folder; returns where the capture now lives
  // (the folder itself when unset).
  std::function<absl::StatusOr<std::string>(const v1::CaptureInfo& info, const std::string& folder)>
      on_complete;
  // Optional: asked before a capture starts whether the store can take one more (the spool's
  // cap); an error refuses the capture with its message.
  std::function<absl::Status()> check_space;
  // Optional: told about every finished capture (metrics).
  std::function<void(const v1::CaptureInfo& info)> on_finished;
  // Optional: the GPUs' hardware counters for captures that ask (--gpu-metrics), as
  // PmSampler::BeginCapture and EndCapture; unset, such captures say the counters are
  // unavailable and go on without them.
  std::function<bool(absl::Duration interval, std::function<void(GpuCounterBatch)> sink,
                     std::string* why)>
      begin_gpu_metrics;
  std::function<std::string()> end_gpu_metrics;
  // Optional, with them: waits (at most the given time) until the GPUs sample for the capture
  // begun, as PmSampler::AwaitCaptureStart.
  std::function<void(absl::Duration timeout)> await_gpu_metrics;
  // The time every deadline, timestamp and publication is taken from (tests move their own);
  // waiting for work stays on the real clock, in turns of at most 100 ms.
  std::function<absl::Time()> clock = [] { return absl::Now(); };
};

class CaptureOrchestrator final : public AgentEventSink {
 public:
  // kineto may be null (no Kineto socket): processes are then captured through their agents only.
  // agents: the agent channel (AgentChannelServer), which the orchestrator is the sink of.
  CaptureOrchestrator(CaptureOptions options, AgentRegistry* registry, AgentLink* agents,
                      const CaptureTargets* catalog, kineto::KinetoIpcServer* kineto);
  ~CaptureOrchestrator() override;

  // Who asks, as the caller established it, and whether they may capture the processes the
  // request resolves to: `check` runs once, after resolution and before anything starts.
  struct Admission {
    std::string requested_by;
    std::function<absl::Status(const std::vector<CaptureTarget>& targets)> check;
  };

  // gRPC threads.
  absl::StatusOr<std::string> Start(const v1::CaptureRequest& request,
                                    const Admission& admission = {});
  std::optional<v1::CaptureInfo> Get(const std::string& id) const;
  // Waits until the capture's snapshot is newer than *version (or timeout); false if unknown id.
  bool WaitForChange(const std::string& id, uint64_t* version, absl::Duration timeout,
                     v1::CaptureInfo* out) const;
  std::vector<v1::CaptureInfo> List(size_t limit) const;
  absl::StatusOr<v1::CaptureInfo> Cancel(const std::string& id);

  // Main thread, at start before serving: the capture folders a previous profd left unfinished
  // (killed mid-capture: no manifest, a trace cut anywhere) get a trace that reads (the gzip's
  // readable prefix, closed at its last whole event), a summary and a manifest that says what
  // happened, and go to the store (on_complete); Get and List show them. Returns their ids.
  std::vector<std::string> RecoverUnfinished();

  // Main thread, at shutdown before the gRPC server stops: every running capture ends now with
  // what it has, its processes failed with "profd shut down during the capture", and its files
  // written; returns once all have. The destructor does the same.
  void Shutdown();

  struct Counts {
    uint32_t running = 0;
    uint64_t completed = 0;
    uint64_t failed = 0;
  };
  Counts counts() const;

  // AgentEventSink: agent I/O thread, queue only.
  void OnCaptureStatus(ConnectionId connection, uint32_t pid,
                       const v1::CaptureStatus& status) override;
  void OnEventBatch(ConnectionId connection, uint32_t pid, AgentEventBatch batch) override;
  void OnAgentGone(ConnectionId connection, uint32_t pid) override;

  static bool Terminal(v1::CapturePhase phase);

 private:
  class Capture;
  // Finished captures remembered for GetCapture and List (recovered ones too).
  static constexpr size_t kKeepFinished = 256;

  // Start's steps. The request's own checks, then its targets, resolved and admitted.
  absl::StatusOr<std::vector<CaptureTarget>> CheckRequest(const v1::CaptureRequest& request,
                                                          const Admission& admission,
                                                          absl::Time now) const;
  // The capture folder exists, with room for a trace.
  absl::Status CheckCaptureFolder() const;
  // The new capture's row, pending.
  v1::CaptureInfo DescribeRequest(const v1::CaptureRequest& request, const Admission& admission,
                                  absl::Time now) const;
  // Keeps the capture for GetCapture and List, and forgets the oldest finished ones.
  void Remember(const std::string& id, std::shared_ptr<Capture> capture);
  std::shared_ptr<Capture> Find(const std::string& id) const;
  std::shared_ptr<Capture> FindByConnection(ConnectionId connection) const;
  std::string RunningCaptureOf(uint32_t pid) const;
  absl::Time Now() const { return options_.clock(); }
  absl::StatusOr<v1::CaptureInfo> RecoverFolder(const std::string& path);

  const CaptureOptions options_;
  AgentRegistry* const registry_;
  AgentLink* const agents_;
  const CaptureTargets* const catalog_;
  kineto::KinetoIpcServer* const kineto_;

  mutable absl::Mutex mutex_;
  std::map<std::string, std::shared_ptr<Capture>> captures_ ABSL_GUARDED_BY(mutex_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mutex_);  // oldest first, for List and pruning
  // Captures repaired by RecoverUnfinished, oldest first: older than any of captures_.
  std::vector<v1::CaptureInfo> recovered_ ABSL_GUARDED_BY(mutex_);
  uint64_t completed_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t failed_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace profd

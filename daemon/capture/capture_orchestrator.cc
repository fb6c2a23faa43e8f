#include "daemon/capture/capture_orchestrator.h"

#include <malloc.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "analysis/analysis.h"
#include "common/capture_id.h"
#include "common/checked_math.h"
#include "common/mutex.h"
#include "daemon/capture/capture_close.h"
#include "daemon/capture/capture_folder.h"
#include "daemon/capture/capture_request.h"
#include "daemon/capture/capture_session.h"
#include "daemon/capture/kineto_source.h"
#include "daemon/capture/process_sink.h"
#include "daemon/log.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "google/protobuf/arena.h"
#include "profd/v1/capture_limits.h"

namespace profd {
namespace {

constexpr char kComponent[] = "capture";
// --gpu-metrics: the default interval (100 us cost GPT-2 ~14 % on the H200, 1 ms ~2 %:
// docs/HARDWARE_COUNTERS.md), and the most samples of one GPU a capture takes (each ~50 bytes
// in the analysis, ~200 in the trace): 10 s at 100 us.
constexpr absl::Duration kDefaultCounterInterval = absl::Milliseconds(1);
constexpr int64_t kMaxCounterSamples = 100'000;
// How long a --gpu-metrics capture waits for the GPUs to sample before its agents start (the
// first start of the sampler took 0.3-0.6 s on the H200; within the agents' start timeout).
constexpr absl::Duration kCounterStartWait = absl::Seconds(2);
constexpr char kShutdownMessage[] =
    "profd shut down during the capture (SIGTERM); the trace keeps the events until then";

// The base of a capture's trace times: whole milliseconds before the request, so every event
// comes after it and ts stays small.
// The traces' time zero: the request's millisecond, or the start of the time before it asked for
// (--before), so that no event of the capture has a negative time.
int64_t BaseTimeNs(const v1::CaptureInfo& info) {
  const int64_t from = info.requested_unix_ns() - info.before_ms() * 1000000;
  return std::max<int64_t>(0, from) / 1000000 * 1000000;
}

}  // namespace

bool CaptureOrchestrator::Terminal(v1::CapturePhase phase) {
  return CaptureSession::Terminal(phase);
}

// One capture: its targets, its pipeline thread, and the snapshot the gRPC side reads.
class CaptureOrchestrator::Capture : public std::enable_shared_from_this<Capture> {
 public:
  using Target = CaptureTarget;

  Capture(CaptureOrchestrator* owner, v1::CaptureInfo info, std::vector<Target> targets,
          uint64_t max_events, TraceFormat format, std::string folder)
      : owner_(owner),
        session_(WithProcesses(std::move(info), targets), SelfTimed(targets),
                 {owner->options_.start_timeout, owner->options_.finish_timeout,
                  owner->options_.cancel_timeout}),
        info_(session_.mutable_info()),
        targets_(std::move(targets)),
        max_events_(max_events),
        format_(format),
        folder_(std::move(folder)),
        analysis_(std::make_unique<CaptureAnalysis>(BaseTimeNs(info_))) {
    ProcessSink::Options sink_options;
    sink_options.trace_format = format_;
    sink_options.gzip_level = owner_->options_.gzip_level;
    sink_options.max_string_bytes = owner_->options_.max_string_bytes_per_process;
    sink_options.record_batches = owner_->options_.record_batches;
    for (const Target& t : targets_) {
      TraceProcess process;
      process.pid = t.info.pid();
      process.comm = t.info.comm();
      process.command_line = t.info.command_line();
      process.hostname = info_.hostname();
      process.capture_id = info_.capture_id();
      process.pod_name = t.info.pod_name();
      process.pod_namespace = t.info.pod_namespace();
      process.base_time_ns = BaseTimeNs(info_);
      process.distributed = t.info.distributed();
      process.rank = t.info.rank();
      process.world_size = t.info.world_size();
      process.local_rank = t.info.local_rank();
      processes_.push_back(Process{});
      processes_.back().sink = std::make_unique<ProcessSink>(
          std::move(process),
          std::vector<v1::DeviceInfo>(t.info.devices().begin(), t.info.devices().end()), &folder_,
          analysis_.get(), sink_options);
    }
    snapshot_ = info_;
  }

  ~Capture() {
    Join();
    EndGpuMetrics();  // the sampler's sink points here: never past the capture's end
  }

  absl::Time Now() const { return owner_->Now(); }

  // The capture as requested, with a process for each target in target order.
  static v1::CaptureInfo WithProcesses(v1::CaptureInfo info, const std::vector<Target>& targets) {
    for (const Target& t : targets) {
      v1::ProcessCapture* p = info.add_processes();
      p->set_pid(t.info.pid());
      p->set_comm(t.info.comm());
      p->set_pod_name(t.info.pod_name());
      p->set_pod_namespace(t.info.pod_namespace());
      p->set_state(v1::CAPTURE_STATE_UNSPECIFIED);
      p->set_path(t.path);
    }
    return info;
  }

  // Kineto processes keep their own deadlines (the offer's expiry, then the trace's).
  static std::vector<bool> SelfTimed(const std::vector<Target>& targets) {
    std::vector<bool> out;
    for (const Target& t : targets) out.push_back(t.path == v1::CAPTURE_PATH_KINETO);
    return out;
  }

  void Launch(const v1::CaptureRequest& request) {
    // The folder exists, and says the capture is unfinished, until its manifest is written: a
    // profd killed before then finds and repairs it at its next start (RecoverUnfinished).
    if (absl::Status s = folder_.MarkUnfinished(info_); !s.ok()) {
      LogWarning(kComponent, "capture %s: %s", info_.capture_id(), s.message());
    }
    // The GPUs' counters first, so that they cover the whole window: a window that would begin
    // while the sampler starts begins once it samples (a later requested start stays).
    if (info_.has_gpu_metrics()) {
      BeginGpuMetrics();
      if (gpu_metrics_active_ && owner_->options_.await_gpu_metrics) {
        owner_->options_.await_gpu_metrics(kCounterStartWait);
        info_.set_start_at_unix_ns(std::max(info_.start_at_unix_ns(), absl::ToUnixNanos(Now())));
      }
    }
    // Tell every agent and offer every Kineto its config first (cheap, queued), then let the
    // pipeline thread take over.
    for (size_t i = 0; i < targets_.size(); ++i) {
      const Target& t = targets_[i];
      if (t.path == v1::CAPTURE_PATH_KINETO) {
        OfferToKineto(static_cast<int>(i), request);
        continue;
      }
      v1::DaemonMessage message;
      v1::StartCapture* start = message.mutable_start_capture();
      start->set_capture_id(info_.capture_id());
      start->set_duration_ms(info_.duration_ms());
      for (int kind : info_.kinds()) start->add_kinds(static_cast<v1::ActivityKind>(kind));
      int64_t now = absl::ToUnixNanos(Now());
      if (info_.start_at_unix_ns() > now) start->set_start_at_realtime_ns(info_.start_at_unix_ns());
      start->set_max_events(max_events_);
      start->set_requested_realtime_ns(info_.requested_unix_ns());
      start->set_before_ms(info_.before_ms());
      owner_->registry_->SetCapturing(t.connection, info_.capture_id());
      if (!owner_->agents_->Send(t.connection, message)) {
        Push(Item{Item::kGone, t.connection, {}, {}});
      }
    }
    thread_ = std::thread([this] { Run(); });
  }

  bool Targets(ConnectionId connection) const {
    for (const Target& t : targets_) {
      if (t.connection != 0 && t.connection == connection) return true;
    }
    return false;
  }

  struct Item {
    enum Kind { kStatus, kBatch, kGone, kCancel, kKineto, kShutdown, kCounters } kind;
    ConnectionId connection = 0;
    v1::CaptureStatus status;
    // Unparsed: parsed on this capture's thread. It holds its agent's backlog until destroyed,
    // so a batch that will not be written is dropped at once (Push after the end, a failed
    // process).
    AgentEventBatch batch;
    int target = -1;  // kKineto: which target
    KinetoSource::Event kineto{};
    GpuCounterBatch counters{};  // kCounters: one GPU's readings from one decode
  };

  void Push(Item item) {
    MutexLock lock(&mu_);
    if (finished_) return;  // a late batch or status: nobody would ever take it off the queue
    queue_.push_back(std::move(item));
    queue_cv_.Signal();
  }

  v1::CaptureInfo Snapshot() const {
    MutexLock lock(&mu_);
    return snapshot_;
  }

  bool WaitForChange(uint64_t* version, absl::Duration timeout, v1::CaptureInfo* out) const {
    MutexLock lock(&mu_);
    absl::Time deadline = absl::Now() + timeout;
    while (version_ <= *version && !Terminal(snapshot_.phase())) {
      if (WaitWithDeadline(&snapshot_cv_, &mu_, deadline)) break;
    }
    *version = version_;
    *out = snapshot_;
    return true;
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  // profd is shutting down: the capture ends now with what it has, and says why.
  void Shutdown() { Push(Item{Item::kShutdown, 0, {}, {}}); }

 private:
  struct Process {
    std::unique_ptr<ProcessSink> sink;     // through the agent: where its batches go
    std::unique_ptr<KinetoSource> kineto;  // through Kineto: the offer, then its trace
  };

  // Offers Kineto in target i its config for this capture; the answer comes back as kKineto
  // items, which its KinetoSource applies to the process's row.
  void OfferToKineto(int i, const v1::CaptureRequest& request) {
    const Target& t = targets_[i];
    Process& proc = processes_[i];
    proc.kineto = std::make_unique<KinetoSource>(
        owner_->kineto_, t.info.pid(), t.info.uid(), folder_.path(),
        owner_->options_.kineto_max_trace_bytes, owner_->options_.gzip_level);
    std::weak_ptr<Capture> self = weak_from_this();
    absl::Status offered = proc.kineto->Offer(
        KinetoSource::ConfigFor(info_, request),
        KinetoSource::OfferExpiry(info_, absl::Milliseconds(t.info.kineto().poll_period_ms()),
                                  owner_->options_.start_timeout, Now()),
        [self, i](KinetoSource::Event event) {
          if (auto capture = self.lock()) {
            capture->Push(Item{Item::kKineto, 0, {}, {}, i, event});
          }
        });
    if (!offered.ok()) {
      Push(Item{Item::kKineto, 0, {}, {}, i, {KinetoSource::Event::kExpired, Now(), 0}});
    }
  }

  // Pipeline thread, every turn: has Kineto written the trace of a process it started?
  bool CollectKineto(absl::Time now) {
    bool changed = false;
    for (size_t i = 0; i < targets_.size(); ++i) {
      if (processes_[i].kineto == nullptr) continue;
      changed |= processes_[i].kineto->Collect(now, info_.duration_ms(),
                                               owner_->options_.finish_timeout, &P(i));
    }
    return changed;
  }

  v1::ProcessCapture& P(size_t i) { return *info_.mutable_processes(static_cast<int>(i)); }

  int IndexOf(ConnectionId connection) const {
    for (size_t i = 0; i < targets_.size(); ++i) {
      if (targets_[i].connection == connection) return static_cast<int>(i);
    }
    return -1;
  }

  void Publish() {
    MutexLock lock(&mu_);
    snapshot_ = info_;
    ++version_;
    last_publish_ = Now();
    snapshot_cv_.SignalAll();
  }

  void Run() {
    while (true) {
      std::deque<Item> items;
      {
        MutexLock lock(&mu_);
        if (queue_.empty())
          WaitWithDeadline(&queue_cv_, &mu_, absl::Now() + absl::Milliseconds(100));
        items.swap(queue_);
      }
      bool changed = false;
      for (Item& item : items) changed |= Handle(item);
      const absl::Time now = Now();
      changed |= CheckDeadlines(now);
      session_.UpdatePhase(now);
      if (session_.AllTerminal()) {
        Finalize();
        ReleaseWorkingState();
        return;
      }
      if (changed || Now() - last_publish_ > absl::Milliseconds(200)) Publish();
    }
  }

  // A finished capture stays in the orchestrator (kKeepFinished of them) for GetCapture and
  // List, which read only snapshot_: the pipeline's working state goes now. So do the pages
  // malloc keeps from the capture's buffers: glibc hands freed memory back to the system only
  // from the top of each thread's arena, and a capture of 64 processes left ~90 MB of RSS
  // behind, more with every capture (tests/bench/profd_footprint_bench,
  // docs/measurements/overhead.md).
  void ReleaseWorkingState() {
    std::vector<Process>().swap(processes_);
    analysis_.reset();
    {
      MutexLock lock(&mu_);
      finished_ = true;
      std::deque<Item>().swap(queue_);
    }
    malloc_trim(0);
  }

  bool Handle(Item& item) {
    if (item.kind == Item::kKineto) {
      return processes_[item.target].kineto->Apply(
          item.kineto, info_, owner_->options_.finish_timeout, &P(item.target));
    }
    if (item.kind == Item::kCounters) return HandleCounters(item.counters);
    if (item.kind == Item::kShutdown) {
      for (size_t i = 0; i < targets_.size(); ++i) {
        if (targets_[i].connection != 0) {
          v1::DaemonMessage message;
          message.mutable_stop_capture()->set_capture_id(info_.capture_id());
          owner_->agents_->Send(targets_[i].connection, message);
        }
        session_.Fail(i, kShutdownMessage);
      }
      return true;
    }
    if (item.kind == Item::kCancel) {
      cancelled_ = true;
      session_.Cancel(Now());
      for (size_t i = 0; i < targets_.size(); ++i) {
        const Target& t = targets_[i];
        if (t.path == v1::CAPTURE_PATH_KINETO) {
          // Not taken yet: withdrawn. Taken: Kineto cannot be stopped; its trace comes at the end.
          if (!processes_[i].kineto->delivered() && !CaptureSession::Terminal(P(i).state())) {
            processes_[i].kineto->Withdraw();
            session_.Fail(i, "cancelled before Kineto took the capture");
          }
          continue;
        }
        v1::DaemonMessage message;
        message.mutable_stop_capture()->set_capture_id(info_.capture_id());
        owner_->agents_->Send(t.connection, message);
      }
      return true;
    }
    int i = IndexOf(item.connection);
    if (i < 0) return false;
    v1::ProcessCapture& p = P(i);
    Process& proc = processes_[i];
    switch (item.kind) {
      case Item::kBatch: {
        if (p.state() == v1::CAPTURE_STATE_FAILED) return false;  // given up on: drop late data
        // The agent stops at max_events itself; one that does not is cut here, before its
        // batch costs a parse, so a capture's trace (and the analysis of it) stays bounded.
        if (max_events_ != 0 && p.events() >= max_events_) {
          p.set_truncated(true);
          return false;
        }
        // One arena per batch: the batch's many small messages go in one allocation and leave
        // in one, and nothing of it outlives this call.
        google::protobuf::Arena arena;
        auto* batch = google::protobuf::Arena::CreateMessage<v1::EventBatch>(&arena);
        absl::string_view bytes = item.batch.bytes();
        if (!batch->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          return FailProcess(i, absl::StrCat("the agent sent an event batch that is not a valid "
                                             "EventBatch (",
                                             bytes.size(), " bytes); the trace stops there"));
        }
        if (std::string over = proc.sink->ChargeStrings(*batch); !over.empty()) {
          return FailProcess(i, over);
        }
        // profd keeps to max_events itself, to the event: an agent may send a whole batch past it.
        if (proc.sink->Cut(batch, max_events_)) p.set_truncated(true);
        WriteBatch(i, *batch, bytes);
        return false;
      }
      case Item::kGone:
        return session_.AgentGone(i);
      case Item::kStatus: {
        const v1::CaptureStatus& s = item.status;
        if (!session_.ApplyStatus(i, s, proc.sink->dropped_records())) return false;
        if (s.state() == v1::CAPTURE_STATE_FINISHED && s.events() != p.events()) {
          LogWarning(kComponent, "capture %s pid %u: agent sent %u events, %u arrived",
                     info_.capture_id(), p.pid(), s.events(), p.events());
        }
        return true;
      }
      case Item::kCancel:
      case Item::kKineto:
      case Item::kShutdown:
      case Item::kCounters:
        break;
    }
    return false;
  }

  // The GPUs' hardware counters for the window (--gpu-metrics): the sampler hands each decode's
  // readings to this capture's queue; they go to every process that sees that GPU.
  void BeginGpuMetrics() {
    v1::GpuMetrics& m = *info_.mutable_gpu_metrics();
    std::string why = "profd was started without a GPU counter sampler";
    if (owner_->options_.begin_gpu_metrics && owner_->options_.begin_gpu_metrics(
                                                  absl::Nanoseconds(m.interval_ns()),
                                                  [this](GpuCounterBatch batch) {
                                                    Item item{Item::kCounters, 0, {}, {}};
                                                    item.counters = std::move(batch);
                                                    Push(std::move(item));
                                                  },
                                                  &why)) {
      gpu_metrics_active_ = true;
      return;
    }
    m.set_error(why);
    LogWarning(kComponent, "capture %s: no GPU counters: %s", info_.capture_id(), why);
  }

  // Stops the sampling; its last readings are then in the queue.
  void EndGpuMetrics() {
    if (!gpu_metrics_active_) return;
    gpu_metrics_active_ = false;
    std::string why = owner_->options_.end_gpu_metrics();
    if (info_.gpu_metrics().samples() == 0 && why.empty()) why = "the GPUs gave no samples";
    if (!why.empty() && info_.gpu_metrics().error().empty()) {
      info_.mutable_gpu_metrics()->set_error(why);
    }
  }

  bool HandleCounters(const GpuCounterBatch& batch) {
    for (size_t i = 0; i < processes_.size(); ++i) {
      if (!processes_[i].sink) continue;
      if (absl::Status s = processes_[i].sink->AddCounters(batch);
          !s.ok() && write_error_.empty()) {
        write_error_ = std::string(s.message());
        LogError(kComponent, "capture %s: %s", info_.capture_id(), write_error_);
      }
    }
    v1::GpuMetrics& m = *info_.mutable_gpu_metrics();
    m.set_samples(m.samples() + batch.readings.size());
    if (std::find(gpus_sampled_.begin(), gpus_sampled_.end(), batch.uuid) == gpus_sampled_.end()) {
      gpus_sampled_.push_back(batch.uuid);
      m.set_gpus(static_cast<uint32_t>(gpus_sampled_.size()));
    }
    return false;
  }

  // Gives up on one process of the capture: its trace keeps what came before.
  bool FailProcess(int i, const std::string& why) {
    if (!session_.Fail(i, why)) return false;
    LogWarning(kComponent, "capture %s pid %u: %s", info_.capture_id(), P(i).pid(), why);
    return true;
  }

  // One batch into process i's sink; the first trace that fails to write fails the capture.
  void WriteBatch(int i, const v1::EventBatch& batch, absl::string_view bytes) {
    v1::ProcessCapture& p = P(i);
    ProcessSink& sink = *processes_[i].sink;
    absl::Status s = sink.Write(batch, bytes, write_error_.empty());
    if (!s.ok() && write_error_.empty()) {
      write_error_ = std::string(s.message());
      LogError(kComponent, "capture %s: %s", info_.capture_id(), write_error_);
    }
    p.set_events(sink.events());
    p.set_dropped_records(sink.dropped_records());
  }

  // The agents' deadlines, kept by the session; Kineto's, kept here (CollectKineto).
  bool CheckDeadlines(absl::Time now) {
    bool changed = CollectKineto(now);
    changed |= session_.CheckDeadlines(now);
    return changed;
  }

  // The end of the capture: its traces closed, its report, summary.json and manifest.json
  // written (or, when a file failed to write, nothing of it kept), then the store, the registry
  // and the counts.
  void Finalize() {
    info_.set_phase(v1::CAPTURE_PHASE_FINISHING);
    Publish();
    CloseTraces();
    uint64_t dropped = 0;
    for (const v1::ProcessCapture& p : info_.processes()) {
      dropped = SaturatingAdd(dropped, p.dropped_records());
    }
    info_.mutable_summary()->set_dropped_records(dropped);

    session_.Conclude(cancelled_, write_error_, Now());

    // A file that failed to write is cut short: nothing of the capture stays, rather than a
    // trace that looks whole (issue 13: a full disk left a truncated trace listed as fine).
    std::string failed = write_error_.empty() ? "" : info_.message();
    if (failed.empty() && info_.files_size() > 0) {
      info_.set_location(folder_.path());
      absl::StatusOr<analysis::Report> report = MakeReport();
      if (!report.ok()) {
        LogWarning(kComponent, "capture %s: no bottleneck report: %s", info_.capture_id(),
                   report.status().message());
      }
      if (absl::Status s = CloseCaptureFolder(report, dropped, owner_->options_, folder_, &info_);
          !s.ok()) {
        failed = absl::StrCat("writing the capture's files failed: ", s.message(),
                              "; nothing of the capture was kept (profd --capture_dir)");
      }
    }
    if (!failed.empty()) {
      if (absl::Status removed = folder_.Remove(); !removed.ok()) {
        LogError(kComponent, "capture %s: %s", info_.capture_id(), removed.message());
      }
      info_.clear_files();
      info_.clear_location();
      info_.set_phase(v1::CAPTURE_PHASE_FAILED);
      info_.set_message(failed);
    } else if (info_.files_size() == 0) {
      folder_.RemoveIfEmpty();  // no process sent an event: no folder
    }
    Conclude();
  }

  // The counters' last readings, then each process's trace closed (its footer says what was
  // dropped or cut) and listed with Kineto's copies in the capture's files.
  void CloseTraces() {
    if (gpu_metrics_active_) {
      EndGpuMetrics();
      std::deque<Item> items;
      {
        MutexLock lock(&mu_);
        items.swap(queue_);
      }
      for (Item& item : items) {
        if (item.kind == Item::kCounters) HandleCounters(item.counters);
      }
    }
    for (size_t i = 0; i < targets_.size(); ++i) {
      v1::ProcessCapture& p = P(i);
      Process& proc = processes_[i];
      if (proc.sink->has_trace()) {
        absl::Status s =
            proc.sink->FinishTrace(p.dropped_records(), p.truncated(),
                                   p.state() == v1::CAPTURE_STATE_FAILED ? p.message() : "");
        if (!s.ok() && write_error_.empty()) write_error_ = std::string(s.message());
        *info_.add_files() = folder_.Describe(proc.sink->file_name(),
                                              TraceFormatOf(format_).manifest_format, p.pid());
      }
      if (proc.kineto && proc.kineto->collected()) {
        // Kineto's own JSON, as the process wrote it (gzip): CPU operators, kernels, flows.
        *info_.add_files() =
            folder_.Describe(proc.kineto->file_name(), kKinetoTraceManifestFormat, p.pid());
      }
    }
  }

  // The seeds' bottleneck analysis, made as the batches arrived: summary.json is the report
  // `profctl report` prints, and the capture's summary comes from it (one definition of the
  // window, events, busy share and kernel table: docs/ANALYSIS.md). A Kineto trace arrives
  // whole, written by the process: the capture's files are then read back and analysed.
  absl::StatusOr<analysis::Report> MakeReport() {
    uint64_t kineto_events = 0;
    bool kineto = false;
    for (const Process& proc : processes_) {
      if (proc.kineto == nullptr || !proc.kineto->collected()) continue;
      kineto = true;
      kineto_events = SaturatingAdd(kineto_events, proc.kineto->trace_events());
    }
    if (!kineto) {
      absl::StatusOr<analysis::Report> report = analysis_->Finish();
      if (report.ok()) NoteRecordedParts(&*report);
      return report;
    }
    std::vector<std::string> paths;
    for (const auto& f : info_.files()) paths.push_back(f.path());
    return KinetoSource::Analyze(paths, kineto_events, owner_->options_.kineto_max_exact_events);
  }

  // --before: which part of each process's window came from its flight recorder.
  void NoteRecordedParts(analysis::Report* report) const {
    for (const v1::ProcessCapture& p : info_.processes()) {
      if (p.recorded_from_unix_ns() <= 0) continue;
      const double before_s = (info_.requested_unix_ns() - p.recorded_from_unix_ns()) / 1e9;
      report->notes.push_back(absl::StrFormat(
          "pid %u: its events of the %.2f s before the request come from its flight recorder "
          "(--before %.3gs): kernels, copies, memsets and NVTX ranges; its CUDA API calls and "
          "synchronizations begin at the request",
          p.pid(), before_s, info_.before_ms() / 1e3));
    }
  }

  // The capture has ended: its processes are free for the next one, and it is counted.
  void Conclude() {
    for (const Target& t : targets_) {
      if (t.connection != 0) owner_->registry_->SetCapturing(t.connection, "");
    }
    LogInfo(kComponent, "capture %s %s: %u process(es), %u events, %s", info_.capture_id(),
            v1::CapturePhase_Name(info_.phase()), targets_.size(), info_.summary().events(),
            info_.location().empty() ? "no trace" : info_.location());
    if (owner_->options_.on_finished) owner_->options_.on_finished(info_);
    {
      MutexLock lock(&owner_->mutex_);
      if (info_.phase() == v1::CAPTURE_PHASE_FAILED) {
        ++owner_->failed_;
      } else {
        ++owner_->completed_;
      }
    }
    Publish();
  }

  CaptureOrchestrator* const owner_;
  // The phase and the processes' states; info_ is its record (the pipeline thread's working copy
  // of what Publish shows).
  CaptureSession session_;
  v1::CaptureInfo& info_;
  const std::vector<Target> targets_;
  const uint64_t max_events_;
  const TraceFormat format_;
  CaptureFolder folder_;  // the files, their sizes and digests
  std::vector<Process> processes_;
  std::unique_ptr<CaptureAnalysis> analysis_;  // the report, made as the batches arrive
  std::string write_error_;
  bool cancelled_ = false;
  bool gpu_metrics_active_ = false;        // the sampler is sampling for this capture
  std::vector<std::string> gpus_sampled_;  // UUIDs that gave readings
  std::thread thread_;

  mutable absl::Mutex mu_;
  mutable absl::CondVar queue_cv_;
  mutable absl::CondVar snapshot_cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the pipeline thread has ended
  v1::CaptureInfo snapshot_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time last_publish_ = absl::InfinitePast();
};

CaptureOrchestrator::CaptureOrchestrator(CaptureOptions options, AgentRegistry* registry,
                                         AgentLink* agents, const CaptureTargets* catalog,
                                         kineto::KinetoIpcServer* kineto)
    : options_(std::move(options)),
      registry_(registry),
      agents_(agents),
      catalog_(catalog),
      kineto_(kineto) {}

// "" when no running capture has pid among its targets, else why it is busy.
std::string CaptureOrchestrator::RunningCaptureOf(uint32_t pid) const {
  for (const v1::CaptureInfo& running : List(0)) {
    if (Terminal(running.phase())) continue;
    for (const v1::ProcessCapture& p : running.processes()) {
      if (p.pid() != pid) continue;
      std::string ends;
      if (running.started_unix_ns()) {
        absl::Time end = absl::FromUnixNanos(running.started_unix_ns()) +
                         absl::Milliseconds(running.duration_ms());
        ends = absl::StrCat(", which ends in about ",
                            absl::FormatDuration(absl::Trunc(end - Now(), absl::Seconds(1))));
      }
      return absl::StrCat("already being captured by ", running.capture_id(), ends,
                          ": retry then, or `profctl cancel ", running.capture_id(), "`");
    }
  }
  return "";
}

CaptureOrchestrator::~CaptureOrchestrator() {
  std::vector<std::shared_ptr<Capture>> all;
  {
    MutexLock lock(&mutex_);
    for (auto& [id, c] : captures_) all.push_back(c);
  }
  // Shutting down: agents will not be heard from again, so every running capture ends with what
  // it has (its trace is still written).
  for (auto& c : all) c->Shutdown();
  for (auto& c : all) c->Join();
}

void CaptureOrchestrator::Shutdown() {
  std::vector<std::shared_ptr<Capture>> all;
  {
    MutexLock lock(&mutex_);
    for (auto& [id, c] : captures_) all.push_back(c);
  }
  for (auto& c : all) c->Shutdown();
  for (auto& c : all) c->Join();
}

absl::StatusOr<std::string> CaptureOrchestrator::Start(const v1::CaptureRequest& request,
                                                       const Admission& admission) {
  absl::Time now = Now();
  absl::StatusOr<std::vector<CaptureTarget>> targets = CheckRequest(request, admission, now);
  if (!targets.ok()) return targets.status();
  // Where the trace goes: refuse now rather than fail at the end.
  if (absl::Status usable = CheckCaptureFolder(); !usable.ok()) return usable;

  // In which format: the request was checked above.
  const TraceFormat format = request.trace_format().empty()
                                 ? options_.trace_format
                                 : TraceFormatNamed(request.trace_format())->format;
  v1::CaptureInfo info = DescribeRequest(request, admission, now);
  uint64_t max_events = options_.max_events;
  if (request.max_events() != 0) max_events = std::min(max_events, request.max_events());
  std::string id = info.capture_id();
  auto capture = std::make_shared<Capture>(this, std::move(info), *std::move(targets), max_events,
                                           format, options_.capture_dir + "/" + id);
  Remember(id, capture);
  capture->Launch(request);
  if (request.fleet_id().empty()) {
    LogInfo(kComponent, "capture %s requested: %d ms", id, request.duration_ms());
  } else {
    // A node's part of a capture across nodes: its log says which, and which pods.
    LogInfo(kComponent, "capture %s requested: %d ms, part of fleet capture %s (pods %s)", id,
            request.duration_ms(), request.fleet_id(), absl::StrJoin(request.pods(), ", "));
  }
  return id;
}

absl::StatusOr<std::vector<CaptureTarget>> CaptureOrchestrator::CheckRequest(
    const v1::CaptureRequest& request, const Admission& admission, absl::Time now) const {
  // What, for how long, when and how written (the same check profctl makes), then this
  // profd's own limit.
  if (absl::Status bad = CheckCaptureRequest(request, now); !bad.ok()) return bad;
  if (absl::Milliseconds(request.duration_ms()) > options_.max_duration) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration ", absl::FormatDuration(absl::Milliseconds(request.duration_ms())),
                     " is over this profd's limit of ", absl::FormatDuration(options_.max_duration),
                     " (profd --max_capture_duration)"));
  }
  absl::StatusOr<std::vector<CaptureTarget>> resolved =
      catalog_->Resolve(request, [this](uint32_t pid) { return RunningCaptureOf(pid); });
  if (!resolved.ok()) return resolved.status();
  std::vector<CaptureTarget> targets = *std::move(resolved);
  if (admission.check) {
    if (absl::Status allowed = admission.check(targets); !allowed.ok()) return allowed;
  }
  for (const CaptureTarget& t : targets) {
    if (t.path == v1::CAPTURE_PATH_KINETO && kineto_ == nullptr) {
      return absl::FailedPreconditionError("profd serves no Kineto socket (--kineto_socket_dir)");
    }
  }
  return targets;
}

absl::Status CaptureOrchestrator::CheckCaptureFolder() const {
  std::error_code ec;
  std::filesystem::create_directories(options_.capture_dir, ec);
  struct statvfs fs;
  if (statvfs(options_.capture_dir.c_str(), &fs) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("capture folder ", options_.capture_dir, " is not usable: ", ec.message()));
  }
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < options_.min_free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("only ", free_bytes >> 20, " MiB free in ", options_.capture_dir,
                     ": free some space or point profd --capture_dir elsewhere"));
  }
  if (options_.check_space) {
    if (absl::Status room = options_.check_space(); !room.ok()) return room;
  }
  return absl::OkStatus();
}

v1::CaptureInfo CaptureOrchestrator::DescribeRequest(const v1::CaptureRequest& request,
                                                     const Admission& admission,
                                                     absl::Time now) const {
  // When: the request was checked.
  const absl::Time start_at = request.start_at_unix_ns() != 0
                                  ? absl::FromUnixNanos(request.start_at_unix_ns())
                                  : now + absl::Milliseconds(request.delay_ms());
  v1::CaptureInfo info;
  info.set_capture_id(NewCaptureId(options_.hostname, now));
  info.set_phase(v1::CAPTURE_PHASE_PENDING);
  info.set_requested_unix_ns(absl::ToUnixNanos(now));
  info.set_start_at_unix_ns(absl::ToUnixNanos(start_at));
  info.set_duration_ms(request.duration_ms());
  info.set_label(request.label());
  if (request.has_alert()) *info.mutable_alert() = request.alert();
  info.set_fleet_id(request.fleet_id());
  info.set_requested_by(admission.requested_by);
  info.set_reason(request.reason());
  info.set_before_ms(request.before_ms());
  info.set_hostname(options_.hostname);
  for (int kind : request.kinds()) info.add_kinds(static_cast<v1::ActivityKind>(kind));
  if (request.gpu_metrics()) {
    // At most kMaxCounterSamples per GPU: a long capture samples less often (bounded memory).
    absl::Duration interval = request.gpu_metrics_interval_ns() > 0
                                  ? absl::Nanoseconds(request.gpu_metrics_interval_ns())
                                  : kDefaultCounterInterval;
    interval = std::max(interval, absl::Milliseconds(request.duration_ms()) / kMaxCounterSamples);
    info.mutable_gpu_metrics()->set_interval_ns(absl::ToInt64Nanoseconds(interval));
  }
  return info;
}

void CaptureOrchestrator::Remember(const std::string& id, std::shared_ptr<Capture> capture) {
  MutexLock lock(&mutex_);
  captures_[id] = std::move(capture);
  order_.push_back(id);
  // Forget the oldest finished captures (their folders stay in the store).
  while (order_.size() > kKeepFinished) {
    auto old = captures_.find(order_.front());
    if (old != captures_.end() && !Terminal(old->second->Snapshot().phase())) break;
    if (old != captures_.end()) {
      old->second->Join();
      captures_.erase(old);
    }
    order_.pop_front();
  }
}

std::shared_ptr<CaptureOrchestrator::Capture> CaptureOrchestrator::Find(
    const std::string& id) const {
  MutexLock lock(&mutex_);
  auto it = captures_.find(id);
  return it == captures_.end() ? nullptr : it->second;
}

std::optional<v1::CaptureInfo> CaptureOrchestrator::Get(const std::string& id) const {
  auto capture = Find(id);
  if (!capture) {
    MutexLock lock(&mutex_);
    for (const v1::CaptureInfo& r : recovered_) {
      if (r.capture_id() == id) return r;
    }
    return std::nullopt;
  }
  return capture->Snapshot();
}

bool CaptureOrchestrator::WaitForChange(const std::string& id, uint64_t* version,
                                        absl::Duration timeout, v1::CaptureInfo* out) const {
  auto capture = Find(id);
  if (!capture) return false;
  return capture->WaitForChange(version, timeout, out);
}

std::vector<v1::CaptureInfo> CaptureOrchestrator::List(size_t limit) const {
  std::vector<std::shared_ptr<Capture>> recent;
  std::vector<v1::CaptureInfo> recovered;
  {
    MutexLock lock(&mutex_);
    for (auto it = order_.rbegin(); it != order_.rend() && (limit == 0 || recent.size() < limit);
         ++it) {
      auto c = captures_.find(*it);
      if (c != captures_.end()) recent.push_back(c->second);
    }
    for (auto it = recovered_.rbegin();
         it != recovered_.rend() && (limit == 0 || recent.size() + recovered.size() < limit);
         ++it) {
      recovered.push_back(*it);
    }
  }
  std::vector<v1::CaptureInfo> out;
  for (auto& c : recent) out.push_back(c->Snapshot());
  for (auto& r : recovered) out.push_back(std::move(r));
  return out;
}

absl::StatusOr<v1::CaptureInfo> CaptureOrchestrator::Cancel(const std::string& id) {
  auto capture = Find(id);
  if (!capture) {
    if (std::optional<v1::CaptureInfo> recovered = Get(id)) return *recovered;
    return absl::NotFoundError(absl::StrCat("no capture ", id, " on this profd"));
  }
  v1::CaptureInfo info = capture->Snapshot();
  if (Terminal(info.phase())) return info;
  capture->Push(Capture::Item{Capture::Item::kCancel, 0, {}, {}});
  return capture->Snapshot();
}

CaptureOrchestrator::Counts CaptureOrchestrator::counts() const {
  Counts c;
  std::vector<std::shared_ptr<Capture>> all;
  {
    MutexLock lock(&mutex_);
    c.completed = completed_;
    c.failed = failed_;
    for (auto& [id, capture] : captures_) all.push_back(capture);
  }
  for (auto& capture : all) c.running += Terminal(capture->Snapshot().phase()) ? 0 : 1;
  return c;
}

std::shared_ptr<CaptureOrchestrator::Capture> CaptureOrchestrator::FindByConnection(
    ConnectionId connection) const {
  MutexLock lock(&mutex_);
  // Newest first: a connection is in at most one running capture.
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    auto c = captures_.find(*it);
    if (c != captures_.end() && c->second->Targets(connection)) return c->second;
  }
  return nullptr;
}

void CaptureOrchestrator::OnCaptureStatus(ConnectionId connection, uint32_t pid,
                                          const v1::CaptureStatus& status) {
  auto capture = Find(status.capture_id());
  if (!capture || !capture->Targets(connection)) {
    LogWarning(kComponent, "status for unknown capture %s from pid %u", status.capture_id(), pid);
    return;
  }
  capture->Push(Capture::Item{Capture::Item::kStatus, connection, status, {}});
}

void CaptureOrchestrator::OnEventBatch(ConnectionId connection, uint32_t pid,
                                       AgentEventBatch batch) {
  auto capture = Find(batch.capture_id());
  if (!capture || !capture->Targets(connection)) return;
  capture->Push(Capture::Item{Capture::Item::kBatch, connection, {}, std::move(batch)});
}

void CaptureOrchestrator::OnAgentGone(ConnectionId connection, uint32_t pid) {
  if (auto capture = FindByConnection(connection)) {
    capture->Push(Capture::Item{Capture::Item::kGone, connection, {}, {}});
  }
}

}  // namespace profd

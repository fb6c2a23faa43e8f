#include "agent/cupti/cupti_capture.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "agent/cuda_devices.h"
#include "agent/cupti/cupti_broker.h"
#include "agent/cupti/cupti_library.h"
#include "agent/log.h"

namespace profagent {
namespace {

constexpr size_t kPoolBuffers = 16;
constexpr size_t kBufferBytes = 8u << 20;
// Batches are cut at this size (or at ActivityConverter::kBatchRecords events) so frames stay
// far below profd's limit for a capture's frames (4 MiB by default).
constexpr size_t kBatchBytes = 1u << 20;
constexpr uint32_t kDefaultFlushMs = 500;

std::atomic<CuptiCapture*> g_active{nullptr};

uint64_t Now(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

const char* ApiName(CUpti_CallbackDomain domain, uint32_t cbid) {
  const CuptiLibrary& cupti = LoadCupti();
  const char* name = nullptr;
  if (cupti.loaded && cupti.GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS) return name;
  return nullptr;
}

struct KindInfo {
  wire::ActivityKind kind;
  CUpti_ActivityKind cupti;
};
constexpr KindInfo kKinds[] = {
    {wire::ActivityKind::kKernel, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
    {wire::ActivityKind::kMemcpy, CUPTI_ACTIVITY_KIND_MEMCPY},
    {wire::ActivityKind::kMemset, CUPTI_ACTIVITY_KIND_MEMSET},
    {wire::ActivityKind::kRuntime, CUPTI_ACTIVITY_KIND_RUNTIME},
    {wire::ActivityKind::kSynchronization, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},
    {wire::ActivityKind::kDriver, CUPTI_ACTIVITY_KIND_DRIVER},
    {wire::ActivityKind::kNvtx, CUPTI_ACTIVITY_KIND_MARKER},
    {wire::ActivityKind::kMemory, CUPTI_ACTIVITY_KIND_MEMORY2},
    {wire::ActivityKind::kOverhead, CUPTI_ACTIVITY_KIND_OVERHEAD},
};

// The CUPTI activity kinds for the kinds asked for; none asked for: the default set, what the
// seeds' workflow reads.
std::vector<CUpti_ActivityKind> CuptiKindsFor(std::vector<wire::ActivityKind> kinds) {
  if (kinds.empty()) {
    kinds = {wire::ActivityKind::kKernel, wire::ActivityKind::kMemcpy, wire::ActivityKind::kMemset,
             wire::ActivityKind::kRuntime, wire::ActivityKind::kSynchronization};
  }
  std::vector<CUpti_ActivityKind> wanted;
  for (wire::ActivityKind kind : kinds) {
    for (const KindInfo& info : kKinds) {
      if (info.kind == kind) wanted.push_back(info.cupti);
    }
  }
  return wanted;
}

// CUPTI counts the records it dropped for want of a buffer until they are read: those of the
// time before this capture (a record completing after the previous capture stopped, another
// profiler's session) are not this capture's, and were charged to it (one "dropped record"
// in back-to-back captures). Read them now; the capture counts from here.
void ForgetEarlierDrops(const CuptiLibrary& cupti, const std::string& id) {
  if (cupti.ActivityGetNumDroppedRecords != nullptr) {
    size_t before = 0;
    cupti.ActivityGetNumDroppedRecords(nullptr, 0, &before);
    if (before > 0) {
      Log(LogLevel::kInfo, "capture %s: %zu records CUPTI dropped before it began are not its own",
          id.c_str(), before);
    }
  }
}

}  // namespace

uint32_t CuptiCapture::CuptiVersion() {
  // Never load CUPTI just to report its version: an idle agent keeps CUPTI out of the process.
  return cupti_version_.load();
}

void CuptiCapture::Send(const wire::CaptureStatus& status) {
  // profd closes a connection whose status text has control characters or passes 4096 bytes
  // (daemon/agents/agent_message_limits.h); CUPTI's and dlerror's texts are ours to tidy.
  wire::CaptureStatus tidy = status;
  for (char& c : tidy.message) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (tidy.message.size() > 4096) {
    size_t cut = 4096;
    while (cut > 0 && (static_cast<unsigned char>(tidy.message[cut]) & 0xc0) == 0x80) --cut;
    tidy.message.resize(cut);
  }
  std::string message;
  wire::EncodeCaptureStatus(tidy, &message);
  agent_->Enqueue(std::move(message));
}

void CuptiCapture::Fail(const std::string& capture_id, wire::CaptureError error,
                        const std::string& message) {
  wire::CaptureStatus status;
  status.capture_id = capture_id;
  status.state = wire::CaptureState::kFailed;
  status.error = error;
  status.message = message;
  Send(status);
  Log(LogLevel::kWarning, "capture %s failed: %s", capture_id.c_str(), message.c_str());
}

void CuptiCapture::OnStartCapture(const wire::StartCapture& request) {
  if (running_.load()) {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    Fail(request.capture_id, wire::CaptureError::kAlreadyCapturing,
         "capture " + current_id_ + " is already running in this process");
    return;
  }
  if (thread_.joinable()) thread_.join();  // the previous capture has finished
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_requested_ = false;
    current_id_ = request.capture_id;
  }
  running_.store(true);
  thread_ = std::thread([this, request] { Run(request); });
}

void CuptiCapture::OnStopCapture(const std::string& capture_id) {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  if (capture_id.empty() || capture_id == current_id_) {
    stop_requested_ = true;
    stop_cv_.notify_all();
  }
}

void CuptiCapture::OnDisconnected() { OnStopCapture(""); }

void CuptiCapture::Run(wire::StartCapture request) {
  pthread_setname_np(pthread_self(), "profagent-cap");
  const std::string& id = request.capture_id;
  // The flight recorder lets CUPTI go for the capture and records again once it is over.
  auto finish = [this] {
    recorder_.Resume();
    running_.store(false);
  };

  // 1. A process that never initialized CUDA has nothing to capture: say so before touching CUPTI.
  CudaDriverView cuda = QueryCudaDevices();
  if (!cuda.driver_loaded || !cuda.initialized || cuda.devices.empty()) {
    Fail(id, wire::CaptureError::kNoCudaDevice,
         !cuda.driver_loaded ? "the process has not loaded the CUDA driver (libcuda.so.1): it has "
                               "no CUDA work to capture"
         : !cuda.initialized ? "the process has not initialized CUDA yet (cuInit)"
                             : "the process sees no CUDA device (CUDA_VISIBLE_DEVICES?)");
    return finish();
  }
  // 2. CUPTI, loaded on first use.
  const CuptiLibrary& cupti = LoadCupti();
  if (!cupti.loaded) {
    Fail(id, wire::CaptureError::kCuptiUnavailable, "cannot load CUPTI: " + cupti.error);
    return finish();
  }
  cupti_version_.store(cupti.version);
  // 3. With the flight recorder on, it records until the start asked for, then hands over what
  // it holds from before_ms before the request.
  wire::RecorderState recorder;
  recorder_.Report(&recorder);
  if (recorder.on) WaitForStart(request);
  uint64_t asked_from = UINT64_MAX;
  if (request.before_ms > 0) {
    uint64_t requested =
        request.requested_realtime_ns ? request.requested_realtime_ns : Now(CLOCK_REALTIME);
    uint64_t before_ns = request.before_ms * 1000000ull;
    asked_from = requested > before_ns ? requested - before_ns : 1;
  }
  recorded_ = recorder_.Suspend(asked_from);
  if (request.before_ms == 0) recorded_ = {};
  // 4. Claim CUPTI through the broker, which shares it with the process's other CUPTI clients.
  // If torch.profiler (Kineto) is tracing now, enabling activities would steal its records:
  // refused. If a tool took CUPTI before the agent could share it (Nsight Systems,
  // compute-sanitizer), refused as well.
  CuptiBroker& broker = CuptiBroker::Get();
  {
    wire::CaptureError error = wire::CaptureError::kNone;
    std::string message;
    if (!broker.ClaimForCapture(&error, &message)) {
      Fail(id, error, message);
      recorded_ = {};
      return finish();
    }
  }
  StartConverter(request, cuda.devices, recorded_.chunks.empty() ? 0 : recorded_.from_ns);

  // 5. A common start across processes and nodes: wait for the wall-clock time asked for.
  if (!recorder.on) WaitForStart(request);

  // 6. Enable.
  uint64_t enabled_at = 0;
  if (!EnableTracing(cupti, broker, request, &enabled_at)) return finish();
  QueueRecorded();

  // 7. Run for the duration, flushing completed buffers as we go so profd gets the trace
  // while it is being made and the process never holds it all.
  RunForDuration(cupti, request);

  // 8. Disable, hand back every buffer, send what is left, let CUPTI go. Cut short, the broker
  // already did the first two when the other profiler started.
  EndCapture(broker, request, enabled_at);
  finish();
}

void CuptiCapture::WaitForStart(const wire::StartCapture& request) {
  if (request.start_at_realtime_ns <= Now(CLOCK_REALTIME)) return;
  std::unique_lock<std::mutex> lock(stop_mutex_);
  stop_cv_.wait_for(lock,
                    std::chrono::nanoseconds(request.start_at_realtime_ns - Now(CLOCK_REALTIME)),
                    [this] { return stop_requested_; });
}

void CuptiCapture::StartConverter(const wire::StartCapture& request,
                                  const std::vector<wire::DeviceInfo>& devices,
                                  uint64_t skip_before_ns) {
  {
    std::lock_guard<std::mutex> lock(convert_mutex_);
    converter_ =
        std::make_unique<ActivityConverter>(request.capture_id, &ApiName, request.max_events);
    converter_->SkipBefore(skip_before_ns);
    devices_ = devices;
    first_batch_ = true;
    dropped_ = dropped_total_ = lost_events_ = batches_ = 0;
  }
  pool_.Allocate(kPoolBuffers, kBufferBytes);
  {
    std::lock_guard<std::mutex> lock(completed_mutex_);
    converter_stop_ = false;
    completed_.clear();
  }
  dropped_pending_.store(0);
  converter_thread_ = std::thread([this] { ConvertLoop(); });
  g_active.store(this);
}

void CuptiCapture::QueueRecorded() {
  if (recorded_.chunks.empty()) return;
  {
    std::lock_guard<std::mutex> lock(completed_mutex_);
    for (const auto& chunk : recorded_.chunks) {
      // CUPTI's record walk only reads the buffer.
      auto* bytes = reinterpret_cast<uint8_t*>(const_cast<char*>(chunk->records.data()));
      completed_.push_back({bytes, chunk->records.size(), /*pooled=*/false});
    }
  }
  completed_cv_.notify_one();
}

void CuptiCapture::StopConverter() {
  {
    std::lock_guard<std::mutex> lock(completed_mutex_);
    converter_stop_ = true;
  }
  completed_cv_.notify_all();
  converter_thread_.join();
  recorded_ = {};
}

void CuptiCapture::AbandonStart(CuptiBroker& broker) {
  g_active.store(nullptr);
  StopConverter();
  broker.ReleaseCapture();
  pool_.Release();
}

bool CuptiCapture::EnableTracing(const CuptiLibrary& cupti, CuptiBroker& broker,
                                 const wire::StartCapture& request, uint64_t* enabled_at) {
  const std::string& id = request.capture_id;
  std::vector<CUpti_ActivityKind> wanted = CuptiKindsFor(request.kinds);
  ForgetEarlierDrops(cupti, id);
  // If another profiler in the process starts tracing while this capture runs, the broker cuts
  // the capture short (after flushing its buffers to us) and OnCutShort wakes this thread.
  broker.SetCutShortListener(&CuptiCapture::OnCutShort, this);
  std::vector<CUpti_ActivityKind> enabled;
  std::string warnings;
  {
    wire::CaptureError error = wire::CaptureError::kNone;
    std::string message;
    if (!broker.StartAgentTracing(wanted, &CuptiCapture::BufferRequested,
                                  &CuptiCapture::BufferCompleted, &enabled, &warnings, &error,
                                  &message)) {
      AbandonStart(broker);
      Fail(id, error, message);
      return false;
    }
  }
  *enabled_at = Now(CLOCK_REALTIME);
  clock_[0] = *enabled_at;
  clock_[1] = Now(CLOCK_MONOTONIC);
  clock_[2] = cupti.GetTimestamp ? (cupti.GetTimestamp(&clock_[2]), clock_[2]) : 0;

  if (enabled.empty()) {
    AbandonStart(broker);
    Fail(id, wire::CaptureError::kCuptiFailed, "no activity kind could be enabled: " + warnings);
    return false;
  }
  wire::CaptureStatus status;
  status.capture_id = id;
  status.state = wire::CaptureState::kStarted;
  status.enabled_realtime_ns = *enabled_at;
  status.message = warnings;
  if (request.before_ms > 0) {
    if (!recorded_.chunks.empty()) status.recorded_from_realtime_ns = recorded_.from_ns;
    std::string recorder = recorded_.note.empty()
                               ? "the flight recorder is off in this process (profctl recorder "
                                 "on): nothing from before the request"
                               : recorded_.note;
    status.message = status.message.empty() ? recorder : status.message + "; " + recorder;
  }
  Send(status);
  Log(LogLevel::kInfo, "capture %s: CUPTI enabled for %llu ms", id.c_str(),
      static_cast<unsigned long long>(request.duration_ms));
  return true;
}

void CuptiCapture::RunForDuration(const CuptiLibrary& cupti, const wire::StartCapture& request) {
  uint64_t flush_ms = request.flush_interval_ms ? request.flush_interval_ms : kDefaultFlushMs;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(request.duration_ms);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(stop_mutex_);
      auto wake = std::min(deadline,
                           std::chrono::steady_clock::now() + std::chrono::milliseconds(flush_ms));
      stop_cv_.wait_until(lock, wake, [this] { return stop_requested_; });
      if (stop_requested_ || std::chrono::steady_clock::now() >= deadline) break;
    }
    // No lock of ours is held here: CUPTI calls BufferCompleted under its own lock.
    cupti.ActivityFlushAll(0);
    std::lock_guard<std::mutex> lock(convert_mutex_);
    if (converter_->truncated()) break;
  }
}

void CuptiCapture::EndCapture(CuptiBroker& broker, const wire::StartCapture& request,
                              uint64_t enabled_at) {
  CuptiBroker::StopResult stop = broker.StopAgentTracing();
  uint64_t disabled_at = std::max(
      enabled_at, stop.disabled_realtime_ns ? stop.disabled_realtime_ns : Now(CLOCK_REALTIME));
  g_active.store(nullptr);
  broker.ReleaseCapture();
  // Every buffer is now queued; the converter drains the queue, then ends.
  StopConverter();

  wire::CaptureStatus status = SendRemainingEvents();
  pool_.Release();
  status.capture_id = request.capture_id;
  status.state = wire::CaptureState::kFinished;
  status.enabled_realtime_ns = enabled_at;
  status.disabled_realtime_ns = disabled_at;
  if (lost_events_ > 0) {
    status.message =
        std::to_string(lost_events_) + " events lost: the connection to profd could not keep up";
  }
  if (stop.cut_short) {
    char ran[64];
    std::snprintf(ran, sizeof(ran), "%.2f s of %.2f s",
                  static_cast<double>(disabled_at - enabled_at) / 1e9,
                  static_cast<double>(request.duration_ms) / 1e3);
    status.error = wire::CaptureError::kCutShort;
    status.message = std::string("cut short after ") + ran + ": " + stop.by +
                     " started tracing CUDA activity in this process and profd gave CUPTI to it; "
                     "the events until then are kept" +
                     (status.message.empty() ? "" : "; " + status.message);
  }
  Send(status);
  Log(LogLevel::kInfo, "capture %s: done, %llu events, %llu dropped", request.capture_id.c_str(),
      static_cast<unsigned long long>(status.events),
      static_cast<unsigned long long>(status.dropped_records));
}

wire::CaptureStatus CuptiCapture::SendRemainingEvents() {
  wire::CaptureStatus status;
  std::lock_guard<std::mutex> lock(convert_mutex_);
  if (converter_->pending_events() > 0 || dropped_ > 0 || dropped_pending_.load() > 0 ||
      first_batch_) {
    EmitBatch();
  }
  status.events = converter_->total_events() - lost_events_;
  status.truncated = converter_->truncated();
  status.dropped_records = dropped_total_ + lost_events_;
  status.batches = batches_;
  converter_.reset();
  return status;
}

void CuptiCapture::OnCutShort(void* context, const std::string& by) {
  auto* self = static_cast<CuptiCapture*>(context);
  std::lock_guard<std::mutex> lock(self->stop_mutex_);
  self->stop_requested_ = true;
  self->stop_cv_.notify_all();
}

void CuptiCapture::EmitBatch() {
  dropped_ += dropped_pending_.exchange(0);
  uint64_t events = converter_->pending_events();
  converter_->TakeBatch(dropped_, first_batch_ ? clock_ : nullptr,
                        first_batch_ ? &devices_ : nullptr, &batch_buffer_);
  first_batch_ = false;
  dropped_total_ += dropped_;
  dropped_ = 0;
  ++batches_;
  if (!agent_->Enqueue(batch_buffer_)) lost_events_ += events;
}

void CuptiCapture::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiCapture* self = g_active.load();
  *max_records = 0;
  *buffer = self ? self->pool_.Acquire() : nullptr;
  *size = *buffer ? self->pool_.buffer_bytes() : 0;
}

void CuptiCapture::BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                   size_t size, size_t valid_size) {
  CuptiCapture* self = g_active.load();
  if (self == nullptr) return;
  size_t dropped = 0;
  if (LoadCupti().ActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
    self->dropped_pending_.fetch_add(dropped);
  }
  {
    std::lock_guard<std::mutex> lock(self->completed_mutex_);
    self->completed_.push_back({buffer, valid_size, /*pooled=*/true});
  }
  self->completed_cv_.notify_one();
}

void CuptiCapture::ConvertLoop() {
  pthread_setname_np(pthread_self(), "profagent-conv");
  const CuptiLibrary& cupti = LoadCupti();
  std::vector<Completed> work;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(completed_mutex_);
      completed_cv_.wait(lock, [this] { return converter_stop_ || !completed_.empty(); });
      if (completed_.empty() && converter_stop_) return;
      work.swap(completed_);
    }
    for (const Completed& c : work) {
      {
        std::lock_guard<std::mutex> lock(convert_mutex_);
        CUpti_Activity* record = nullptr;
        while (cupti.ActivityGetNextRecord(c.buffer, c.valid_size, &record) == CUPTI_SUCCESS) {
          converter_->Add(record);
          if (converter_->BatchFull(kBatchBytes)) EmitBatch();
        }
        if (converter_->pending_events() > 0) EmitBatch();
      }
      if (c.pooled) pool_.Return(c.buffer);
    }
    work.clear();
  }
}

namespace {

uint64_t EnvNumber(const char* name) {
  const char* text = std::getenv(name);
  return text ? std::strtoull(text, nullptr, 10) : 0;
}

// PROFD_AGENT_RECORDER=on starts the flight recorder with the process; _SECONDS, _MAX_MIB and
// _DUTY_MS ("ON/PERIOD", e.g. 100/1000) set it as profctl recorder on does.
wire::SetRecorder RecorderFromEnvironment() {
  wire::SetRecorder settings;
  const char* on = std::getenv("PROFD_AGENT_RECORDER");
  settings.on = on != nullptr && std::string(on) == "on";
  settings.seconds = EnvNumber("PROFD_AGENT_RECORDER_SECONDS");
  settings.max_bytes = EnvNumber("PROFD_AGENT_RECORDER_MAX_MIB") << 20;
  if (const char* duty = std::getenv("PROFD_AGENT_RECORDER_DUTY_MS")) {
    char* end = nullptr;
    settings.duty_on_ms = std::strtoull(duty, &end, 10);
    settings.duty_period_ms = *end == '/' ? std::strtoull(end + 1, nullptr, 10) : 0;
  }
  return settings;
}

}  // namespace

CaptureHandler* CreateCaptureHandler(Agent* agent) {
  auto* capture = new CuptiCapture(agent);
  if (wire::SetRecorder settings = RecorderFromEnvironment(); settings.on) {
    capture->OnSetRecorder(settings);
  }
  return capture;
}

}  // namespace profagent

#include "agent/cupti/flight_recorder.h"

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

std::atomic<FlightRecorder*> g_recorder{nullptr};
FlightRecorder* g_at_exit = nullptr;  // the recorder whose thread runs (one per process)

constexpr size_t kPoolBuffers = 4;

uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// CUPTI's buffers: a sixteenth of the bound each (1 to 8 MiB), four of them; the ring has the rest.
size_t BufferBytes(uint64_t max_bytes) {
  return static_cast<size_t>(std::clamp<uint64_t>(max_bytes / 16, 1u << 20, 8u << 20));
}

std::string Seconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace

uint64_t NsUntilDutyWindow(uint64_t realtime_ns, uint64_t period_ms) {
  const uint64_t period_ns = period_ms * 1000000ull;
  return period_ns - realtime_ns % period_ns;
}

FlightRecorder::~FlightRecorder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FlightRecorder::Set(const wire::SetRecorder& asked) {
  wire::SetRecorder settings = asked;
  if (settings.seconds == 0) settings.seconds = kDefaultSeconds;
  if (settings.max_bytes == 0) settings.max_bytes = kDefaultMaxBytes;
  // Below two buffers' worth there would be no ring left.
  settings.max_bytes = std::max<uint64_t>(settings.max_bytes, 8u << 20);
  if (settings.duty_on_ms >= settings.duty_period_ms) settings.duty_on_ms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    settings_ = settings;
    ring_.Configure(settings.max_bytes - kPoolBuffers * BufferBytes(settings.max_bytes),
                    settings.seconds * 1000000000ull);
    if (settings.on && !thread_.joinable()) {
      thread_ = std::thread([this] { Run(); });
      // CUDA and CUPTI were loaded before (the recorder needs them), so this runs before their
      // own teardown at exit: the recorder's session ends while CUPTI can still end it.
      g_at_exit = this;
      std::atexit([] { g_at_exit->StopAtExit(); });
    }
  }
  cv_.notify_all();
  Log(LogLevel::kInfo, "flight recorder %s (%llu s, at most %llu MiB%s)",
      settings.on ? "on" : "off", static_cast<unsigned long long>(settings.seconds),
      static_cast<unsigned long long>(settings.max_bytes >> 20),
      settings.duty_on_ms ? ", duty-cycled" : "");
}

void FlightRecorder::StopAtExit() {
  std::unique_lock<std::mutex> lock(mu_);
  quit_ = true;
  cv_.notify_all();
  // Not joined: a thread stuck in CUPTI must not hold the process's exit.
  cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return !in_session_; });
}

void FlightRecorder::Report(wire::RecorderState* state) {
  std::lock_guard<std::mutex> lock(mu_);
  state->on = settings_.on;
  state->seconds = settings_.seconds;
  state->max_bytes = settings_.max_bytes;
  state->duty_on_ms = settings_.duty_on_ms;
  state->duty_period_ms = settings_.duty_period_ms;
  state->bytes =
      ring_.bytes() + (holding_buffers_ ? kPoolBuffers * BufferBytes(settings_.max_bytes) : 0);
  state->covered_since_realtime_ns = ring_.covered_since_ns();  // 0 until it first records
  state->evicted_records = ring_.dropped_records() + cupti_dropped_.load();
  state->paused = settings_.on && !detail_.empty();
  state->detail = detail_;
}

FlightRecorder::Handoff FlightRecorder::Suspend(uint64_t from_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  Handoff handoff;
  if (!settings_.on) return handoff;
  suspend_requested_ = true;
  cv_.notify_all();
  cv_.wait_for(lock, std::chrono::seconds(1), [this] { return !in_session_; });
  detail_ = "a capture of this process is running";
  if (ring_.chunks() == 0) {
    handoff.note = "the flight recorder held nothing from before the request";
    return handoff;
  }
  uint64_t covered = ring_.covered_since_ns();
  handoff.from_ns = std::max(from_ns, covered);
  handoff.chunks = ring_.Since(handoff.from_ns);
  handoff.note = covered > from_ns
                     ? "the flight recorder held only the last " + Seconds(RealtimeNs() - covered)
                     : "the flight recorder held all of the time asked for before the request";
  if (settings_.duty_on_ms) {
    handoff.note += "; it was duty-cycled (" + std::to_string(settings_.duty_on_ms) +
                    " ms of every " + std::to_string(settings_.duty_period_ms) +
                    " ms), so that part is a sample of the time";
  }
  return handoff;
}

void FlightRecorder::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    suspend_requested_ = false;
    detail_.clear();
  }
  cv_.notify_all();
}

void FlightRecorder::Run() {
  pthread_setname_np(pthread_self(), "profagent-rec");
  CuptiBroker& broker = CuptiBroker::Get();
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    cv_.wait(lock, [this] { return quit_ || (settings_.on && !suspend_requested_); });
    if (quit_) break;
    in_session_ = true;
    lock.unlock();
    bool recorded = Record(broker);
    lock.lock();
    in_session_ = false;
    cv_.notify_all();
    if (!settings_.on) {
      ring_.Restart(0);  // off: the ring's memory goes
      detail_.clear();
      continue;
    }
    if (suspend_requested_) continue;  // a capture takes the ring; Resume starts anew
    if (!recorded || cut_short_) {
      // Try again in a second.
      cv_.wait_for(lock, std::chrono::seconds(1),
                   [this] { return quit_ || !settings_.on || suspend_requested_; });
    }
  }
}

bool FlightRecorder::Record(CuptiBroker& broker) {
  auto not_recording = [this](std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    detail_ = std::move(why);
    return false;
  };
  CudaDriverView cuda = QueryCudaDevices();
  if (!cuda.initialized || cuda.devices.empty()) {
    return not_recording("waiting for the process to use a CUDA device");
  }
  const CuptiLibrary& cupti = LoadCupti();
  if (!cupti.loaded) return not_recording("cannot load CUPTI: " + cupti.error);
  // The process's own profiler first: no claim while it traces.
  if (std::string tracer = broker.OtherTracer(); !tracer.empty()) {
    return not_recording("paused while " + tracer + " traces CUDA activity in this process");
  }
  wire::CaptureError error = wire::CaptureError::kNone;
  std::string message;
  if (!broker.ClaimForCapture(&error, &message)) return not_recording("paused: " + message);

  wire::SetRecorder settings;
  bool stopped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    settings = session_ = settings_;
    stopped = ShouldStopLocked();  // a capture or off came while claiming
    cut_short_ = false;
  }
  if (stopped) {
    broker.ReleaseCapture();
    return false;
  }
  pool_.Allocate(kPoolBuffers, BufferBytes(settings.max_bytes));
  g_recorder.store(this);
  broker.SetCutShortListener(&FlightRecorder::OnCutShort, this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    holding_buffers_ = true;
  }
  // Duty-cycled, the claim and the buffers stay between windows: only the activity kinds go off
  // and on again, the cheapest way CUPTI has to stop and resume tracing.
  std::string why_not;
  for (bool fresh = true;; fresh = false) {
    if (settings.duty_on_ms) {
      if (!WaitForNextWindow(settings)) break;
      if (std::string tracer = broker.OtherTracer(); !tracer.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        cut_short_ = true;
        detail_ = "paused while " + tracer + " traces CUDA activity in this process";
        break;
      }
    }
    if (!TraceWindow(broker, cupti, settings, fresh, &why_not) || !settings.duty_on_ms) break;
  }
  g_recorder.store(nullptr);
  broker.ReleaseCapture();
  pool_.Release();
  {
    std::lock_guard<std::mutex> lock(mu_);
    holding_buffers_ = false;
  }
  cv_.notify_all();
  return why_not.empty() || not_recording(why_not);
}

bool FlightRecorder::TraceWindow(CuptiBroker& broker, const CuptiLibrary& cupti,
                                 const wire::SetRecorder& settings, bool fresh,
                                 std::string* why_not) {
  std::vector<CUpti_ActivityKind> enabled;
  std::string warnings;
  wire::CaptureError error = wire::CaptureError::kNone;
  std::string message;
  if (!broker.StartAgentTracing({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                 CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MARKER},
                                &FlightRecorder::BufferRequested, &FlightRecorder::BufferCompleted,
                                &enabled, &warnings, &error, &message) ||
      enabled.empty()) {
    *why_not = "cannot trace: " + message + warnings;
    return false;
  }
  uint64_t started = RealtimeNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fresh) ring_.Restart(started);
    detail_.clear();
  }
  RecordUntilStopped(cupti, settings);

  // Cut short, the broker already disabled our kinds and flushed our buffers to us.
  CuptiBroker::StopResult stop = broker.StopAgentTracing();
  DrainCompleted();
  std::lock_guard<std::mutex> lock(mu_);
  ring_.DropExpired(RealtimeNs());
  if (stop.cut_short) {
    cut_short_ = true;
    detail_ = "paused while " + stop.by + " traces CUDA activity in this process";
  }
  return !stop.cut_short;
}

bool FlightRecorder::WaitForNextWindow(const wire::SetRecorder& settings) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(
      lock, std::chrono::nanoseconds(NsUntilDutyWindow(RealtimeNs(), settings.duty_period_ms)),
      [this] { return ShouldStopLocked() || cut_short_; });
}

bool FlightRecorder::ShouldStopLocked() const {
  return quit_ || !settings_.on || suspend_requested_ ||
         settings_.duty_on_ms != session_.duty_on_ms ||
         settings_.duty_period_ms != session_.duty_period_ms ||
         settings_.max_bytes != session_.max_bytes;
}

void FlightRecorder::RecordUntilStopped(const CuptiLibrary& cupti,
                                        const wire::SetRecorder& settings) {
  auto window_end = std::chrono::steady_clock::time_point::max();
  if (settings.duty_on_ms) {
    window_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(settings.duty_on_ms);
  }
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto wake = std::min(window_end,
                           std::chrono::steady_clock::now() + std::chrono::milliseconds(kFlushMs));
      cv_.wait_until(lock, wake, [this] { return ShouldStopLocked() || cut_short_; });
      if (ShouldStopLocked() || cut_short_) return;
    }
    if (std::chrono::steady_clock::now() >= window_end) return;
    // No lock of ours is held: CUPTI calls BufferCompleted under its own lock.
    cupti.ActivityFlushAll(0);
    DrainCompleted();
    std::lock_guard<std::mutex> lock(mu_);
    ring_.DropExpired(RealtimeNs());
  }
}

void FlightRecorder::DrainCompleted() {
  std::vector<Completed> work;
  {
    std::lock_guard<std::mutex> lock(completed_mu_);
    work.swap(completed_);
  }
  const CuptiLibrary& cupti = LoadCupti();
  for (const Completed& c : work) {
    RecorderRing::Chunk chunk;
    chunk.completed_ns = c.completed_ns;
    CUpti_Activity* record = nullptr;
    while (cupti.ActivityGetNextRecord(c.buffer, c.valid_size, &record) == CUPTI_SUCCESS) {
      ++chunk.records_count;
    }
    if (chunk.records_count > 0) {
      chunk.records.assign(reinterpret_cast<const char*>(c.buffer), c.valid_size);
    }
    pool_.Return(c.buffer);
    if (chunk.records_count == 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ring_.Add(std::move(chunk));
  }
}

void FlightRecorder::OnCutShort(void* context, const std::string& by) {
  auto* self = static_cast<FlightRecorder*>(context);
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->cut_short_ = true;
  }
  self->cv_.notify_all();
}

void FlightRecorder::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  FlightRecorder* self = g_recorder.load();
  *max_records = 0;
  *buffer = self ? self->pool_.Acquire() : nullptr;
  *size = *buffer ? self->pool_.buffer_bytes() : 0;
}

void FlightRecorder::BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                     size_t size, size_t valid_size) {
  FlightRecorder* self = g_recorder.load();
  if (self == nullptr) return;
  size_t dropped = 0;
  if (LoadCupti().ActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
    self->cupti_dropped_.fetch_add(dropped);
  }
  std::lock_guard<std::mutex> lock(self->completed_mu_);
  self->completed_.push_back({buffer, valid_size, RealtimeNs()});
}

}  // namespace profagent

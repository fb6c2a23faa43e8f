// The flight recorder: while on, the process's GPU activity (kernels, copies, memsets, NVTX
// ranges) is traced all the time and the last N seconds are kept in a bounded ring, so that a
// capture can begin before it was asked for (profctl capture --before, alert captures).
//
// It is a CUPTI session like a capture's, on a thread of its own ("profagent-rec"): claim CUPTI
// through the broker, enable the kinds, flush every kFlushMs into the ring, drop what is older
// than the span. It never holds CUPTI against anyone:
//  - another profiler in the process (torch.profiler) starting to trace cuts the session short,
//    as it does a capture; the recorder waits until that profiler is done, then records again;
//  - a capture of this process suspends it (Suspend), takes the ring, traces itself, and resumes
//    it when it ends (Resume).
// Duty-cycled (duty_on_ms of every duty_period_ms), the activity kinds are off between windows
// (the claim and the buffers are kept): what is recorded is a sample of the time, at a fraction
// of the cost. Windows begin on whole multiples of the period in CLOCK_REALTIME, so every process
// recording with the same period, on every node whose clock is synchronized, samples the same
// instants: the ranks of one job can be read side by side.
//
// Memory: max_bytes bounds the ring and CUPTI's buffers together.
#pragma once

#include <cupti.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/cupti/buffer_pool.h"
#include "agent/cupti/recorder_ring.h"
#include "agent/wire/agent_messages.h"

namespace profagent {

class CuptiBroker;
struct CuptiLibrary;

// How long from realtime_ns until the next duty window begins: the next whole multiple of the
// period since the epoch.
uint64_t NsUntilDutyWindow(uint64_t realtime_ns, uint64_t period_ms);

class FlightRecorder {
 public:
  static constexpr uint64_t kDefaultSeconds = 10;
  static constexpr uint64_t kDefaultMaxBytes = 64ull << 20;
  static constexpr uint64_t kFlushMs = 250;

  FlightRecorder() = default;
  ~FlightRecorder();

  // Any thread. On (with its settings; zeros take the defaults) or off. Off lets CUPTI go and
  // frees the ring.
  void Set(const wire::SetRecorder& settings);
  // At the process's exit: ends the recorder's session (waits at most half a second).
  void StopAtExit();
  // Agent thread: what the heartbeat says.
  void Report(wire::RecorderState* state);

  // What a capture takes from the ring.
  struct Handoff {
    std::vector<std::shared_ptr<const RecorderRing::Chunk>> chunks;
    uint64_t from_ns = 0;  // records that began before this are not the capture's (0: none held)
    std::string note;      // for the capture's message: what the part before the request covers
  };
  // Capture thread: stops recording (CUPTI let go, every buffer in the ring) and hands over the
  // chunks that may hold records from from_ns on. Never waits more than a second for the
  // recorder's thread. Resume after the capture, whatever happened to it.
  Handoff Suspend(uint64_t from_ns);
  void Resume();

 private:
  void Run();  // the recorder's thread
  // One CUPTI session, from the claim to letting CUPTI go; false when it could not trace (detail
  // says why). Returns when asked to stop, to suspend, or cut short; duty-cycled, it holds the
  // claim and the buffers from window to window.
  bool Record(CuptiBroker& broker);
  // One window of tracing (the whole session unless duty-cycled), flushed into the ring; a fresh
  // one restarts the ring's coverage. False when CUPTI would not trace (why_not says why) or
  // another profiler cut it short.
  bool TraceWindow(CuptiBroker& broker, const CuptiLibrary& cupti,
                   const wire::SetRecorder& settings, bool fresh, std::string* why_not);
  // Until the next duty window begins: false when asked to stop or suspend first.
  bool WaitForNextWindow(const wire::SetRecorder& settings);
  // Flushes into the ring every kFlushMs until asked to stop, cut short, or the duty window ends.
  void RecordUntilStopped(const CuptiLibrary& cupti, const wire::SetRecorder& settings);
  // Takes the buffers CUPTI completed into the ring (copied; the buffers go back to the pool).
  void DrainCompleted();
  // Off, a capture, the process's exit, or new settings for the session (taken at its next start).
  bool ShouldStopLocked() const;

  static void OnCutShort(void* context, const std::string& by);
  static void BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                              size_t valid_size);

  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  wire::SetRecorder settings_;      // guarded by mu_
  wire::SetRecorder session_;       // guarded by mu_: the settings the session runs with
  bool quit_ = false;               // guarded by mu_
  bool suspend_requested_ = false;  // guarded by mu_: a capture wants CUPTI
  bool in_session_ = false;         // guarded by mu_: Record runs (claiming, tracing, letting go)
  bool holding_buffers_ = false;    // guarded by mu_: the session has the pool's buffers
  bool cut_short_ = false;          // guarded by mu_
  std::string detail_;              // guarded by mu_
  RecorderRing ring_;               // guarded by mu_

  BufferPool pool_;
  struct Completed {
    uint8_t* buffer;
    size_t valid_size;
    uint64_t completed_ns;
  };
  // CUPTI calls BufferCompleted under its own lock: a mutex of its own, never held while calling
  // CUPTI (mu_ may be held while taking it).
  std::mutex completed_mu_;
  std::vector<Completed> completed_;  // guarded by completed_mu_
  std::atomic<uint64_t> cupti_dropped_{0};
};

}  // namespace profagent

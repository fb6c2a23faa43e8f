// The capture backend: on a StartCapture from profd, enables the requested CUPTI activity kinds
// for the requested time, streams the records to profd as event batches while it runs, then
// disables them and lets CUPTI go, so the process holds no CUPTI state between captures.
//
// Threads: OnStartCapture/OnStopCapture/OnDisconnected come from the agent thread and only hand
// over to the capture thread (one per capture). CUPTI asks for buffers from whatever thread fills
// one, application threads included: that path takes no lock (BufferPool). Completed buffers
// are handed by CUPTI's thread to this capture's converter thread and converted there: CUPTI
// calls BufferCompleted under its own lock, which application threads wait on when they need a
// new buffer, so that callback only queues (measured: converting inline doubled the capture's
// cost on a launch-bound loop; docs/measurements/overhead.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/capture_handler.h"
#include "agent/cupti/activity_converter.h"
#include "agent/cupti/buffer_pool.h"
#include "agent/cupti/flight_recorder.h"

namespace profagent {

class CuptiBroker;
struct CuptiLibrary;

class CuptiCapture final : public CaptureHandler {
 public:
  explicit CuptiCapture(Agent* agent) : agent_(agent) {}

  void OnStartCapture(const wire::StartCapture& request) override;
  void OnStopCapture(const std::string& capture_id) override;
  void OnDisconnected() override;
  uint32_t CuptiVersion() override;
  void OnSetRecorder(const wire::SetRecorder& settings) override { recorder_.Set(settings); }
  void ReportRecorder(wire::RecorderState* state) override { recorder_.Report(state); }

 private:
  void Run(wire::StartCapture request);
  // Waits for the wall-clock start asked for (a common start across processes and nodes).
  void WaitForStart(const wire::StartCapture& request);
  // Run's steps, on the capture thread. The converter thread and the buffers, for a capture
  // CUPTI is claimed for.
  void StartConverter(const wire::StartCapture& request,
                      const std::vector<wire::DeviceInfo>& devices, uint64_t skip_before_ns);
  // Queues the flight recorder's chunks for the converter, after the live ones CUPTI completed.
  void QueueRecorded();
  // Lets the converter drain what is queued, and waits for it to end.
  void StopConverter();
  // Undoes StartConverter and the claim when the capture cannot start after all.
  void AbandonStart(CuptiBroker& broker);
  // Enables the activities and tells profd the capture started; false (failed, abandoned) when
  // none could be enabled.
  bool EnableTracing(const CuptiLibrary& cupti, CuptiBroker& broker,
                     const wire::StartCapture& request, uint64_t* enabled_at);
  void RunForDuration(const CuptiLibrary& cupti, const wire::StartCapture& request);
  // Disables, sends what is left and the final status, and lets CUPTI go.
  void EndCapture(CuptiBroker& broker, const wire::StartCapture& request, uint64_t enabled_at);
  // The converter's last batch; the status's counts.
  wire::CaptureStatus SendRemainingEvents();
  // Fails the capture with a status to profd.
  void Fail(const std::string& capture_id, wire::CaptureError error, const std::string& message);
  void Send(const wire::CaptureStatus& status);
  void EmitBatch();    // convert_mutex_ held
  void ConvertLoop();  // the converter thread

  // The broker's listener: another profiler took CUPTI, this capture's buffers are flushed.
  static void OnCutShort(void* context, const std::string& by);
  static void BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                              size_t valid_size);

  Agent* const agent_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<uint32_t> cupti_version_{0};

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;  // guarded by stop_mutex_
  std::string current_id_;       // guarded by stop_mutex_

  FlightRecorder recorder_;
  FlightRecorder::Handoff recorded_;  // the capture thread's, until the converter has ended

  BufferPool pool_;
  struct Completed {
    uint8_t* buffer;
    size_t valid_size;
    bool pooled;  // false: a chunk of the flight recorder's
  };
  std::mutex completed_mutex_;
  std::condition_variable completed_cv_;
  std::vector<Completed> completed_;  // guarded by completed_mutex_
  bool converter_stop_ = false;       // guarded by completed_mutex_
  std::thread converter_thread_;
  std::atomic<uint64_t> dropped_pending_{0};  // read by BufferCompleted, taken by the converter
  std::mutex convert_mutex_;                  // CUPTI's thread vs. the capture thread's final flush
  std::unique_ptr<ActivityConverter> converter_;
  std::vector<wire::DeviceInfo> devices_;
  bool first_batch_ = true;
  uint64_t clock_[3] = {0, 0, 0};
  uint64_t dropped_ = 0;  // CUPTI's dropped records, not yet reported in a batch
  uint64_t dropped_total_ = 0;
  uint64_t lost_events_ = 0;  // converted but refused by a full send queue
  uint64_t batches_ = 0;
  std::string batch_buffer_;
};

}  // namespace profagent

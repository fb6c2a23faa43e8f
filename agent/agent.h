// The agent inside a CUDA process: one thread of its own that connects to profd's agent socket,
// says who it is, sends heartbeats with counters, takes capture requests and writes whatever the
// capture code queues. Never blocks an application thread or the process exit, reconnects with
// back-off when profd restarts, and goes quiet in a forked child.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "agent/capture_handler.h"
#include "agent/wire/agent_messages.h"

namespace profagent {

class Agent;

struct AgentOptions {
  std::string socket_path;  // PROFD_AGENT_SOCKET or the default
  bool injected = false;    // loaded through CUDA_INJECTION64_PATH
  // Bytes of queued messages past which Enqueue refuses (the capture counts them as dropped).
  size_t max_queued_bytes = 64u << 20;
  // Run first on the agent thread (never on the thread that loaded the agent): slow set-up such
  // as loading CUPTI for the counters goes here.
  void (*on_thread_start)(Agent* agent) = nullptr;
  // Run on the agent thread about once a heartbeat interval, connected to profd or not (the
  // CUPTI broker's rescan for libraries loaded since).
  void (*on_tick)(Agent* agent) = nullptr;
};

// Builds the capture backend before the agent thread starts; may return nullptr.
using CaptureHandlerFactory = CaptureHandler* (*)(Agent* agent);

class Agent {
 public:
  // Starts the process-wide agent once; later calls return the same one. Never destroyed: its
  // thread may still be running while the process exits.
  static Agent* StartOnce(const AgentOptions& options, CaptureHandlerFactory make_handler);
  static Agent* Get();  // nullptr before StartOnce

  // Any thread. Queues one encoded AgentMessage for profd; false when not connected or the queue
  // is full. Takes a short lock: call it from agent or CUPTI threads, never application threads.
  bool Enqueue(std::string message);

  // Any thread; returns at once. The thread exits at its next wake-up.
  void RequestStop();
  // Any thread, lock-free: the next heartbeat goes now (something profd decides on changed, e.g.
  // the process's own profiler started or stopped tracing).
  void HeartbeatNow();

  // Any thread; returns at once: the flight recorder on or off (profd's SetRecorder, or the
  // process itself through profagent_set_recorder), and profd hears of it at once.
  void SetRecorder(const wire::SetRecorder& settings);

  bool connected() const { return connected_.load(std::memory_order_relaxed); }
  const AgentOptions& options() const { return options_; }

  // Counters the metrics code keeps; sent with every heartbeat. Set once before start.
  using CountersFn = void (*)(wire::Heartbeat* heartbeat);
  void set_counters_fn(CountersFn fn) { counters_fn_.store(fn); }

 private:
  explicit Agent(const AgentOptions& options);
  void Run();
  bool Connect();
  void Disconnect(const char* why);
  void SendHello();
  void SendHeartbeat();
  bool ReadFrames();
  bool WritePending();
  void Dispatch(std::string_view frame);
  void Wake();
  static void AtForkChild();

  const AgentOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> heartbeat_now_{false};
  std::atomic<bool> connected_{false};
  std::atomic<CaptureHandler*> capture_handler_{nullptr};
  std::atomic<CountersFn> counters_fn_{nullptr};
  int wake_fd_ = -1;  // eventfd: Enqueue and RequestStop wake the thread
  int socket_fd_ = -1;

  // Agent thread only.
  std::string in_buffer_;
  std::string out_frame_;  // the frame being written, header included
  size_t out_offset_ = 0;
  uint64_t heartbeat_interval_ms_ = 1000;
  uint64_t next_heartbeat_ns_ = 0;
  uint64_t next_tick_ns_ = 0;
  bool devices_sent_ = false;
  wire::Hello hello_;
  uint32_t backoff_ms_ = 0;
  bool warned_unreachable_ = false;

  std::mutex queue_mutex_;
  std::deque<std::string> queue_;  // guarded by queue_mutex_
  size_t queued_bytes_ = 0;        // guarded by queue_mutex_
};

}  // namespace profagent

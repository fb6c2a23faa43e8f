// profd's end of the agent channel: a unix stream socket that agents connect to. One I/O thread
// (epoll) accepts connections, reads length-prefixed frames, checks them, and hands what they
// carry to the AgentRegistry (hello, heartbeat) and to the AgentEventSink (capture status, event
// batches). Other threads send DaemonMessages through Send(), which only queues and wakes the
// I/O thread. A peer that sends garbage, an oversized frame, or goes silent is closed with a
// logged reason; the others are not affected.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/agents/agent_registry.h"
#include "profd/v1/agent_channel.pb.h"

namespace profd {

// What the capture side receives from agents. Called on the agent I/O thread: must not block.
class AgentEventSink {
 public:
  virtual ~AgentEventSink() = default;
  virtual void OnCaptureStatus(ConnectionId connection, uint32_t pid,
                               const v1::CaptureStatus& status) = 0;
  virtual void OnEventBatch(ConnectionId connection, uint32_t pid, v1::EventBatch batch) = 0;
  virtual void OnAgentGone(ConnectionId connection, uint32_t pid) = 0;
};

struct AgentChannelOptions {
  std::string socket_path;
  mode_t socket_mode = 0666;  // agents run as any user, often in containers
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // An agent silent for this long (no heartbeat, no data) is closed and unregistered.
  absl::Duration agent_timeout = absl::Seconds(10);
  uint32_t max_frame_bytes = 16u << 20;
};

class AgentChannelServer {
 public:
  AgentChannelServer(AgentChannelOptions options, AgentRegistry* registry);
  ~AgentChannelServer();

  // Set before Start; may be null (registrations only).
  void set_event_sink(AgentEventSink* sink) { sink_ = sink; }

  // Binds the socket (replacing a stale one) and starts the I/O thread.
  absl::Status Start();
  void Stop();

  // Any thread. Queues a message to one agent; false when that connection is gone.
  bool Send(ConnectionId connection, const v1::DaemonMessage& message);

  // Connections closed for a protocol violation since start.
  uint64_t protocol_errors() const { return protocol_errors_.load(); }
  const AgentChannelOptions& options() const { return options_; }

 private:
  struct Connection {
    int fd = -1;
    uint32_t pid = 0;
    uint32_t uid = 0;
    bool registered = false;
    std::string in;
    std::string out;
    size_t out_offset = 0;
    bool want_write = false;
    absl::Time last_seen;
  };

  void Run();
  void Accept();
  void OnReadable(ConnectionId id, Connection& c);
  bool HandleFrame(ConnectionId id, Connection& c, std::string_view frame);
  bool Flush(ConnectionId id, Connection& c);
  void DrainOutbox();
  void Close(ConnectionId id, const std::string& reason, bool protocol_error);
  void ReapSilent();
  void UpdateInterest(ConnectionId id, Connection& c);

  const AgentChannelOptions options_;
  AgentRegistry* const registry_;
  AgentEventSink* sink_ = nullptr;

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> protocol_errors_{0};

  // I/O thread only.
  std::map<ConnectionId, Connection> connections_;
  ConnectionId next_id_ = 16;  // ids below are epoll tags for the listener and wake fd

  absl::Mutex outbox_mutex_;
  std::vector<std::pair<ConnectionId, std::string>> outbox_ ABSL_GUARDED_BY(outbox_mutex_);
  std::map<ConnectionId, bool> live_ ABSL_GUARDED_BY(outbox_mutex_);
};

}  // namespace profd

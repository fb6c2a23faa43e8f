// profd's end of the agent channel: a unix stream socket that agents connect to. It is open to
// every local user and every container that mounts it (0666), so each peer is untrusted, and
// nothing one peer sends may crash profd, hold more than a bounded share of its memory and file
// descriptors, or delay the others (docs/SECURITY.md).
//
// One I/O thread (epoll) does all of it:
//  - accept: past --agent_max_connections, or past one uid's share, a connection is accepted and
//    closed at once (the listen backlog never fills). The peer is bound to the process that
//    connected (PeerProcess, a pidfd), and that pidfd is watched: when the process exits, its
//    connection is closed even if a child still holds the socket.
//  - read: a 4-byte length, then one buffer of exactly that length. The largest length accepted
//    depends on what the connection may send at that point (before hello, registered, target of
//    a running capture); all read buffers together are capped, and a connection whose frame does
//    not fit waits, first come first served.
//  - check (agent_message_limits.h) and hand over: hello and heartbeat to the AgentRegistry,
//    capture status and event batches to the AgentEventSink. Event batches go over unparsed; a
//    connection whose batches wait in its capture's backlog is not read until that has caught up
//    (and is not taken for silent meanwhile).
//  - close for cause, counted per reason: an oversized frame, a malformed or out-of-limit message,
//    no hello in time, more messages per second than allowed, a peer that does not read, a
//    process that exited while another kept its socket.
// Other threads send DaemonMessages through Send(), which only queues and wakes the I/O thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/agents/agent_event_batch.h"
#include "daemon/agents/agent_message_limits.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/agents/peer_process.h"
#include "daemon/log.h"
#include "profd/v1/agent_channel.pb.h"

namespace profd {

// What the capture side receives from agents. Called on the agent I/O thread: must not block.
class AgentEventSink {
 public:
  virtual ~AgentEventSink() = default;
  virtual void OnCaptureStatus(ConnectionId connection, uint32_t pid,
                               const v1::CaptureStatus& status) = 0;
  // `batch` has passed CheckEventBatch (capture id, counts, string ids and sizes) but is not
  // parsed: parse it on the capture's own thread. Until it is destroyed it counts in its
  // connection's backlog, and a connection over its share is not read: keep it only as long as
  // it is needed.
  virtual void OnEventBatch(ConnectionId connection, uint32_t pid, AgentEventBatch batch) = 0;
  virtual void OnAgentGone(ConnectionId connection, uint32_t pid) = 0;
};

// What the capture side sends to agents: the channel below, or a test's own.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // Any thread. Queues a message to one agent; false when that connection is gone.
  virtual bool Send(ConnectionId connection, const v1::DaemonMessage& message) = 0;
};

// Why a connection was refused at accept: the `reason` label of
// profd_agent_connections_rejected_total.
enum class AgentRejection : uint8_t {
  kMaxConnections,     // --agent_max_connections reached
  kUidShare,           // that uid holds --agent_max_connections_per_uid already
  kNoIdentity,         // the peer's process cannot be pinned (credentials, exited, no pidfd)
  kNoFileDescriptors,  // profd is out of file descriptors
};
inline constexpr int kAgentRejectionCount = 4;
const char* AgentRejectionLabel(AgentRejection rejection);

struct AgentChannelOptions {
  std::string socket_path;
  mode_t socket_mode = 0666;  // agents run as any user, often in containers
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A registered agent silent for this long (no heartbeat, no data) is closed and unregistered.
  absl::Duration agent_timeout = absl::Seconds(10);
  // A connection that has not said hello by then is closed (counted: no_hello).
  absl::Duration hello_timeout = absl::Seconds(5);
  // Connections at once, and per uid. Each holds two file descriptors (socket and pidfd); Start
  // lowers the cap to a quarter of RLIMIT_NOFILE so that agents never take more than half of
  // profd's descriptors.
  size_t max_connections = 1024;
  // 0: a quarter of the cap in force, so that one user (often every container's root) cannot
  // take every slot even when the cap was lowered.
  size_t max_connections_per_uid = 0;
  // The largest frame by what the connection may send: a hello (a few hundred bytes); heartbeats
  // and capture status; event batches, only while it is the target of a running capture (agents
  // cut batches at ~1 MiB).
  uint32_t max_frame_before_hello = 64u << 10;
  uint32_t max_frame_registered = 256u << 10;
  uint32_t max_frame_capturing = 4u << 20;
  // All read buffers together (frames being read).
  size_t max_buffered_bytes = 64u << 20;
  // Event batches handed to capture pipelines and not processed yet: one connection, all.
  size_t max_backlog_bytes_per_connection = 16u << 20;
  size_t max_backlog_bytes = 64u << 20;
  // Messages other than event batches of a running capture, per connection (heartbeats come
  // once per --heartbeat_interval). Up to one second's worth may come at once.
  double max_messages_per_second = 100;
  AgentMessageLimits message_limits;
};

// What the channel has refused and closed since start, and what it holds now; for /metrics.
struct AgentChannelCounters {
  std::array<uint64_t, kAgentViolationCount> closed_for_cause{};  // by AgentViolation
  std::array<uint64_t, kAgentRejectionCount> rejected{};          // by AgentRejection
  uint64_t connections = 0;                                       // open now, hello or not
  uint64_t paused = 0;          // connections profd is not reading now (backlog, buffer room)
  uint64_t buffered_bytes = 0;  // frames being read
  uint64_t backlog_bytes = 0;   // event batches waiting for capture pipelines
};

class AgentChannelServer final : public AgentLink {
 public:
  AgentChannelServer(AgentChannelOptions options, AgentRegistry* registry);
  ~AgentChannelServer() override;

  // Set before Start; may be null (registrations only).
  void set_event_sink(AgentEventSink* sink) { sink_ = sink; }

  // Checks the options, binds the socket (replacing a stale one) and starts the I/O thread.
  absl::Status Start();
  void Stop();

  bool Send(ConnectionId connection, const v1::DaemonMessage& message) override;

  // Any thread. Connections closed for cause since start, all reasons.
  uint64_t protocol_errors() const;
  AgentChannelCounters counters() const;
  const AgentChannelOptions& options() const { return options_; }
  // After Start: the connection cap in force (--agent_max_connections, or lower: see above).
  size_t max_connections() const { return max_connections_; }

 private:
  static constexpr char kLogComponent[] = "agent-channel";
  static constexpr char kWhereCounted[] =
      "see /metrics: profd_agent_connections, profd_agent_protocol_errors_total, "
      "profd_agent_connections_rejected_total";
  struct Connection {
    int fd = -1;
    std::shared_ptr<const PeerProcess> peer;
    bool registered = false;
    absl::Time accepted;
    absl::Time last_seen;
    // The frame being read: its length header, then one buffer of exactly that length.
    unsigned char header[4] = {};
    size_t header_bytes = 0;
    uint32_t frame_length = 0;
    std::unique_ptr<char[]> frame;  // set once room for it is taken from max_buffered_bytes
    size_t frame_bytes = 0;
    // Why profd is not reading it now; either may hold.
    bool waiting_for_buffer = false;  // its next frame does not fit max_buffered_bytes yet
    bool backlog_full = false;        // its event batches wait for its capture to catch up
    bool backlog_logged = false;      // said once in the log that it was paused for that
    std::string out;
    size_t out_offset = 0;
    uint32_t epoll_events = 0;  // what epoll watches on fd; 0: fd is not in the epoll set
    double tokens = 0;          // max_messages_per_second, as a token bucket
    absl::Time tokens_at;
    bool reading() const { return !waiting_for_buffer && !backlog_full; }
  };

  // Lines about connections are limited: a peer that connects, registers or misbehaves in a
  // loop must not flood the log. Past `lines` in an interval the rest are counted and summed up
  // in one line.

  void Run();
  void Accept();
  void Reject(AgentRejection rejection, const std::string& why);
  void OnReadable(ConnectionId id, Connection& c);
  bool Received(ConnectionId id, Connection& c, ssize_t n);
  bool StartFrame(ConnectionId id, Connection& c);
  bool TakeBufferRoom(ConnectionId id, Connection& c);
  bool HandleFrame(ConnectionId id, Connection& c, std::unique_ptr<char[]> frame, uint32_t length);
  bool TakeToken(Connection& c, absl::Time now);
  void OnProcessExited(ConnectionId id);
  bool Flush(ConnectionId id, Connection& c);
  void DrainOutbox();
  void ResumePaused();
  void Close(ConnectionId id, const std::string& reason, std::optional<AgentViolation> violation);
  void Reap();
  void UpdateInterest(ConnectionId id, Connection& c);
  void Wake();

  const AgentChannelOptions options_;
  AgentRegistry* const registry_;
  AgentEventSink* sink_ = nullptr;
  size_t max_connections_ = 0;
  size_t max_connections_per_uid_ = 0;

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;  // given up to accept-and-close when profd is out of descriptors
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::array<std::atomic<uint64_t>, kAgentViolationCount> closed_for_cause_{};
  std::array<std::atomic<uint64_t>, kAgentRejectionCount> rejected_{};
  std::atomic<uint64_t> open_connections_{0};
  // Copies of I/O-thread state for counters(), updated once per turn of the loop.
  std::atomic<uint64_t> paused_connections_{0};
  std::atomic<uint64_t> buffered_bytes_seen_{0};
  std::shared_ptr<PipelineBacklog> backlog_;

  // I/O thread only.
  std::map<ConnectionId, Connection> connections_;
  ConnectionId next_id_ = 16;  // ids below are epoll tags for the listener and wake fd
  std::map<uid_t, size_t> connections_of_uid_;
  size_t buffered_bytes_ = 0;                // read buffers allocated, all connections
  std::deque<ConnectionId> buffer_waiters_;  // waiting for room in them, oldest first
  std::set<ConnectionId> backlog_paused_;
  LogBudget closed_log_{kLogComponent, "agent connections closed for cause", Severity::kWarning, 20,
                        kWhereCounted};
  LogBudget refused_log_{kLogComponent, "agent connections refused", Severity::kWarning, 20,
                         kWhereCounted};
  // Registrations and disconnects: many more, so that a node where 64 processes start at once
  // still logs each.
  LogBudget lifecycle_log_{kLogComponent, "agent registrations and disconnects", Severity::kInfo,
                           200, kWhereCounted};

  absl::Mutex outbox_mutex_;
  std::vector<std::pair<ConnectionId, std::string>> outbox_ ABSL_GUARDED_BY(outbox_mutex_);
  std::set<ConnectionId> live_ ABSL_GUARDED_BY(outbox_mutex_);
};

}  // namespace profd

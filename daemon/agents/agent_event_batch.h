// Event batches on their way from the agent I/O thread to a capture's pipeline thread, and the
// backlog they form. The I/O thread only checks a batch (agent_message_limits.h) and hands over
// the frame it came in, unparsed; the pipeline thread parses it. Bytes handed over and not yet
// processed are counted per connection and in all: a connection over its share is not read
// until its capture has caught up, so one agent that sends faster than its trace can be written
// holds a bounded amount of profd's memory and never delays the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace profd {

using ConnectionId = uint64_t;

// Thread-safe. The agent I/O thread adds; batches give their bytes back when they are
// destroyed, on whichever thread that is.
class PipelineBacklog {
 public:
  PipelineBacklog(size_t max_per_connection, size_t max_total)
      : max_per_connection_(max_per_connection), max_total_(max_total) {}

  // Called (under the lock, so it must only signal) when a release takes a connection or the
  // total back under its limit. Set to nothing before whatever it signals goes away.
  void set_wake(std::function<void()> wake);

  void Add(ConnectionId connection, size_t bytes);
  void Release(ConnectionId connection, size_t bytes);
  // True when the connection's batches or everyone's are at their limit: stop reading it.
  bool Full(ConnectionId connection) const;
  size_t total() const;

 private:
  const size_t max_per_connection_;
  const size_t max_total_;
  mutable absl::Mutex mutex_;
  std::map<ConnectionId, size_t> by_connection_ ABSL_GUARDED_BY(mutex_);
  size_t total_ ABSL_GUARDED_BY(mutex_) = 0;
  std::function<void()> wake_ ABSL_GUARDED_BY(mutex_);
};

// One checked, unparsed EventBatch and the frame that holds it. Move-only; while it exists its
// frame counts in the backlog of the connection it came from.
class AgentEventBatch {
 public:
  AgentEventBatch() = default;
  AgentEventBatch(std::unique_ptr<char[]> frame, size_t frame_bytes, absl::string_view batch,
                  std::string capture_id, uint32_t records,
                  std::shared_ptr<PipelineBacklog> backlog, ConnectionId connection);
  AgentEventBatch(AgentEventBatch&& other) noexcept { *this = std::move(other); }
  AgentEventBatch& operator=(AgentEventBatch&& other) noexcept;
  ~AgentEventBatch() { Release(); }

  const std::string& capture_id() const { return capture_id_; }
  // The serialized profd.v1.EventBatch.
  absl::string_view bytes() const { return batch_; }
  uint32_t records() const { return records_; }

 private:
  void Release();

  std::unique_ptr<char[]> frame_;
  size_t frame_bytes_ = 0;
  absl::string_view batch_;
  std::string capture_id_;
  uint32_t records_ = 0;
  std::shared_ptr<PipelineBacklog> backlog_;
  ConnectionId connection_ = 0;
};

}  // namespace profd

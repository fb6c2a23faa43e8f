#include "daemon/agents/agent_event_batch.h"

#include <algorithm>
#include <utility>

#include "common/mutex.h"

namespace profd {

void PipelineBacklog::set_wake(std::function<void()> wake) {
  MutexLock lock(&mutex_);
  wake_ = std::move(wake);
}

void PipelineBacklog::Add(ConnectionId connection, size_t bytes) {
  MutexLock lock(&mutex_);
  by_connection_[connection] += bytes;
  total_ += bytes;
}

void PipelineBacklog::Release(ConnectionId connection, size_t bytes) {
  MutexLock lock(&mutex_);
  auto it = by_connection_.find(connection);
  if (it == by_connection_.end()) return;
  const size_t connection_before = it->second, total_before = total_;
  it->second -= std::min(bytes, it->second);
  total_ -= std::min(bytes, total_);
  // A paused connection may read again when its own share or the total goes under its limit;
  // the I/O thread then looks at every paused connection.
  const bool freed =
      (connection_before >= max_per_connection_ && it->second < max_per_connection_) ||
      (total_before >= max_total_ && total_ < max_total_);
  if (it->second == 0) by_connection_.erase(it);
  if (freed && wake_) wake_();
}

bool PipelineBacklog::Full(ConnectionId connection) const {
  MutexLock lock(&mutex_);
  if (total_ >= max_total_) return true;
  auto it = by_connection_.find(connection);
  return it != by_connection_.end() && it->second >= max_per_connection_;
}

size_t PipelineBacklog::total() const {
  MutexLock lock(&mutex_);
  return total_;
}

AgentEventBatch::AgentEventBatch(std::unique_ptr<char[]> frame, size_t frame_bytes,
                                 absl::string_view batch, std::string capture_id, uint32_t records,
                                 std::shared_ptr<PipelineBacklog> backlog, ConnectionId connection)
    : frame_(std::move(frame)),
      frame_bytes_(frame_bytes),
      batch_(batch),
      capture_id_(std::move(capture_id)),
      records_(records),
      backlog_(std::move(backlog)),
      connection_(connection) {
  if (backlog_) backlog_->Add(connection_, frame_bytes_);
}

AgentEventBatch& AgentEventBatch::operator=(AgentEventBatch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  frame_ = std::move(other.frame_);
  frame_bytes_ = std::exchange(other.frame_bytes_, 0);
  batch_ = std::exchange(other.batch_, {});
  capture_id_ = std::move(other.capture_id_);
  records_ = std::exchange(other.records_, 0);
  backlog_ = std::move(other.backlog_);
  connection_ = other.connection_;
  return *this;
}

void AgentEventBatch::Release() {
  if (backlog_) backlog_->Release(connection_, frame_bytes_);
  backlog_.reset();
  frame_.reset();
  frame_bytes_ = 0;
  batch_ = {};
}

}  // namespace profd

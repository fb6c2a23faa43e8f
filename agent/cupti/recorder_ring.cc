#include "agent/cupti/recorder_ring.h"

#include <algorithm>

namespace profagent {

void RecorderRing::Configure(uint64_t max_bytes, uint64_t span_ns) {
  max_bytes_ = max_bytes;
  span_ns_ = span_ns;
  while (!chunks_.empty() && bytes_ > max_bytes_) DropOldest();
}

void RecorderRing::Restart(uint64_t start_ns) {
  chunks_.clear();
  bytes_ = 0;
  covered_since_ns_ = start_ns;
}

void RecorderRing::Add(Chunk chunk) {
  if (chunk.records.size() > max_bytes_) {
    dropped_records_ += chunk.records_count;
    covered_since_ns_ = std::max(covered_since_ns_, chunk.completed_ns);
    return;
  }
  bytes_ += chunk.records.size();
  chunks_.push_back(std::make_shared<const Chunk>(std::move(chunk)));
  while (bytes_ > max_bytes_) DropOldest();
}

void RecorderRing::DropExpired(uint64_t now_ns) {
  while (!chunks_.empty() && chunks_.front()->completed_ns + span_ns_ < now_ns) DropOldest();
}

std::vector<std::shared_ptr<const RecorderRing::Chunk>> RecorderRing::Since(
    uint64_t from_ns) const {
  // A chunk completed before from_ns holds only records that began before it.
  std::vector<std::shared_ptr<const Chunk>> out;
  for (const auto& chunk : chunks_) {
    if (chunk->completed_ns >= from_ns) out.push_back(chunk);
  }
  return out;
}

void RecorderRing::DropOldest() {
  const Chunk& oldest = *chunks_.front();
  bytes_ -= oldest.records.size();
  dropped_records_ += oldest.records_count;
  covered_since_ns_ = std::max(covered_since_ns_, oldest.completed_ns);
  chunks_.pop_front();
}

}  // namespace profagent

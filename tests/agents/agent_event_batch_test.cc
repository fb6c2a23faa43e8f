// The backlog of event batches between the agent I/O thread and the capture pipelines: bytes are
// counted per connection and in all while a batch lives, given back when it is destroyed on any
// thread, and the I/O thread is woken exactly when a paused connection may read again.
#include "daemon/agents/agent_event_batch.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace profd {
namespace {

AgentEventBatch MakeBatch(std::shared_ptr<PipelineBacklog> backlog, ConnectionId connection,
                          size_t bytes) {
  auto frame = std::make_unique<char[]>(bytes);
  std::fill_n(frame.get(), bytes, 'x');
  absl::string_view view(frame.get() + 1, bytes - 1);
  return AgentEventBatch(std::move(frame), bytes, view, "cap-1", 3, std::move(backlog), connection);
}

TEST(PipelineBacklogTest, BatchesCountUntilDestroyedAndWakeWhenRoomComesBack) {
  auto backlog = std::make_shared<PipelineBacklog>(/*per_connection=*/100, /*total=*/150);
  std::atomic<int> wakes{0};
  backlog->set_wake([&] { ++wakes; });

  AgentEventBatch a = MakeBatch(backlog, 1, 60);
  EXPECT_EQ(a.capture_id(), "cap-1");
  EXPECT_EQ(a.bytes().size(), 59u);
  EXPECT_EQ(a.records(), 3u);
  EXPECT_FALSE(backlog->Full(1));
  AgentEventBatch b = MakeBatch(backlog, 1, 60);  // connection 1 at 120 >= 100
  EXPECT_TRUE(backlog->Full(1));
  EXPECT_FALSE(backlog->Full(2));
  AgentEventBatch c = MakeBatch(backlog, 2, 40);  // total 160 >= 150: everyone waits
  EXPECT_TRUE(backlog->Full(2));
  EXPECT_EQ(backlog->total(), 160u);

  // Moving a batch moves its bytes, it does not count them twice or give them back.
  AgentEventBatch moved = std::move(b);
  EXPECT_EQ(backlog->total(), 160u);
  EXPECT_EQ(wakes.load(), 0);

  // Destroyed on another thread (the capture's): total under its limit, connection 1 still
  // over its own.
  std::thread([c = std::move(c)]() mutable { AgentEventBatch gone = std::move(c); }).join();
  EXPECT_EQ(backlog->total(), 120u);
  EXPECT_EQ(wakes.load(), 1);
  EXPECT_FALSE(backlog->Full(2));
  EXPECT_TRUE(backlog->Full(1));
  moved = AgentEventBatch();  // connection 1 at 60
  EXPECT_EQ(wakes.load(), 2);
  EXPECT_FALSE(backlog->Full(1));
  a = AgentEventBatch();
  EXPECT_EQ(backlog->total(), 0u);
  EXPECT_EQ(wakes.load(), 2);  // nobody was waiting

  // After the channel stops, late batches still give their bytes back, without waking anyone.
  AgentEventBatch late = MakeBatch(backlog, 3, 200);
  backlog->set_wake(nullptr);
  late = AgentEventBatch();
  EXPECT_EQ(backlog->total(), 0u);
}

}  // namespace
}  // namespace profd

// The agent channel's flow control, on a real AgentChannelServer in this process with real unix
// sockets and processes: a connection whose event batches wait in its capture's backlog is not
// read (and not taken for silent) until the capture has caught up, while other agents are
// served; frames wait for room under the cap on read buffers, first come first served.
#include "daemon/agents/agent_channel_server.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/raw_agent.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::RawAgent;
using testing::WaitFor;

// Keeps every batch it is given until told to let go: a capture that has stalled.
class StalledCaptures : public AgentEventSink {
 public:
  void OnCaptureStatus(ConnectionId, uint32_t, const v1::CaptureStatus&) override {}
  void OnEventBatch(ConnectionId, uint32_t, AgentEventBatch batch) override {
    MutexLock lock(&mutex_);
    batches_.push_back(std::move(batch));
  }
  void OnAgentGone(ConnectionId, uint32_t) override {}
  size_t held() {
    MutexLock lock(&mutex_);
    return batches_.size();
  }
  void CatchUp() {
    std::vector<AgentEventBatch> done;
    MutexLock lock(&mutex_);
    done.swap(batches_);
  }

 private:
  absl::Mutex mutex_;
  std::vector<AgentEventBatch> batches_;
};

// Another agent, in a child process: a hello, then a heartbeat every 200 ms. The frames are
// made before fork (the child only writes: the test process has threads).
pid_t ForkHeartbeatingAgent(const std::string& socket_path) {
  v1::AgentMessage hello;
  *hello.mutable_hello() = RawAgent::DefaultHello("neighbour");
  v1::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat()->add_devices()->set_device(0);
  const std::string hello_frame = RawAgent::Frame(hello.SerializeAsString());
  const std::string heartbeat_frame = RawAgent::Frame(heartbeat.SerializeAsString());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) _exit(2);
    if (write(fd, hello_frame.data(), hello_frame.size()) < 0) _exit(3);
    const timespec pause{0, 200'000'000};
    while (write(fd, heartbeat_frame.data(), heartbeat_frame.size()) > 0)
      nanosleep(&pause, nullptr);
    _exit(0);
  }
  return pid;
}

class AgentChannelServerTest : public ::testing::Test {
 protected:
  void Start(AgentChannelOptions options) {
    options.socket_path = dir_.File("agent.sock");
    channel_ = std::make_unique<AgentChannelServer>(options, &registry_);
    channel_->set_event_sink(&sink_);
    ASSERT_TRUE(channel_->Start().ok());
  }
  void TearDown() override {
    if (channel_) channel_->Stop();
  }

  testing::TempDir dir_;
  AgentRegistry registry_;
  StalledCaptures sink_;
  std::unique_ptr<AgentChannelServer> channel_;
};

TEST_F(AgentChannelServerTest, AConnectionAheadOfItsCaptureWaitsAndIsNotTakenForSilent) {
  AgentChannelOptions options;
  options.agent_timeout = absl::Seconds(1);
  options.max_backlog_bytes_per_connection = 1u << 20;
  Start(options);
  pid_t neighbour = ForkHeartbeatingAgent(dir_.File("agent.sock"));
  struct Reap {
    pid_t pid;
    ~Reap() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reap{neighbour};

  RawAgent target(dir_.File("agent.sock"));
  ASSERT_TRUE(target.Register(RawAgent::DefaultHello("target")));
  std::optional<ConnectionId> connection = registry_.ConnectionOfPid(getpid());
  ASSERT_TRUE(connection.has_value());
  registry_.SetCapturing(*connection, "cap-1");
  // ~600 KB each: the second one takes its backlog past 1 MiB, the third waits in the socket.
  const std::string batch =
      RawAgent::Frame(testing::KernelBatch("cap-1", 20000).SerializeAsString());
  ASSERT_GT(batch.size(), 512u << 10);
  ASSERT_TRUE(target.Send(batch));
  ASSERT_TRUE(target.Send(batch));
  // The third fits only partly in the socket until profd reads again.
  bool third_sent = false;
  std::thread third([&] { third_sent = target.Send(batch, absl::Seconds(20)); });
  ASSERT_TRUE(WaitFor([&] { return sink_.held() == 2; }, absl::Seconds(2)));
  EXPECT_TRUE(WaitFor([&] { return channel_->counters().paused == 1; }, absl::Seconds(1)));
  EXPECT_EQ(channel_->counters().backlog_bytes, 2 * (batch.size() - 4));

  // Three agent timeouts later: the target, which profd stopped reading, is still registered
  // and nothing more was read from it; the neighbour, read all along, is registered too.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(sink_.held(), 2u);
  EXPECT_EQ(registry_.size(), 2u);
  EXPECT_TRUE(registry_.FindByPid(neighbour).has_value());
  EXPECT_TRUE(registry_.FindByPid(getpid()).has_value());
  EXPECT_EQ(channel_->protocol_errors(), 0u);

  // The capture catches up: the third batch is read, and the target is not taken for silent for
  // the time profd was not listening.
  sink_.CatchUp();
  third.join();
  EXPECT_TRUE(third_sent);
  EXPECT_TRUE(WaitFor([&] { return sink_.held() == 1; }, absl::Seconds(1)));
  EXPECT_TRUE(WaitFor([&] { return channel_->counters().paused == 0; }, absl::Seconds(1)));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(registry_.FindByPid(getpid()).has_value());
  EXPECT_FALSE(target.closed());
}

TEST_F(AgentChannelServerTest, FramesWaitForRoomInTheReadBuffersInTurn) {
  AgentChannelOptions options;
  options.max_buffered_bytes = 2u << 20;  // 32 hello-sized frames
  options.max_frame_capturing = 2u << 20;
  Start(options);
  constexpr uint32_t kFrame = 64u << 10;
  // 32 connections each start a 64 KiB frame: the read buffers are full.
  std::vector<std::unique_ptr<RawAgent>> holders;
  for (int i = 0; i < 32; ++i) {
    holders.push_back(std::make_unique<RawAgent>(dir_.File("agent.sock")));
    ASSERT_TRUE(holders.back()->Send(RawAgent::FrameHeader(kFrame) + "x"));
  }
  ASSERT_TRUE(WaitFor([&] { return channel_->counters().buffered_bytes == 32 * kFrame; },
                      absl::Seconds(2)));
  // The 33rd waits: no buffer for it, and nothing read from it.
  RawAgent waiting(dir_.File("agent.sock"));
  ASSERT_TRUE(waiting.Send(RawAgent::FrameHeader(kFrame) + "y"));
  EXPECT_TRUE(WaitFor([&] { return channel_->counters().paused == 1; }, absl::Seconds(1)));
  EXPECT_EQ(channel_->counters().buffered_bytes, 32 * kFrame);
  // One holder goes: its room goes to the one that waited.
  holders.front().reset();
  EXPECT_TRUE(WaitFor([&] { return channel_->counters().paused == 0; }, absl::Seconds(1)));
  EXPECT_EQ(channel_->counters().buffered_bytes, 32 * kFrame);
  EXPECT_FALSE(waiting.closed());
}

}  // namespace
}  // namespace profd

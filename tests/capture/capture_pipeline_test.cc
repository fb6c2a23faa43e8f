// The capture pipeline alone: a CaptureOrchestrator with a real registry and targets, an agent
// link the test plays (it records what profd sends, and can say the connection is gone), and a
// clock the test moves, so that every deadline of the pipeline thread is reached without waiting
// for it. The batches are ones recorded from a real agent on the GPU host.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "daemon/capture/capture_orchestrator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::profd::testing::ReadRecordedBatches;
using ::profd::testing::SourcePath;
using ::profd::testing::TempDir;
using ::profd::testing::WaitFor;
using ::testing::HasSubstr;

constexpr ConnectionId kConnection = 7;
constexpr char kFixture[] = "tests/fixtures/burst_1000_kernels.batches.pb";

// The agent's side of the channel as the pipeline sees it.
class FakeAgentLink final : public AgentLink {
 public:
  bool Send(ConnectionId connection, const v1::DaemonMessage& message) override {
    MutexLock lock(&mu_);
    EXPECT_EQ(connection, kConnection);
    sent_.push_back(message);
    return connected_;
  }
  void Disconnect() {
    MutexLock lock(&mu_);
    connected_ = false;
  }
  std::vector<v1::DaemonMessage> sent() const {
    MutexLock lock(&mu_);
    return sent_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::DaemonMessage> sent_;
  bool connected_ = true;
};

class FakeClock {
 public:
  absl::Time Now() const {
    MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::Now();
};

uint64_t EventsIn(const v1::EventBatch& b) {
  return b.kernels_size() + b.memcpys_size() + b.memsets_size() + b.api_calls_size() +
         b.syncs_size() + b.memory_ops_size() + b.overheads_size() + b.markers_size();
}

class CapturePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::Hello hello;
    hello.set_agent_version("0.2.0");
    registry_.Register(kConnection, pid_, static_cast<uint32_t>(getuid()), hello, clock_.Now());
    CaptureOptions options;
    options.hostname = "node";
    options.capture_dir = dir_.File("captures");
    options.clock = [this] { return clock_.Now(); };
    orchestrator_ = std::make_unique<CaptureOrchestrator>(std::move(options), &registry_, &agents_,
                                                          &targets_, nullptr);
  }

  std::string Start(uint32_t duration_ms = 1000) {
    v1::CaptureRequest request;
    request.add_pids(pid_);
    request.set_duration_ms(duration_ms);
    absl::StatusOr<std::string> id = orchestrator_->Start(request);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  void Status(const std::string& id, v1::CaptureState state, uint64_t events = 0) {
    v1::CaptureStatus status;
    status.set_capture_id(id);
    status.set_state(state);
    status.set_events(events);
    status.set_enabled_realtime_ns(absl::ToUnixNanos(clock_.Now()));
    if (state == v1::CAPTURE_STATE_FINISHED) {
      status.set_disabled_realtime_ns(absl::ToUnixNanos(clock_.Now()));
    }
    orchestrator_->OnCaptureStatus(kConnection, pid_, status);
  }

  // One batch as the agent channel hands it over: checked, unparsed, in its own frame.
  void Batch(const std::string& id, const std::string& bytes, uint32_t records) {
    auto frame = std::make_unique<char[]>(bytes.size());
    std::memcpy(frame.get(), bytes.data(), bytes.size());
    absl::string_view view(frame.get(), bytes.size());
    orchestrator_->OnEventBatch(
        kConnection, pid_,
        AgentEventBatch(std::move(frame), bytes.size(), view, id, records, nullptr, kConnection));
  }

  // A recorded batch, serialized as the agent sends it; returns its events.
  uint64_t Batch(const std::string& id, const v1::EventBatch& batch) {
    const uint64_t events = EventsIn(batch);
    Batch(id, batch.SerializeAsString(), static_cast<uint32_t>(events));
    return events;
  }

  // The agent has started and sent the fixture's first batch; returns its events.
  uint64_t StartedWithOneBatch(const std::string& id) {
    Status(id, v1::CAPTURE_STATE_STARTED);
    return Batch(id, ReadRecordedBatches(SourcePath(kFixture)).front());
  }

  // The capture once it has ended (the pipeline thread polls every 100 ms of real time).
  v1::CaptureInfo Ended(const std::string& id) {
    v1::CaptureInfo info;
    EXPECT_TRUE(WaitFor(
        [&] {
          std::optional<v1::CaptureInfo> now = orchestrator_->Get(id);
          if (now) info = *now;
          return now && CaptureOrchestrator::Terminal(now->phase());
        },
        absl::Seconds(20)))
        << "capture " << id << " still " << v1::CapturePhase_Name(info.phase());
    return info;
  }

  bool Sent(v1::DaemonMessage::BodyCase body) const {
    for (const v1::DaemonMessage& m : agents_.sent()) {
      if (m.body_case() == body) return true;
    }
    return false;
  }

  const uint32_t pid_ = static_cast<uint32_t>(getpid());
  TempDir dir_;
  FakeClock clock_;
  FakeAgentLink agents_;
  AgentRegistry registry_;
  CaptureTargets targets_{&registry_, nullptr, "node", "agent.sock"};
  std::unique_ptr<CaptureOrchestrator> orchestrator_;
};

TEST_F(CapturePipelineTest, AnAgentsBatchesBecomeTheFolderTraceSummaryAndManifest) {
  const std::string id = Start(1000);
  ASSERT_TRUE(WaitFor([&] { return Sent(v1::DaemonMessage::kStartCapture); }, absl::Seconds(5)));
  const v1::StartCapture start = agents_.sent().front().start_capture();
  EXPECT_EQ(start.capture_id(), id);
  EXPECT_EQ(start.duration_ms(), 1000u);

  Status(id, v1::CAPTURE_STATE_STARTED);
  uint64_t events = 0;
  for (const v1::EventBatch& b : ReadRecordedBatches(SourcePath(kFixture))) events += Batch(id, b);
  ASSERT_GT(events, 1000u);
  clock_.Advance(absl::Seconds(1));
  Status(id, v1::CAPTURE_STATE_FINISHED, events);

  v1::CaptureInfo info = Ended(id);
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_DONE) << info.message();
  ASSERT_EQ(info.processes_size(), 1);
  EXPECT_EQ(info.processes(0).events(), events);
  EXPECT_EQ(info.processes(0).state(), v1::CAPTURE_STATE_FINISHED);
  uint64_t kernels = 0;
  for (const v1::GpuSummary& gpu : info.summary().gpus()) kernels += gpu.kernels();
  EXPECT_EQ(kernels, 1000u);
  const std::filesystem::path folder = info.location();
  EXPECT_TRUE(std::filesystem::exists(folder / "manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(folder / "summary.json"));
  ASSERT_EQ(info.files_size(), 1);
  EXPECT_EQ(info.files(0).name(), absl::StrCat("trace-", pid_, ".json.gz"));
  EXPECT_TRUE(std::filesystem::exists(info.files(0).path()));
  EXPECT_EQ(info.finished_unix_ns(), absl::ToUnixNanos(clock_.Now()));
}

TEST_F(CapturePipelineTest, AnAgentThatNeverStartsFailsAtTheStartTimeoutOnTheCapturesClock) {
  const std::string id = Start(1000);
  ASSERT_TRUE(WaitFor([&] { return Sent(v1::DaemonMessage::kStartCapture); }, absl::Seconds(5)));
  // Real time passes: nothing ends before its deadline on the capture's clock.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(CaptureOrchestrator::Terminal(orchestrator_->Get(id)->phase()));
  clock_.Advance(absl::Seconds(6));  // past the default start timeout of 5 s
  v1::CaptureInfo info = Ended(id);
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_FAILED);
  EXPECT_THAT(info.processes(0).message(), HasSubstr("did not enable CUPTI within 5s"));
}

TEST_F(CapturePipelineTest, AStartedAgentThatNeverEndsFailsAfterItsWindowAndTheFinishTimeout) {
  const std::string id = Start(2000);
  Status(id, v1::CAPTURE_STATE_STARTED);
  clock_.Advance(absl::Seconds(2) + absl::Seconds(29));  // window + under the finish timeout
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(CaptureOrchestrator::Terminal(orchestrator_->Get(id)->phase()));
  clock_.Advance(absl::Seconds(2));
  v1::CaptureInfo info = Ended(id);
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_FAILED);
  EXPECT_THAT(info.processes(0).message(), HasSubstr("no end of capture from the agent"));
}

TEST_F(CapturePipelineTest, CancelTellsTheAgentToStopAndKeepsWhatCame) {
  const std::string id = Start(10000);
  const uint64_t events = StartedWithOneBatch(id);
  ASSERT_TRUE(orchestrator_->Cancel(id).ok());
  ASSERT_TRUE(WaitFor([&] { return Sent(v1::DaemonMessage::kStopCapture); }, absl::Seconds(5)));
  Status(id, v1::CAPTURE_STATE_FINISHED, events);
  v1::CaptureInfo info = Ended(id);
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_CANCELLED);
  EXPECT_EQ(info.processes(0).events(), events);
  ASSERT_EQ(info.files_size(), 1);
  EXPECT_TRUE(std::filesystem::exists(info.files(0).path()));
}

TEST_F(CapturePipelineTest, AnAgentGoneBeforeItsStartFailsItsProcessAtOnce) {
  agents_.Disconnect();
  const std::string id = Start(1000);
  v1::CaptureInfo info = Ended(id);  // no clock moved: the link's answer is enough
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_FAILED);
  EXPECT_THAT(info.processes(0).message(), HasSubstr("the agent disconnected"));
}

TEST_F(CapturePipelineTest, ABatchThatIsNotAnEventBatchFailsItsProcessWithTheReason) {
  const std::string id = Start(1000);
  Status(id, v1::CAPTURE_STATE_STARTED);
  Batch(id, std::string("\xff\xff\xff\xff", 4), 1);
  v1::CaptureInfo info = Ended(id);
  EXPECT_EQ(info.phase(), v1::CAPTURE_PHASE_FAILED);
  EXPECT_THAT(info.processes(0).message(), HasSubstr("not a valid EventBatch (4 bytes)"));
}

TEST_F(CapturePipelineTest, ShutdownEndsARunningCaptureWithWhatItHasAndSaysWhy) {
  const std::string id = Start(10000);
  const uint64_t events = StartedWithOneBatch(id);
  orchestrator_->Shutdown();  // returns once the capture's files are written
  std::optional<v1::CaptureInfo> info = orchestrator_->Get(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(CaptureOrchestrator::Terminal(info->phase()));
  EXPECT_THAT(info->processes(0).message(), HasSubstr("profd shut down during the capture"));
  EXPECT_EQ(info->processes(0).events(), events);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(info->location()) / "manifest.json"));
}

}  // namespace
}  // namespace profd

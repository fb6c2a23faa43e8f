// The flight recorder end to end without a GPU: the real profd and profctl, and the real agent
// whose capture backend replays batches recorded on an H200 (its recorder holds the recording as
// if it had run since the recorder was turned on). `profctl recorder on` reaches the agent,
// `agents` shows it, and `capture --before` begins before the request with the recorder's events.
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(std::vector<std::string>{
        "--capture_dir=" + captures_.path(), "--max_capture_duration=10s"});
    profd_->Start();
    agent_ = StartReplayAgent(profd_->agent_socket());
    ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent_->pid()); }, absl::Seconds(2)));
    pid_ = std::to_string(agent_->pid());
  }

  // The agent's recorder state as `profctl agents --json` shows it.
  rapidjson::Document Agents() const { return profd_->ProfctlJson({"agents", "--json"}); }
  bool RecorderOn() const {
    rapidjson::Document agents = Agents();
    const auto& a = agents["agents"][0];
    return a["recorder"]["on"].GetBool();
  }

  // Kernels in the capture's trace that began before t_ns, and all of them.
  static std::pair<int, int> KernelsBefore(const rapidjson::Value& capture, int64_t t_ns) {
    rapidjson::Document trace = ReadGzipJson(capture["files"][0]["path"].GetString());
    const double base_ns = trace["baseTimeNanoseconds"].GetDouble();
    int before = 0, all = 0;
    for (const auto& e : trace["traceEvents"].GetArray()) {
      if (!e.HasMember("cat") || std::string(e["cat"].GetString()) != "kernel") continue;
      ++all;
      before += base_ns + e["ts"].GetDouble() * 1000 < static_cast<double>(t_ns);
    }
    return {before, all};
  }

  TempDir captures_;
  std::unique_ptr<ProfdProcess> profd_;
  std::unique_ptr<Subprocess> agent_;
  std::string pid_;
};

TEST_F(RecorderTest, CaptureBeforeBeginsWithWhatTheRecorderKept) {
  const int64_t turned_on = absl::ToUnixNanos(absl::Now());
  RunResult on = profd_->Profctl({"recorder", "on", "--pid", pid_, "--span", "5m"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_TRUE(absl::StrContains(on.out, "Flight recorder on for pid " + pid_)) << on.out;
  ASSERT_TRUE(WaitFor([&] { return RecorderOn(); }, absl::Seconds(5)));
  rapidjson::Document agents = Agents();
  EXPECT_EQ(std::stoll(agents["agents"][0]["recorder"]["seconds"].GetString()), 300);
  RunResult text = profd_->Profctl({"agents"});
  EXPECT_TRUE(absl::StrContains(text.out, "pid " + pid_ + ": flight recorder on (300 s"))
      << text.out;

  // The recorder has run at least 1.5 s when the capture asks for 5 minutes before it: it gives
  // what it holds, from when it was turned on, and says so.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  rapidjson::Document c =
      profd_->ProfctlJson({"capture", "--pid", pid_, "--duration", "500ms", "--before", "5m"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  EXPECT_EQ(std::stoll(c["before_ms"].GetString()), 300000);
  const auto& p = c["processes"][0];
  const int64_t requested = std::stoll(c["requested_unix_ns"].GetString());
  const int64_t recorded_from = std::stoll(p["recorded_from_unix_ns"].GetString());
  EXPECT_GE(recorded_from, turned_on) << "the recorder holds only since it was turned on";
  EXPECT_GT(requested - recorded_from, 1500000000);
  EXPECT_EQ(std::stoull(p["events"].GetString()), 2 * 2008u);  // the recorder's part and the live
  auto [before, all] = KernelsBefore(c, requested);
  EXPECT_EQ(before, 1000);
  EXPECT_EQ(all, 2000);
  // The report says which part of its window came from before the request.
  rapidjson::Document report =
      ReadGzipJson(std::string(c["location"].GetString()) + "/summary.json");
  bool noted = false;
  for (const auto& n : report["notes"].GetArray()) {
    noted |= absl::StrContains(n.GetString(), "before the request come from its flight recorder");
  }
  EXPECT_TRUE(noted);

  // The capture's summary line says where its part from before the request begins.
  RunResult shown =
      profd_->Profctl({"capture", "--pid", pid_, "--duration", "300ms", "--before", "1s"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(absl::StrContains(shown.out, "before the request (flight recorder)")) << shown.out;

  // Off: a capture asking for the time before gets none, and says why.
  ASSERT_EQ(profd_->Profctl({"recorder", "off", "--pid", pid_}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return !RecorderOn(); }, absl::Seconds(5)));
  rapidjson::Document off =
      profd_->ProfctlJson({"capture", "--pid", pid_, "--duration", "300ms", "--before", "2s"});
  ASSERT_STREQ(off["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  EXPECT_EQ(std::stoll(off["processes"][0]["recorded_from_unix_ns"].GetString()), 0);
  EXPECT_EQ(KernelsBefore(off, std::stoll(off["requested_unix_ns"].GetString())).first, 0);
}

TEST_F(RecorderTest, BadFlagsAndUnknownProcessesAreRefusedWithTheirReason) {
  RunResult no_target = profd_->Profctl({"recorder", "on"});
  EXPECT_EQ(no_target.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(no_target.err, "profctl: say which processes")) << no_target.err;
  RunResult bad_state = profd_->Profctl({"recorder", "maybe", "--pid", pid_});
  EXPECT_EQ(bad_state.exit_code, 2);
  RunResult bad_duty = profd_->Profctl({"recorder", "on", "--pid", pid_, "--duty", "1s/100ms"});
  EXPECT_EQ(bad_duty.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad_duty.err, "ON must be shorter than PERIOD")) << bad_duty.err;
  RunResult far = profd_->Profctl({"capture", "--pid", pid_, "--before", "10m"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(far.err, "--before 10m is outside 0..5m")) << far.err;
  RunResult unknown = profd_->Profctl({"recorder", "on", "--pid", "999999"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(unknown.err, "999999")) << unknown.err;
  EXPECT_FALSE(RecorderOn());
}

}  // namespace
}  // namespace profd::testing

// torch.profiler and profd captures in one process, end to end without a GPU: the real profd,
// profctl and libprofagent.so; in the child process a fake CUDA driver and a fake Kineto that
// calls a fake libcupti.so.13 through its PLT (tests/agent/cupti_fakes/), loaded before the agent
// as PyTorch's libraries are. CUPTI 13.0's one-subscriber rule is enforced by the fake.
#include <signal.h>

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

const rapidjson::Value* FindAgent(const rapidjson::Document& doc, pid_t pid) {
  if (!doc.IsObject() || !doc.HasMember("agents")) return nullptr;
  for (const auto& a : doc["agents"].GetArray()) {
    if (a["pid"].GetInt() == pid) return &a;
  }
  return nullptr;
}

bool Contains(const rapidjson::Value& array, const std::string& text) {
  if (!array.IsArray()) return false;
  for (const auto& v : array.GetArray()) {
    if (v.IsString() && text == v.GetString()) return true;
  }
  return false;
}

class CuptiSharingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(
        std::vector<std::string>{"--capture_dir=" + captures_.path(), "--max_capture_duration=10s",
                                 "--heartbeat_interval=100ms"});
    profd_->Start();
  }

  // The process: PyTorch-like libraries first, then CUDA starts and loads the agent; Kineto
  // initializes (subscribes) right after. SIGUSR1/SIGUSR2 start and stop a torch.profiler session.
  std::unique_ptr<Subprocess> StartHost(std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {BuildPath("tests/integration/agent_host"),
                                     BuildPath("agent/libprofagent.so"),
                                     "--preload",
                                     BuildPath("tests/agent/fake_cuda/libcuda.so.1"),
                                     "--preload",
                                     BuildPath("tests/agent/libfake_kineto.so"),
                                     "--call",
                                     "fakekineto_init",
                                     "--on-usr1",
                                     "fakekineto_start_session",
                                     "--on-usr2",
                                     "fakekineto_stop_session"};
    argv.insert(argv.end(), more.begin(), more.end());
    return std::make_unique<Subprocess>(
        argv,
        std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", profd_->agent_socket()},
                                           {"PROFD_AGENT_LOG", "2"}},
        host_dir_.File("host"));
  }
  std::string HostOut() const { return ReadFileOrEmpty(host_dir_.File("host")); }
  std::string HostLog() const { return ReadFileOrEmpty(host_dir_.File("host.err")); }
  // How many times the host printed `line` (e.g. "fakekineto_start_session -> 0").
  int HostSaid(const std::string& line) const {
    std::string out = HostOut();
    int n = 0;
    for (size_t at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) ++n;
    return n;
  }

  // The agent's cupti_sharing as `profctl agents --json` shows it, once it has one.
  rapidjson::Document Agents() const { return profd_->ProfctlJson({"agents"}); }
  bool SharingSays(pid_t pid, const std::function<bool(const rapidjson::Value&)>& check) const {
    return AgentSays(pid, "cupti_sharing", check);
  }
  // Its flight recorder's state.
  bool RecorderSays(pid_t pid, const std::function<bool(const rapidjson::Value&)>& check) const {
    return AgentSays(pid, "recorder", check);
  }
  bool RecorderPausedFor(pid_t pid, const std::string& why) const {
    return RecorderSays(pid, [&](const rapidjson::Value& r) {
      return r["paused"].GetBool() &&
             std::string(r["detail"].GetString()).find(why) != std::string::npos;
    });
  }
  bool AgentSays(pid_t pid, const char* member,
                 const std::function<bool(const rapidjson::Value&)>& check) const {
    rapidjson::Document doc = Agents();
    const rapidjson::Value* a = FindAgent(doc, pid);
    return a != nullptr && a->HasMember(member) && check((*a)[member]);
  }

  TempDir captures_;
  TempDir host_dir_;
  std::unique_ptr<ProfdProcess> profd_;
};

TEST_F(CuptiSharingTest, TorchProfilerAndCapturesTakeTurns) {
  auto host = StartHost();
  const pid_t pid = host->pid();
  const std::string p = std::to_string(pid);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("ready") != std::string::npos; }, absl::Seconds(5)))
      << HostOut() << HostLog();
  // Kineto's init succeeded beside the agent's counters (without sharing: error 39).
  EXPECT_NE(HostOut().find("fakekineto_init -> 0"), std::string::npos) << HostOut() << HostLog();
  ASSERT_TRUE(WaitFor(
      [&] {
        return SharingSays(pid, [](const rapidjson::Value& s) {
          return s.HasMember("clients") && s["clients"].Size() > 0;
        });
      },
      absl::Seconds(5)))
      << profd_->log() << HostLog();
  {
    rapidjson::Document doc = Agents();
    const rapidjson::Value& s = (*FindAgent(doc, pid))["cupti_sharing"];
    EXPECT_STREQ(s["mode"].GetString(), "CUPTI_SHARING_SHARED");
    EXPECT_TRUE(Contains(s["interposed"], "libfake_kineto.so"));
    EXPECT_TRUE(
        Contains(s["clients"], "libfake_kineto.so: CUPTI subscriber, shared through the agent"));
    RunResult table = profd_->Profctl({"agents"});
    EXPECT_NE(table.out.find("CUPTI"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("shared"), std::string::npos) << table.out;
  }

  // Before a torch.profiler session: captures work.
  rapidjson::Document before = profd_->ProfctlJson({"capture", "--pid", p, "--duration", "300ms"});
  EXPECT_STREQ(before["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log() << HostLog();

  // During one: refused, saying who holds it; torch's session is left alone.
  host->Signal(SIGUSR1);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("fakekineto_start_session -> 0") != std::string::npos; },
              absl::Seconds(5)))
      << HostOut();
  ASSERT_TRUE(WaitFor(
      [&] {
        return SharingSays(pid, [](const rapidjson::Value& s) {
          return s.HasMember("other_tracing") && s["other_tracing"].GetBool();
        });
      },
      absl::Seconds(5)));
  RunResult during = profd_->Profctl({"capture", "--pid", p, "--duration", "300ms"});
  EXPECT_EQ(during.exit_code, 5) << during.out << during.err;
  EXPECT_NE((during.out + during.err)
                .find("libfake_kineto.so is tracing CUDA activity in this process right now"),
            std::string::npos)
      << during.out << during.err;
  RunResult table = profd_->Profctl({"agents"});
  EXPECT_NE(table.out.find("shared, in use"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("libfake_kineto.so is tracing CUDA activity: captures are refused"),
            std::string::npos)
      << table.out;

  // After it: captures work again.
  host->Signal(SIGUSR2);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("fakekineto_stop_session -> 0") != std::string::npos; },
              absl::Seconds(5)));
  rapidjson::Document after = profd_->ProfctlJson({"capture", "--pid", p, "--duration", "300ms"});
  EXPECT_STREQ(after["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log() << HostLog();

  // A session that starts during a capture comes first: the capture ends early, marked.
  RunResult cut;
  std::thread capture([&] {
    cut = profd_->Profctl({"--json", "capture", "--pid", p, "--duration", "8s"});
  });
  bool started =
      WaitFor([&] { return HostLog().find("CUPTI enabled for 8000 ms") != std::string::npos; },
              absl::Seconds(5));
  absl::Time signalled = absl::Now();
  host->Signal(SIGUSR1);
  capture.join();
  ASSERT_TRUE(started) << HostLog();
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(5));
  rapidjson::Document doc;
  doc.Parse(cut.out.c_str());
  ASSERT_FALSE(doc.HasParseError()) << cut.out << cut.err;
  EXPECT_STREQ(doc["phase"].GetString(), "CAPTURE_PHASE_DONE") << cut.out;
  const rapidjson::Value& process = doc["processes"][0];
  EXPECT_STREQ(process["error"].GetString(), "CAPTURE_ERROR_CUT_SHORT") << cut.out;
  std::string message = process["message"].GetString();
  EXPECT_NE(message.find("cut short after"), std::string::npos) << message;
  EXPECT_NE(message.find("libfake_kineto.so started tracing CUDA activity in this process"),
            std::string::npos)
      << message;
  EXPECT_NE(HostLog().find("profd capture cut short"), std::string::npos) << HostLog();
  EXPECT_TRUE(WaitFor(
      [&] {
        return SharingSays(pid, [](const rapidjson::Value& s) {
          return s.HasMember("captures_cut_short") && s["captures_cut_short"].GetUint() == 1;
        });
      },
      absl::Seconds(3)));
}

// CUPTI keeps counting records it dropped for want of a buffer until someone reads the count:
// one dropped before a capture began (here at start-up; on a GPU, a kernel record completing after
// the previous capture stopped) is not the capture's, which loses nothing of its own.
TEST_F(CuptiSharingTest, ACaptureIsNotChargedWithRecordsDroppedBeforeIt) {
  auto host = StartHost({"--call", "fakecupti_drop_one", "--on-usr1", "fakecupti_record_api_call"});
  const std::string p = std::to_string(host->pid());
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("ready") != std::string::npos; }, absl::Seconds(5)))
      << HostOut() << HostLog();
  ASSERT_TRUE(WaitFor(
      [&] {
        rapidjson::Document doc = Agents();
        return FindAgent(doc, host->pid()) != nullptr;
      },
      absl::Seconds(5)));
  rapidjson::Document capture;
  // Long enough to be seen running by a profctl that polls under a sanitizer on a loaded machine.
  std::thread capturing([&] {
    capture = profd_->ProfctlJson({"capture", "--pid", p, "--duration", "4s"});
  });
  const bool running = WaitFor(
      [&] {
        rapidjson::Document d = profd_->ProfctlJson({"captures", "--limit", "1"});
        return d.IsObject() && d.HasMember("captures") && d["captures"].Size() > 0 &&
               std::string(d["captures"][0]["phase"].GetString()) == "CAPTURE_PHASE_RUNNING";
      },
      absl::Seconds(5));
  if (running) host->Signal(SIGUSR1);  // one record, in the capture's buffer
  capturing.join();
  ASSERT_TRUE(running) << profd_->log();
  ASSERT_TRUE(capture.IsObject() && capture.HasMember("phase")) << profd_->log() << HostLog();
  ASSERT_STREQ(capture["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log() << HostLog();
  ASSERT_TRUE(capture["processes"].IsArray() && capture["processes"].Size() == 1);
  EXPECT_STREQ(capture["processes"][0]["dropped_records"].GetString(), "0") << HostLog();
  EXPECT_STREQ(capture["summary"]["dropped_records"].GetString(), "0");
  EXPECT_NE(HostLog().find("records CUPTI dropped before it began are not its own"),
            std::string::npos)
      << HostLog();
}

// The flight recorder is a CUPTI session that never holds CUPTI against anyone: torch.profiler's
// session pauses it (Kineto gets CUPTI as without the agent), a capture suspends it and it records
// again after each; `profctl agents` says which.
TEST_F(CuptiSharingTest, TheFlightRecorderStepsAsideForTorchProfilerAndForCaptures) {
  auto host = StartHost();
  const pid_t pid = host->pid();
  const std::string p = std::to_string(pid);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("ready") != std::string::npos; }, absl::Seconds(5)))
      << HostOut() << HostLog();
  ASSERT_TRUE(WaitFor([&] { return FindAgent(Agents(), pid) != nullptr; }, absl::Seconds(5)));
  auto recording = [&] {
    return RecorderSays(pid, [](const rapidjson::Value& r) {
      return r["on"].GetBool() && !r["paused"].GetBool() &&
             std::stoull(r["covered_since_realtime_ns"].GetString()) > 0;
    });
  };
  ASSERT_EQ(profd_->Profctl({"recorder", "on", "--pid", p}).exit_code, 0);
  ASSERT_TRUE(WaitFor(recording, absl::Seconds(5))) << profd_->log() << HostLog();

  // torch.profiler starts: the recorder lets CUPTI go before Kineto's session begins.
  host->Signal(SIGUSR1);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("fakekineto_start_session -> 0") != std::string::npos; },
              absl::Seconds(5)))
      << HostOut() << HostLog();
  EXPECT_TRUE(
      WaitFor([&] { return RecorderPausedFor(pid, "libfake_kineto.so traces CUDA activity"); },
              absl::Seconds(5)))
      << profd_->ProfctlJson({"agents"})["agents"][0]["recorder"]["detail"].GetString();
  RunResult table = profd_->Profctl({"agents"});
  EXPECT_NE(table.out.find("flight recorder on (10 s, at most 64.0 MiB): paused while"),
            std::string::npos)
      << table.out;
  // It ends: the recorder records again.
  host->Signal(SIGUSR2);
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("fakekineto_stop_session -> 0") != std::string::npos; },
              absl::Seconds(5)));
  EXPECT_TRUE(WaitFor(recording, absl::Seconds(5))) << HostLog();

  // A capture asked to begin before the request takes CUPTI from the recorder and gives it back.
  rapidjson::Document c =
      profd_->ProfctlJson({"capture", "--pid", p, "--duration", "300ms", "--before", "5s"});
  EXPECT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log() << HostLog();
  EXPECT_TRUE(WaitFor(recording, absl::Seconds(5))) << HostLog();

  ASSERT_EQ(profd_->Profctl({"recorder", "off", "--pid", p}).exit_code, 0);
  EXPECT_TRUE(WaitFor(
      [&] {
        return RecorderSays(pid, [](const rapidjson::Value& r) { return !r["on"].GetBool(); });
      },
      absl::Seconds(5)));
  // Kineto still gets CUPTI after all of it.
  host->Signal(SIGUSR1);
  EXPECT_TRUE(
      WaitFor([&] { return HostSaid("fakekineto_start_session -> 0") >= 2; }, absl::Seconds(5)))
      << HostOut();
}

// The process turns its own recorder on, duty-cycled (profagent_set_recorder). Between windows
// the recorder keeps its claim on CUPTI: a torch.profiler session started in a window cuts it
// short, one started between windows is seen before the next window; either way Kineto gets CUPTI
// and the recorder waits for it.
TEST_F(CuptiSharingTest, ADutyCycledRecorderStepsAsideInAndBetweenItsWindows) {
  auto host = StartHost({"--recorder", "30/100"});
  const pid_t pid = host->pid();
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("ready") != std::string::npos; }, absl::Seconds(5)))
      << HostOut() << HostLog();
  EXPECT_NE(HostOut().find("profagent_set_recorder -> 0"), std::string::npos) << HostOut();
  // profd hears of it as of one it turned on.
  auto recording = [&] {
    return RecorderSays(pid, [](const rapidjson::Value& r) {
      return r["on"].GetBool() && !r["paused"].GetBool() &&
             std::string(r["duty_on_ms"].GetString()) == "30" &&
             std::string(r["duty_period_ms"].GetString()) == "100" &&
             std::stoull(r["covered_since_realtime_ns"].GetString()) > 0;
    });
  };
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE("Kineto session " + std::to_string(round));
    ASSERT_TRUE(WaitFor(recording, absl::Seconds(5))) << profd_->log() << HostLog();
    // Somewhere in the 100 ms period: inside a window or between two.
    absl::SleepFor(absl::Milliseconds(37 * round));
    host->Signal(SIGUSR1);
    ASSERT_TRUE(WaitFor([&] { return HostSaid("fakekineto_start_session -> 0") == round; },
                        absl::Seconds(5)))
        << HostOut() << HostLog();
    EXPECT_TRUE(
        WaitFor([&] { return RecorderPausedFor(pid, "libfake_kineto.so traces CUDA activity"); },
                absl::Seconds(5)));
    host->Signal(SIGUSR2);
    ASSERT_TRUE(WaitFor([&] { return HostSaid("fakekineto_stop_session -> 0") == round; },
                        absl::Seconds(5)));
  }
  EXPECT_TRUE(WaitFor(recording, absl::Seconds(5))) << HostLog();
}

TEST_F(CuptiSharingTest, NewSettingsForARecorderThatIsOnTakeEffectAtOnce) {
  auto host = StartHost({"--recorder", "0/0"});  // on all the time
  const pid_t pid = host->pid();
  uint64_t since = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        return RecorderSays(pid, [&](const rapidjson::Value& r) {
          since = std::stoull(r["covered_since_realtime_ns"].GetString());
          return r["on"].GetBool() && !r["paused"].GetBool() && since > 0;
        });
      },
      absl::Seconds(5)))
      << profd_->log() << HostLog();
  RunResult duty =
      profd_->Profctl({"recorder", "on", "--pid", std::to_string(pid), "--duty", "30ms/100ms"});
  ASSERT_EQ(duty.exit_code, 0) << duty.err;
  // The session starts over with them: its ring covers from a later time, recording 30/100.
  EXPECT_TRUE(WaitFor(
      [&] {
        return RecorderSays(pid, [&](const rapidjson::Value& r) {
          return std::string(r["duty_on_ms"].GetString()) == "30" &&
                 std::string(r["duty_period_ms"].GetString()) == "100" && !r["paused"].GetBool() &&
                 std::stoull(r["covered_since_realtime_ns"].GetString()) > since;
        });
      },
      absl::Seconds(5)))
      << profd_->log() << HostLog();
}

TEST_F(CuptiSharingTest, SharingOffIsSaidLoudly) {
  std::vector<std::string> argv = {BuildPath("tests/integration/agent_host"),
                                   BuildPath("agent/libprofagent.so"),
                                   "--preload",
                                   BuildPath("tests/agent/fake_cuda/libcuda.so.1"),
                                   "--preload",
                                   BuildPath("tests/agent/libfake_kineto.so"),
                                   "--call",
                                   "fakekineto_init"};
  Subprocess host(
      argv, {{"PROFD_AGENT_SOCKET", profd_->agent_socket()}, {"PROFD_AGENT_SHARE_CUPTI", "off"}},
      host_dir_.File("host"));
  ASSERT_TRUE(
      WaitFor([&] { return HostOut().find("ready") != std::string::npos; }, absl::Seconds(5)));
  ASSERT_TRUE(WaitFor(
      [&] {
        return SharingSays(host.pid(), [](const rapidjson::Value& s) {
          return std::string(s["mode"].GetString()) == "CUPTI_SHARING_OFF";
        });
      },
      absl::Seconds(5)))
      << profd_->log();
  RunResult table = profd_->Profctl({"agents"});
  EXPECT_NE(table.out.find("NOT SHARED (off)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("PROFD_AGENT_SHARE_CUPTI=off"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace profd::testing

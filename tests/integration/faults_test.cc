// Captures under faults (issue 13, docs/RELIABILITY.md): profd killed, stopped or starved of
// disk mid-capture, an agent that never reports its end, requests past every bound. The real
// profd and profctl, and the replay agent (the real agent replaying batches recorded on a GPU),
// each test in folders of its own.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "profd/v1/profd.grpc.pb.h"
#include "tests/support/fixtures.h"
#include "tests/support/perfetto/perfetto_trace.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The capture `profctl captures` lists with this id: {phase, message}, or empty strings.
std::pair<std::string, std::string> Listed(const ProfdProcess& profd, const std::string& id) {
  rapidjson::Document list = profd.ProfctlJson({"captures"});  // alive for the loop
  for (const auto& c : list["captures"].GetArray()) {
    if (id == c["capture_id"].GetString())
      return {c["phase"].GetString(), c["message"].GetString()};
  }
  return {"", ""};
}

// The newest capture's id once it is running.
bool Running(const ProfdProcess& profd, std::string* id) {
  rapidjson::Document d = profd.ProfctlJson({"captures", "--limit", "1"});
  if (d["captures"].Empty()) return false;
  *id = d["captures"][0]["capture_id"].GetString();
  return std::string(d["captures"][0]["phase"].GetString()) == "CAPTURE_PHASE_RUNNING";
}

std::vector<std::string> FileNames(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The captured events of a trace: not its metadata (names) nor the flow arrows between them.
int TimedEvents(const rapidjson::Document& trace) {
  int n = 0;
  for (const auto& e : trace["traceEvents"].GetArray()) {
    const std::string ph = e["ph"].GetString();
    n += ph == "X" || ph == "i";
  }
  return n;
}

// Waits until profd has all the replayed events of capture id (the agent sends them at once).
bool AllEventsIn(const ProfdProcess& profd, const std::string& id) {
  rapidjson::Document list = profd.ProfctlJson({"captures"});
  for (const auto& c : list["captures"].GetArray()) {
    if (id == c["capture_id"].GetString()) {
      return std::stoull(c["processes"][0]["events"].GetString()) == 2008;
    }
  }
  return false;
}

// profctl capture in the background, its stdout and stderr in out/.
struct BackgroundCapture {
  BackgroundCapture(const ProfdProcess& profd, pid_t pid, const std::string& duration,
                    std::vector<std::string> extra = {})
      : profctl(Argv(profd, pid, duration, std::move(extra)), {}, out.File("profctl.out")) {}
  static std::vector<std::string> Argv(const ProfdProcess& profd, pid_t pid,
                                       const std::string& duration,
                                       std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        BuildPath("client/profctl"), "--target",   profd.target(), "capture", "--pid",
        std::to_string(pid),         "--duration", duration};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  std::string Said() {
    return ReadFileOrEmpty(out.File("profctl.out")) + ReadFileOrEmpty(out.File("profctl.out.err"));
  }
  TempDir out;
  Subprocess profctl;
};

class CaptureFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(std::vector<std::string>{
        "--capture_dir=" + captures_.path(), "--max_capture_duration=10s"});
    profd_->Start();
    agent_ = StartReplayAgent(profd_->agent_socket());
    ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent_->pid()); }, absl::Seconds(5)));
  }
  std::string Folder(const std::string& id) const { return captures_.path() + "/" + id; }

  TempDir captures_;
  std::unique_ptr<ProfdProcess> profd_;
  std::unique_ptr<Subprocess> agent_;
};

// kill -9 mid-capture: the folder it leaves (a gzip cut anywhere, no manifest) is repaired at
// the next start into a trace that reads, a summary and a manifest that say what happened, and
// the capture is listed by `captures`, `list` and `show`.
TEST_F(CaptureFaultsTest, CaptureOfAKilledProfdIsRepairedAndListedAtRestart) {
  BackgroundCapture capture(*profd_, agent_->pid(), "8s");
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return Running(*profd_, &id); }, absl::Seconds(5)));
  const std::string trace = Folder(id) + "/trace-" + std::to_string(agent_->pid()) + ".json.gz";
  // The replayed batches are all sent at the start: wait until some of the trace is on disk.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        return std::filesystem::file_size(trace, ec) > 0 && !ec;
      },
      absl::Seconds(5)));
  ASSERT_EQ(std::filesystem::exists(Folder(id) + "/manifest.json"), false);
  profd_->Kill();
  EXPECT_EQ(capture.profctl.Wait(), 1);
  EXPECT_THAT(capture.Said(), HasSubstr("profd stopped during capture " + id));
  EXPECT_THAT(capture.Said(), Not(HasSubstr("is it running")));

  profd_->Start();
  auto [phase, message] = Listed(*profd_, id);
  EXPECT_EQ(phase, "CAPTURE_PHASE_FAILED");
  EXPECT_THAT(message, HasSubstr("profd stopped before the capture was finished"));
  EXPECT_THAT(FileNames(Folder(id)),
              ::testing::ElementsAre("manifest.json", "summary.json",
                                     "trace-" + std::to_string(agent_->pid()) + ".json.gz"));
  // The trace reads (a gzip and JSON closed at its last whole event) and says it was cut.
  rapidjson::Document repaired = ReadGzipJson(trace);
  ASSERT_TRUE(repaired.IsObject());
  EXPECT_TRUE(repaired["profd"]["truncated"].GetBool());
  EXPECT_THAT(repaired["profd"]["error"].GetString(), HasSubstr("profd stopped"));
  EXPECT_STREQ(repaired["profd"]["capture_id"].GetString(), id.c_str());
  EXPECT_GT(TimedEvents(repaired), 0);
  rapidjson::Document manifest = ReadGzipJson(Folder(id) + "/manifest.json");
  EXPECT_STREQ(manifest["phase"].GetString(), "CAPTURE_PHASE_FAILED");
  EXPECT_EQ(manifest["files"].Size(), 1u);
  EXPECT_EQ(manifest["processes"][0]["pid"].GetInt(), agent_->pid());
  EXPECT_EQ(std::stoull(manifest["files"][0]["bytes"].GetString()),
            std::filesystem::file_size(trace));

  // In the store too: `list` names it, `show` has its manifest.
  ASSERT_TRUE(WaitFor(
      [&] {
        rapidjson::Document list = profd_->ProfctlJson({"list"});
        for (const auto& t : list["traces"].GetArray()) {
          if (id == t["capture_id"].GetString()) return true;
        }
        return false;
      },
      absl::Seconds(10)))
      << profd_->log();
  rapidjson::Document show = profd_->ProfctlJson({"show", id});
  EXPECT_THAT(show["manifest"]["message"].GetString(), HasSubstr("profd stopped before"));

  // Repaired once: the next start leaves it alone.
  profd_->Stop();
  profd_->Start();
  EXPECT_EQ(Listed(*profd_, id).first, "");
}

// kill -9 mid-capture of a Perfetto capture: the repaired trace (the packets that decompress
// whole) is read back at the next start, and the capture's report (summary.json, the manifest's
// counts) is that of the events it holds, as for a JSON trace; not 0 events and an empty report.
TEST_F(CaptureFaultsTest, PerfettoCaptureOfAKilledProfdReportsWhatItsRepairedTraceHolds) {
  // The recording 30 times over: enough that the trace is flushed to disk before the kill.
  std::unique_ptr<Subprocess> agent = StartReplayAgent(profd_->agent_socket(), "--repeat=30");
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(5)));
  BackgroundCapture capture(*profd_, agent->pid(), "8s", {"--format", "perfetto"});
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return Running(*profd_, &id); }, absl::Seconds(5)));
  const std::string trace = Folder(id) + "/trace-" + std::to_string(agent->pid()) + ".pftrace.gz";
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        return std::filesystem::file_size(trace, ec) > 32 * 1024 && !ec;
      },
      absl::Seconds(10)))
      << profd_->log();
  profd_->Kill();
  EXPECT_EQ(capture.profctl.Wait(), 1);

  profd_->Start();
  EXPECT_EQ(Listed(*profd_, id).first, "CAPTURE_PHASE_FAILED");
  // What the repaired trace holds, decoded with Perfetto's own schema: the slices (kernels,
  // API calls, ...) and the memory operations (instants), the records the capture counts.
  testing::PerfettoTraceContents repaired = testing::ReadPerfettoTrace(trace);
  uint64_t records = repaired.SliceCount(), kernels = 0;
  for (const auto& [uuid, track] : repaired.tracks) {
    if (track.name == "GPU memory") records += track.instants.size();
    for (const testing::PerfettoSlice& slice : track.slices) kernels += slice.args.count("grid");
  }
  ASSERT_GT(kernels, 0u) << "nothing of the trace reached the disk before the kill";
  rapidjson::Document manifest = ReadGzipJson(Folder(id) + "/manifest.json");
  EXPECT_EQ(std::stoull(manifest["processes"][0]["events"].GetString()), records);
  EXPECT_EQ(std::stoull(manifest["summary"]["events"].GetString()), records);
  rapidjson::Document summary = ReadGzipJson(Folder(id) + "/summary.json");
  EXPECT_EQ(summary["events"].GetUint64(), records);
  EXPECT_EQ(summary["kernel_count"].GetUint64(), kernels);
  EXPECT_GT(summary["top_kernels"].Size(), 0u);
  EXPECT_GT(summary["gpus"].Size(), 0u);
  // `profctl show ID` has it from the store.
  ASSERT_TRUE(WaitFor(
      [&] {
        RunResult show = profd_->Profctl({"--json", "show", id});
        return show.exit_code == 0 &&
               absl::StrContains(show.out, absl::StrCat("\"events\": \"", records, "\""));
      },
      absl::Seconds(10)))
      << profd_->Profctl({"--json", "show", id}).out;
  // `profctl report ID` reads the repaired trace: the same kernels.
  rapidjson::Document report = profd_->ProfctlJson({"report", id});
  ASSERT_TRUE(report.HasMember("kernel_count")) << profd_->Profctl({"report", id}).err;
  EXPECT_EQ(report["kernel_count"].GetUint64(), kernels);
}

// SIGTERM mid-capture: the capture ends with its trace, and both the manifest and profctl say
// profd shut down (not that the agent went away, not that profd is not running).
TEST_F(CaptureFaultsTest, ShutdownMidCaptureRecordsTheRightCause) {
  BackgroundCapture capture(*profd_, agent_->pid(), "8s");
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return Running(*profd_, &id); }, absl::Seconds(5)));
  ASSERT_TRUE(WaitFor([&] { return AllEventsIn(*profd_, id); }, absl::Seconds(5)));
  profd_->Stop();
  EXPECT_EQ(capture.profctl.Wait(), 5) << capture.Said();
  EXPECT_THAT(capture.Said(), HasSubstr("profd shut down during the capture"));
  EXPECT_THAT(capture.Said(), Not(HasSubstr("agent disconnected")));
  EXPECT_THAT(capture.Said(), Not(HasSubstr("is it running")));
  rapidjson::Document manifest = ReadGzipJson(Folder(id) + "/manifest.json");
  EXPECT_THAT(manifest["message"].GetString(), HasSubstr("profd shut down during the capture"));
  EXPECT_THAT(manifest["processes"][0]["message"].GetString(),
              HasSubstr("profd shut down during the capture"));
  EXPECT_FALSE(std::filesystem::exists(Folder(id) + "/unfinished.json"));
  rapidjson::Document trace =
      ReadGzipJson(Folder(id) + "/trace-" + std::to_string(agent_->pid()) + ".json.gz");
  EXPECT_EQ(TimedEvents(trace), 2008);  // every event that came before the shutdown
}

// profd keeps --max-events itself, to the event, whatever the agent sends (the replay agent
// ignores the limit and sends all its 2,008 events).
TEST_F(CaptureFaultsTest, ProfdKeepsMaxEventsItself) {
  for (const char* max : {"1", "1500"}) {
    rapidjson::Document c = profd_->ProfctlJson({"capture", "--pid", std::to_string(agent_->pid()),
                                                 "--duration", "300ms", "--max-events", max});
    ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
    EXPECT_TRUE(c["processes"][0]["truncated"].GetBool()) << max;
    rapidjson::Document trace = ReadGzipJson(c["files"][0]["path"].GetString());
    EXPECT_EQ(TimedEvents(trace), std::stoi(max));
    EXPECT_TRUE(trace["profd"]["truncated"].GetBool());
  }
}

// Every delay and duration has a bound, checked by profctl and, for any client, by profd.
TEST_F(CaptureFaultsTest, DelaysDurationsAndLabelsAreBoundedOnBothSides) {
  const std::string pid = std::to_string(agent_->pid());
  RunResult delay =
      profd_->Profctl({"capture", "--pid", pid, "--duration", "1s", "--delay", "1000h"});
  EXPECT_EQ(delay.exit_code, 2);
  EXPECT_THAT(delay.err, HasSubstr("--delay 1000h is over the limit of 1h"));  // as profd says
  RunResult start_at = profd_->Profctl(
      {"capture", "--pid", pid, "--duration", "1s", "--start-at",
       absl::FormatTime(absl::RFC3339_full, absl::Now() + absl::Hours(2), absl::UTCTimeZone())});
  EXPECT_EQ(start_at.exit_code, 2);
  EXPECT_THAT(start_at.err, HasSubstr("--start-at must be within the next hour"));
  // (An argument of 3 MB is past what exec takes: profctl is given 4097 bytes.)
  RunResult label = profd_->Profctl(
      {"capture", "--pid", pid, "--duration", "1s", "--label", std::string(4097, 'x')});
  EXPECT_EQ(label.exit_code, 2);
  EXPECT_THAT(label.err, HasSubstr("--label is 4097 bytes; a label may have at most 4096"));

  // A client that is not profctl: profd refuses the same.
  auto stub =
      v1::Profd::NewStub(grpc::CreateChannel(profd_->target(), grpc::InsecureChannelCredentials()));
  auto refused = [&](const v1::CaptureRequest& request) {
    grpc::ClientContext ctx;
    // A capture profd takes would stream until its end: fail instead of waiting for it.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = stub->Capture(&ctx, request);
    v1::CaptureProgress progress;
    EXPECT_FALSE(reader->Read(&progress)) << "the capture started";
    return reader->Finish();
  };
  v1::CaptureRequest request;
  request.add_pids(agent_->pid());
  request.set_duration_ms(1000);
  request.set_delay_ms(1000u * 3600 * 1000);  // 1000h
  grpc::Status s = refused(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--delay 1000h is over the limit of 1h"));
  request.set_delay_ms(0);
  request.set_start_at_unix_ns(absl::ToUnixNanos(absl::Now() + absl::Hours(2)));
  s = refused(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--start-at must be within the next hour"));
  request.set_start_at_unix_ns(0);
  request.set_duration_ms(UINT32_MAX);
  s = refused(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("over this profd's limit of 10s"));
  request.set_duration_ms(1000);
  request.set_label(std::string(3 << 20, 'x'));
  s = refused(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("a label may have at most 4096"));

  // At the bound: accepted, and `show` of it works.
  rapidjson::Document c = profd_->ProfctlJson(
      {"capture", "--pid", pid, "--duration", "300ms", "--label", std::string(4096, 'l')});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE");
  const std::string id = c["capture_id"].GetString();
  ASSERT_TRUE(WaitFor(
      [&] {
        return profd_->Profctl({"show", id}).exit_code == 0;
      },
      absl::Seconds(10)));
}

class CaptureStalledAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(
        std::vector<std::string>{"--capture_dir=" + captures_.path(), "--max_capture_duration=10s",
                                 "--capture_cancel_timeout=500ms"});
    profd_->Start();
    agent_ = StartReplayAgent(profd_->agent_socket(), "--never-finish");
    ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent_->pid()); }, absl::Seconds(5)));
  }
  TempDir captures_;
  std::unique_ptr<ProfdProcess> profd_;
  std::unique_ptr<Subprocess> agent_;
};

// An agent that never reports its end (its capture thread stalled) no longer keeps a cancelled
// capture "finishing" to the end of its window plus the finish timeout (40 s here): the cancel
// timeout ends it, the trace keeps what came, and the pid is free again.
TEST_F(CaptureStalledAgentTest, CancelEndsTheCaptureWithinTheCancelTimeout) {
  BackgroundCapture capture(*profd_, agent_->pid(), "10s");
  std::string id;
  ASSERT_TRUE(WaitFor([&] { return Running(*profd_, &id); }, absl::Seconds(5)));
  RunResult cancel = profd_->Profctl({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  ASSERT_TRUE(WaitFor([&] { return Listed(*profd_, id).first == "CAPTURE_PHASE_CANCELLED"; },
                      absl::Seconds(8)))
      << Listed(*profd_, id).first;
  EXPECT_EQ(capture.profctl.Wait(), 0) << capture.Said();
  rapidjson::Document info = profd_->ProfctlJson({"captures", "--limit", "1"});
  EXPECT_THAT(info["captures"][0]["processes"][0]["message"].GetString(),
              HasSubstr("cancelled, and the agent did not report its end within 500ms"));
  EXPECT_EQ(info["captures"][0]["files"].Size(), 1u);
  // The pid is no longer locked by the capture.
  RunResult again =
      profd_->Profctl({"capture", "--pid", std::to_string(agent_->pid()), "--duration", "100ms"});
  EXPECT_THAT(again.err, Not(HasSubstr("already being captured")));
}

// The disk of --capture_dir fills mid-capture (a 16 KiB tmpfs mounted in profd's own mount
// namespace; `unshare` needs root or unprivileged user namespaces, else the test is skipped):
// the capture fails saying "disk full", and nothing is left that looks whole, temp files
// included.
TEST(CaptureDiskFullTest, FullDiskFailsTheCaptureSayingSoAndLeavesNoFile) {
  TempDir dir;
  const std::string captures = dir.File("captures");
  std::filesystem::create_directories(captures);
  const std::vector<std::string> unshare = {"/usr/bin/unshare", geteuid() == 0 ? "-m" : "-rm"};
  std::vector<std::string> probe = unshare;
  for (const char* a :
       {"/bin/sh", "-c", "mount -t tmpfs -o size=16k,mode=0700 profd-full \"$0\"", ""}) {
    probe.push_back(a);
  }
  probe.back() = captures;
  if (RunResult r = testing::Run(probe); r.exit_code != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs in a mount namespace here: " << r.err;
  }
  ProfdProcess profd(
      {"--capture_dir=" + captures, "--max_capture_duration=10s", "--capture_min_free=0"});
  std::vector<std::string> launcher = unshare;
  for (const char* a :
       {"/bin/sh", "-c", "mount -t tmpfs -o size=16k,mode=0700 profd-full \"$0\" && exec \"$@\"",
        ""}) {
    launcher.push_back(a);
  }
  launcher.back() = captures;
  profd.set_launcher(launcher);
  profd.Start();
  // profd's view of its capture folder: the tmpfs, in its own mount namespace.
  const std::string seen = absl::StrCat("/proc/", profd.pid(), "/root", captures);
  auto agent = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(profd, agent->pid()); }, absl::Seconds(5)));
  RunResult r =
      profd.Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration", "300ms"});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("disk full (ENOSPC"));
  EXPECT_THAT(r.err, HasSubstr("nothing of the capture was kept"));
  rapidjson::Document list = profd.ProfctlJson({"captures", "--limit", "1"});
  EXPECT_STREQ(list["captures"][0]["phase"].GetString(), "CAPTURE_PHASE_FAILED");
  EXPECT_EQ(list["captures"][0]["files"].Size(), 0u);
  EXPECT_THAT(FileNames(seen), ::testing::IsEmpty()) << "left in the capture folder";
}

}  // namespace
}  // namespace profd::testing

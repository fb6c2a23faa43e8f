// Captures end to end without a GPU: the real profd and profctl, and in the child process the
// real agent whose capture backend replays batches recorded from a real H200 capture (or, for the
// error paths, the real CUPTI backend in a process that never loaded CUDA).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/perfetto/perfetto_trace.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

class CaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(std::vector<std::string>{
        "--capture_dir=" + captures_.path(), "--max_capture_duration=10s"});
    profd_->Start();
  }
  TempDir captures_;
  std::unique_ptr<ProfdProcess> profd_;
};

TEST_F(CaptureTest, CaptureWritesTraceManifestAndSummary) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));

  rapidjson::Document c = profd_->ProfctlJson(
      {"capture", "--pid", std::to_string(agent->pid()), "--duration", "500ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  ASSERT_EQ(c["files"].Size(), 1u);
  std::string trace_path = c["files"][0]["path"].GetString();
  std::string folder = c["location"].GetString();
  EXPECT_TRUE(std::filesystem::exists(folder + "/manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(folder + "/summary.json"));
  EXPECT_EQ(std::filesystem::file_size(trace_path),
            std::stoull(c["files"][0]["bytes"].GetString()));
  EXPECT_EQ(std::string(c["files"][0]["sha256"].GetString()).size(), 64u);
  const auto& p = c["processes"][0];
  EXPECT_EQ(p["pid"].GetInt(), agent->pid());
  EXPECT_EQ(std::stoull(p["events"].GetString()), 2008u);  // 1000 kernels + 1004 API + 4 GPU ops
  EXPECT_GE(std::stoll(p["start_latency_ns"].GetString()), 0);

  rapidjson::Document trace = ReadGzipJson(trace_path);
  int kernels = 0;
  for (const auto& e : trace["traceEvents"].GetArray()) {
    kernels += e.HasMember("cat") && std::string(e["cat"].GetString()) == "kernel";
  }
  EXPECT_EQ(kernels, 1000);
  EXPECT_STREQ(trace["profd"]["capture_id"].GetString(), c["capture_id"].GetString());

  // The summary: the kernel table the seeds read.
  const auto& top = c["summary"]["top_kernels"][0];
  EXPECT_STREQ(top["name"].GetString(), "profd_test_kernel(int*, int)");
  EXPECT_EQ(std::stoull(top["count"].GetString()), 1000u);
  // summary.json is the bottleneck report of the capture (analysis), made at capture time.
  rapidjson::Document report = ReadGzipJson(folder + "/summary.json");
  ASSERT_TRUE(report.HasMember("top_kernels"));
  EXPECT_STREQ(report["top_kernels"][0]["name"].GetString(), "profd_test_kernel(int*, int)");
  EXPECT_TRUE(report.HasMember("findings"));
  // The manifest is the capture's record in the store: it names the same trace and checksum.
  rapidjson::Document manifest = ReadGzipJson(folder + "/manifest.json");  // gzread reads plain too
  EXPECT_STREQ(manifest["files"][0]["sha256"].GetString(), c["files"][0]["sha256"].GetString());
}

// --format perfetto: the trace is Perfetto protobuf (read here with Perfetto's field numbers),
// named and described as such, with the same kernels; the report does not depend on the format.
// profd's --trace_format sets the default, which a request overrides; a wrong name is refused.
TEST_F(CaptureTest, PerfettoFormatWritesProtobufTracesWithTheSameSummary) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  const std::string pid = std::to_string(agent->pid());
  rapidjson::Document c =
      profd_->ProfctlJson({"capture", "--pid", pid, "--duration", "500ms", "--format", "perfetto"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  ASSERT_EQ(c["files"].Size(), 1u);
  const std::string trace_path = c["files"][0]["path"].GetString();
  EXPECT_TRUE(trace_path.ends_with("/trace-" + pid + ".pftrace.gz")) << trace_path;
  EXPECT_STREQ(c["files"][0]["format"].GetString(), "perfetto-pb-gz");
  EXPECT_EQ(std::stoull(c["processes"][0]["events"].GetString()), 2008u);
  PerfettoTraceContents trace = ReadPerfettoTrace(trace_path);
  EXPECT_TRUE(trace.problems.empty()) << absl::StrJoin(trace.problems, "\n");
  size_t kernels = 0;
  for (const auto& [uuid, t] : trace.tracks) {
    for (const auto& slice : t.slices) kernels += slice.name == "profd_test_kernel(int*, int)";
  }
  EXPECT_EQ(kernels, 1000u);
  EXPECT_STREQ(c["summary"]["top_kernels"][0]["name"].GetString(), "profd_test_kernel(int*, int)");
  EXPECT_EQ(std::stoull(c["summary"]["top_kernels"][0]["count"].GetString()), 1000u);

  RunResult bad = profd_->Profctl({"capture", "--pid", pid, "--duration", "1s", "--format", "xml"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--format"), std::string::npos) << bad.err;

  ProfdProcess perfetto_by_default({"--trace_format=perfetto"});
  perfetto_by_default.Start();
  auto second = StartReplayAgent(perfetto_by_default.agent_socket());
  ASSERT_TRUE(
      WaitFor([&] { return Registered(perfetto_by_default, second->pid()); }, absl::Seconds(2)));
  const std::string second_pid = std::to_string(second->pid());
  rapidjson::Document d =
      perfetto_by_default.ProfctlJson({"capture", "--pid", second_pid, "--duration", "300ms"});
  ASSERT_EQ(d["files"].Size(), 1u);
  EXPECT_STREQ(d["files"][0]["format"].GetString(), "perfetto-pb-gz");
  rapidjson::Document e = perfetto_by_default.ProfctlJson(
      {"capture", "--pid", second_pid, "--duration", "300ms", "--format", "json"});
  ASSERT_EQ(e["files"].Size(), 1u);
  EXPECT_STREQ(e["files"][0]["format"].GetString(), "chrome-json-gz");
}

// A Perfetto capture is used as a JSON one is: `profctl report ID`, `report FILE` (also under
// a name that hides its format), `diff` against a JSON trace; and its file never carries a JSON
// name (--output x.json.gz with --format perfetto is refused; with profd's --trace_format
// perfetto the copy is renamed).
TEST_F(CaptureTest, PerfettoCapturesAreReportedDiffedAndNamedLikeJsonOnes) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  const std::string pid = std::to_string(agent->pid());
  rapidjson::Document c =
      profd_->ProfctlJson({"capture", "--pid", pid, "--duration", "300ms", "--format", "perfetto"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  const std::string id = c["capture_id"].GetString();
  const std::string pftrace = c["files"][0]["path"].GetString();

  RunResult by_id = profd_->Profctl({"report", id});
  EXPECT_EQ(by_id.exit_code, 0) << by_id.err;
  EXPECT_NE(by_id.out.find("profd_test_kernel(int*, int)"), std::string::npos) << by_id.out;
  TempDir out;
  std::filesystem::copy_file(pftrace, out.File("hidden.trace.gz"));
  for (const std::string& file : {pftrace, out.File("hidden.trace.gz")}) {
    rapidjson::Document r = profd_->ProfctlJson({"report", file});
    ASSERT_TRUE(r.HasMember("kernel_count")) << file;
    EXPECT_EQ(r["kernel_count"].GetUint64(), 1000u) << file;
  }
  rapidjson::Document j = profd_->ProfctlJson({"capture", "--pid", pid, "--duration", "300ms"});
  const std::string json_trace = j["files"][0]["path"].GetString();
  RunResult diff = profd_->Profctl({"diff", json_trace, pftrace});
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_NE(diff.out.find("profd_test_kernel"), std::string::npos) << diff.out;

  RunResult refused = profd_->Profctl({"capture", "--pid", pid, "--duration", "300ms", "--format",
                                       "perfetto", "--output", out.File("x.json.gz")});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--output " + out.File("x.pftrace.gz")), std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(out.File("x.json.gz")));

  ProfdProcess perfetto_by_default({"--trace_format=perfetto"});
  perfetto_by_default.Start();
  auto second = StartReplayAgent(perfetto_by_default.agent_socket());
  ASSERT_TRUE(
      WaitFor([&] { return Registered(perfetto_by_default, second->pid()); }, absl::Seconds(2)));
  RunResult renamed =
      perfetto_by_default.Profctl({"capture", "--pid", std::to_string(second->pid()), "--duration",
                                   "300ms", "--output", out.File("y.json.gz")});
  EXPECT_EQ(renamed.exit_code, 0) << renamed.err;
  EXPECT_TRUE(std::filesystem::exists(out.File("y.pftrace.gz"))) << renamed.out;
  EXPECT_FALSE(std::filesystem::exists(out.File("y.json.gz"))) << renamed.out;
  EXPECT_NE(renamed.out.find("copied to " + out.File("y.pftrace.gz")), std::string::npos)
      << renamed.out;
}

// --start-at: the capture starts at that wall-clock time (a common start across nodes), not at
// the request, and runs its duration from there.
TEST_F(CaptureTest, StartAtStartsTheCaptureThen) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  const absl::Time start = absl::Now() + absl::Milliseconds(1500);
  RunResult r = profd_->Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration",
                                 "300ms", "--start-at",
                                 absl::FormatTime(absl::RFC3339_full, start, absl::UTCTimeZone())});
  const absl::Time returned = absl::Now();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2,008 events"), std::string::npos) << r.out;
  EXPECT_GE(returned, start + absl::Milliseconds(300)) << "returned before the window ended";
  // The events are the window's: after the start asked for.
  rapidjson::Document c = profd_->ProfctlJson({"captures", "--limit", "1"});
  const auto& p = c["captures"][0]["processes"][0];
  EXPECT_GE(std::stoll(p["enabled_unix_ns"].GetString()), absl::ToUnixNanos(start)) << r.out;
}

// A number of profctl's --json output: proto JSON writes 64-bit integers as strings.
double Num(const rapidjson::Value& v) {
  return v.IsString() ? std::stod(v.GetString()) : v.GetDouble();
}

// One summary, one definition: `profctl capture`, `captures`, `show`, `report ID`, the capture's
// summary.json and `profctl report` of its trace file print the same window, event count, busy
// share and kernel table (docs/ANALYSIS.md).
TEST(CaptureNumbersTest, EveryCommandReportsTheSameNumbers) {
  TempDir dir;
  ProfdProcess profd({"--capture_dir=" + dir.File("captures"),
                      "--store=file://" + dir.File("store"), "--spool_dir=" + dir.File("spool"),
                      "--max_capture_duration=10s"});
  profd.Start();
  auto agent = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(profd, agent->pid()); }, absl::Seconds(2)));
  rapidjson::Document c =
      profd.ProfctlJson({"capture", "--pid", std::to_string(agent->pid()), "--duration", "500ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd.log();
  const std::string id = c["capture_id"].GetString();
  const auto& summary = c["summary"];

  rapidjson::Document file = ReadGzipJson(std::string(c["location"].GetString()) + "/summary.json");
  rapidjson::Document by_id = profd.ProfctlJson({"report", id});
  rapidjson::Document by_file = profd.ProfctlJson({"report", c["files"][0]["path"].GetString()});
  ASSERT_TRUE(WaitFor(
      [&] {
        return profd.Profctl({"show", id}).exit_code == 0;
      },
      absl::Seconds(5)));
  rapidjson::Document show = profd.ProfctlJson({"show", id});
  rapidjson::Document list = profd.ProfctlJson({"captures"});
  const rapidjson::Value* listed = nullptr;
  for (const auto& l : list["captures"].GetArray()) {
    if (id == l["capture_id"].GetString()) listed = &l["summary"];
  }
  ASSERT_NE(listed, nullptr);

  // The events: 1000 kernels, 1004 API calls and 4 GPU operations, as the agent sent them.
  EXPECT_EQ(Num(summary["events"]), 2008);
  EXPECT_EQ(Num((*listed)["events"]), 2008);
  EXPECT_EQ(Num(c["processes"][0]["events"]), 2008);
  EXPECT_EQ(Num(summary["gpus"][0]["memcpy_bytes"]), 16 << 20);  // 8 MiB each way
  const double window = Num(summary["window_ns"]);
  EXPECT_GT(window, 0);
  EXPECT_EQ(Num((*listed)["window_ns"]), window);
  const rapidjson::Value* reports[] = {&file, &by_id, &by_file, &show["summary"]};
  for (const rapidjson::Value* r : reports) {
    const rapidjson::Value& report = *r;
    EXPECT_EQ(Num(report["events"]), 2008);
    EXPECT_EQ(Num(report["window_ns"]), window);
    ASSERT_EQ(report["gpus"].Size(), summary["gpus"].Size());
    for (rapidjson::SizeType g = 0; g < report["gpus"].Size(); ++g) {
      EXPECT_DOUBLE_EQ(Num(report["gpus"][g]["busy_ratio"]), Num(summary["gpus"][g]["busy_ratio"]));
      EXPECT_EQ(Num(report["gpus"][g]["kernels"]), Num(summary["gpus"][g]["kernels"]));
      EXPECT_EQ(Num(report["gpus"][g]["memcpy_bytes"]), Num(summary["gpus"][g]["memcpy_bytes"]));
    }
    ASSERT_EQ(report["top_kernels"].Size(), summary["top_kernels"].Size());
    for (rapidjson::SizeType k = 0; k < report["top_kernels"].Size(); ++k) {
      const auto& row = report["top_kernels"][k];
      const auto& want = summary["top_kernels"][k];
      EXPECT_STREQ(row["name"].GetString(), want["name"].GetString());
      EXPECT_EQ(Num(row["instances"]), Num(want["count"]));
      EXPECT_EQ(Num(row["total_ns"]), Num(want["total_ns"]));
    }
  }
  // The whole report is the same, read back from the trace file or made as the batches came.
  rapidjson::Document a = profd.ProfctlJson({"report", id});
  EXPECT_EQ(Num(a["launch_delay"]["p50_ns"]), Num(file["launch_delay"]["p50_ns"]));
  EXPECT_GT(Num(file["launch_delay"]["p50_ns"]), 0);
  EXPECT_EQ(Num(a["api_time_ns"]), Num(file["api_time_ns"]));
  EXPECT_EQ(a["findings"].Size(), file["findings"].Size());
}

// Ctrl-C during `profctl capture`, as with nsys: the first stops the capture early and keeps
// what was captured; a second one detaches and the capture runs on in profd.
TEST_F(CaptureTest, CtrlCStopsTheCaptureEarlyAndASecondOneDetaches) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  auto running = [&](std::string* id) {
    rapidjson::Document d = profd_->ProfctlJson({"captures", "--limit", "1"});
    if (d["captures"].Empty()) return false;
    *id = d["captures"][0]["capture_id"].GetString();
    return std::string(d["captures"][0]["phase"].GetString()) == "CAPTURE_PHASE_RUNNING";
  };
  auto phase_of = [&](const std::string& id) {
    rapidjson::Document list = profd_->ProfctlJson({"captures"});  // alive for the loop
    for (const auto& c : list["captures"].GetArray()) {
      if (id == c["capture_id"].GetString()) return std::string(c["phase"].GetString());
    }
    return std::string();
  };
  // Starts a capture, presses Ctrl-C `presses` times (1 ms apart); returns profctl's exit code,
  // what it said, and the capture id.
  auto interrupted = [&](int presses, std::string* id, std::string* said) {
    TempDir out;
    Subprocess profctl({BuildPath("client/profctl"), "--target", profd_->target(), "capture",
                        "--pid", std::to_string(agent->pid()), "--duration", "8s"},
                       {}, out.File("profctl.out"));
    EXPECT_TRUE(WaitFor([&] { return running(id); }, absl::Seconds(5)));
    const absl::Time pressed = absl::Now();
    for (int i = 0; i < presses; ++i) {
      profctl.Signal(SIGINT);
      absl::SleepFor(absl::Milliseconds(1));  // two presses, not one merged signal
    }
    const int rc = profctl.Wait(absl::Seconds(5));
    EXPECT_LT(absl::Now() - pressed, absl::Seconds(4)) << "profctl waited for the whole capture";
    *said = ReadFileOrEmpty(out.File("profctl.out")) + ReadFileOrEmpty(out.File("profctl.out.err"));
    return rc;
  };
  std::string id, said;
  EXPECT_EQ(interrupted(1, &id, &said), 0) << said;
  EXPECT_NE(said.find("Stopping capture " + id + " early"), std::string::npos) << said;
  EXPECT_NE(said.find("2,008 events"), std::string::npos) << "what was captured is kept: " << said;
  EXPECT_EQ(phase_of(id), "CAPTURE_PHASE_CANCELLED");
  // Two presses: detached, unless the replayed capture (which stops at once) ended between them
  // (profctl saw the first press alone and the stop finished first: on a loaded machine, often).
  // Seen together, the presses detach and the capture goes on to its end; seen apart, the first
  // asked profd to stop it, and profctl says that it is stopping.
  bool detached = false;
  for (int attempt = 0; attempt < 10 && !detached; ++attempt) {
    const int rc = interrupted(2, &id, &said);
    if (rc == 0) continue;
    detached = true;
    EXPECT_EQ(rc, 130) << said;
    const bool goes_on = said.find("detached; capture " + id + " goes on") != std::string::npos;
    const bool stopping =
        said.find("detached; capture " + id + " is stopping in profd") != std::string::npos;
    EXPECT_TRUE(goes_on || stopping) << said;
    const std::string end = goes_on ? "CAPTURE_PHASE_DONE" : "CAPTURE_PHASE_CANCELLED";
    EXPECT_TRUE(WaitFor([&] { return phase_of(id) == end; }, absl::Seconds(15))) << said;
  }
  EXPECT_TRUE(detached) << "a second Ctrl-C never detached: " << said;
}

// A rank of a distributed job (RANK/WORLD_SIZE/LOCAL_RANK, as torchrun sets them) says so in
// its trace's distributedInfo, for HTA; a process that is no rank gets no such block.
TEST_F(CaptureTest, TracesCarryTheProcessRank) {
  std::vector<std::string> argv = {BuildPath("tests/integration/replay_agent"),
                                   SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")};
  Subprocess rank(argv, {{"PROFD_AGENT_SOCKET", profd_->agent_socket()},
                         {"RANK", "3"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "1"}});
  auto plain = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(
      WaitFor([&] { return Registered(*profd_, rank.pid()) && Registered(*profd_, plain->pid()); },
              absl::Seconds(2)));
  rapidjson::Document c =
      profd_->ProfctlJson({"capture", "--pid", std::to_string(rank.pid()), "--pid",
                           std::to_string(plain->pid()), "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
  ASSERT_EQ(c["files"].Size(), 2u);
  for (const auto& f : c["files"].GetArray()) {
    rapidjson::Document trace = ReadGzipJson(f["path"].GetString());
    if (f["pid"].GetInt() == rank.pid()) {
      ASSERT_TRUE(trace.HasMember("distributedInfo"));
      EXPECT_EQ(trace["distributedInfo"]["rank"].GetInt(), 3);
      EXPECT_EQ(trace["distributedInfo"]["world_size"].GetInt(), 8);
      EXPECT_EQ(trace["distributedInfo"]["local_rank"].GetInt(), 1);
    } else {
      EXPECT_FALSE(trace.HasMember("distributedInfo"));
    }
  }
}

TEST_F(CaptureTest, HumanOutputAndOutputCopy) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  TempDir out;
  RunResult r = profd_->Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration",
                                 "300ms", "--output", out.File("mine.json.gz")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // What the time it prints is: the events' span within the window asked for.
  EXPECT_NE(r.out.find(" events, 0 dropped; the events span "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" of the 300ms capture\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Top kernels by total GPU time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profd_test_kernel(int*, int)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1,000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Trace: "), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out.File("mine.json.gz")));
  EXPECT_EQ(ReadGzipJson(out.File("mine.json.gz"))["traceEvents"].Size() > 1000, true);

  // A folder that does not exist: said before anything is captured, with the folder named and
  // nothing made (it once captured, then blamed the trace for not being on this host).
  const std::string missing = out.File("no/such/dir");
  RunResult bad = profd_->Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration",
                                   "300ms", "-o", missing + "/t.json.gz"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("the folder " + missing + " does not exist"), std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.err.find("profd host"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(out.File("no")));
  EXPECT_EQ(profd_->ProfctlJson({"captures"})["captures"].Size(), 1u);
}

// --gpu-metrics where the GPUs' counters cannot be read (no driver here): the capture is whole,
// says why once, and the next one asks again. The flag's bounds are profctl's.
TEST_F(CaptureTest, GpuMetricsThatCannotBeSampledSayWhyAndTheCaptureGoesOn) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  const std::string pid = std::to_string(agent->pid());
  for (int i = 0; i < 2; ++i) {
    rapidjson::Document c =
        profd_->ProfctlJson({"capture", "--pid", pid, "--duration", "300ms", "--gpu-metrics",
                             "--gpu-metrics-interval", "200us"});
    ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd_->log();
    EXPECT_EQ(std::stoull(c["processes"][0]["events"].GetString()), 2008u);
    ASSERT_TRUE(c.HasMember("gpu_metrics")) << profd_->log();
    EXPECT_STREQ(c["gpu_metrics"]["interval_ns"].GetString(), "200000");
    EXPECT_STREQ(c["gpu_metrics"]["samples"].GetString(), "0");
    const std::string why = c["gpu_metrics"]["error"].GetString();
    EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
    rapidjson::Document trace = ReadGzipJson(c["files"][0]["path"].GetString());
    for (const auto& e : trace["traceEvents"].GetArray()) {
      EXPECT_STRNE(e["ph"].GetString(), "C");
    }
  }
  // `profctl status` says why, and that nothing samples now.
  rapidjson::Document status = profd_->ProfctlJson({"status"});
  const auto& counters = status["gpu_counters"];
  EXPECT_FALSE(counters["metrics"].GetBool());
  EXPECT_FALSE(counters["capture"].GetBool());
  EXPECT_STREQ(counters["interval_ns"].GetString(), "0");
  EXPECT_NE(std::string(counters["error"].GetString()).find("CUDA"), std::string::npos);
  RunResult human = profd_->Profctl(
      {"capture", "--pid", pid, "--duration", "300ms", "--gpu-metrics", "--no-progress"});
  ASSERT_EQ(human.exit_code, 0) << human.out << human.err;
  EXPECT_NE(human.out.find("GPU counters: none ("), std::string::npos) << human.out;
  RunResult bad = profd_->Profctl({"capture", "--pid", pid, "--duration", "300ms", "--gpu-metrics",
                                   "--gpu-metrics-interval", "5us"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--gpu-metrics-interval"), std::string::npos) << bad.err;
}

TEST_F(CaptureTest, SeveralProcessesInOneCapture) {
  auto a = StartReplayAgent(profd_->agent_socket());
  auto b = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(
      WaitFor([&] { return Registered(*profd_, a->pid()) && Registered(*profd_, b->pid()); },
              absl::Seconds(2)));
  rapidjson::Document c = profd_->ProfctlJson({"capture", "--all", "--duration", "300ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE");
  EXPECT_EQ(c["files"].Size(), 2u);
  EXPECT_EQ(c["processes"].Size(), 2u);
  EXPECT_EQ(std::stoull(c["summary"]["top_kernels"][0]["count"].GetString()), 2000u);
}

TEST_F(CaptureTest, ACaptureAlreadyRunningIsRefusedWithItsEnd) {
  auto agent = StartReplayAgent(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  std::string pid = std::to_string(agent->pid());
  std::thread first([&] { profd_->Profctl({"capture", "--pid", pid, "--duration", "3s"}); });
  ASSERT_TRUE(WaitFor(
      [&] {
        auto d = profd_->ProfctlJson({"captures"});
        return d["captures"].Size() > 0 &&
               std::string(d["captures"][0]["phase"].GetString()) == "CAPTURE_PHASE_RUNNING";
      },
      absl::Seconds(3)));
  RunResult second = profd_->Profctl({"capture", "--pid", pid, "--duration", "1s"});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("is already being captured by"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("ends in about"), std::string::npos) << second.err;

  // Cancel it: it ends at once and keeps what it had.
  auto list = profd_->ProfctlJson({"captures"});
  std::string id = list["captures"][0]["capture_id"].GetString();
  EXPECT_EQ(profd_->Profctl({"cancel", id}).exit_code, 0);
  first.join();
  auto info = profd_->ProfctlJson({"captures"});
  EXPECT_STREQ(info["captures"][0]["phase"].GetString(), "CAPTURE_PHASE_CANCELLED");
  EXPECT_EQ(info["captures"][0]["files"].Size(), 1u);
}

TEST_F(CaptureTest, AgentThatDiesMidCaptureFailsTheCaptureClearly) {
  auto agent = StartReplayAgent(profd_->agent_socket(), "--die-after-start");
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, agent->pid()); }, absl::Seconds(2)));
  RunResult r =
      profd_->Profctl({"capture", "--pid", std::to_string(agent->pid()), "--duration", "2s"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("agent disconnected during the capture"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("agent disconnected during the capture"), std::string::npos)
      << "said once, on stderr: " << r.out;
  // profd goes on serving.
  EXPECT_EQ(profd_->Profctl({"status"}).exit_code, 0);
}

TEST_F(CaptureTest, ProcessWithoutCudaGetsAClearError) {
  auto host = StartAgentHost(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, host->pid()); }, absl::Seconds(2)));
  RunResult r =
      profd_->Profctl({"capture", "--pid", std::to_string(host->pid()), "--duration", "1s"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_NE(r.err.find("has not loaded the CUDA driver"), std::string::npos) << r.err;
  EXPECT_TRUE(host->Running());  // the process is unharmed
}

TEST_F(CaptureTest, RequestsThatCannotBeServedSayWhy) {
  auto host = StartAgentHost(profd_->agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(*profd_, host->pid()); }, absl::Seconds(2)));
  // A pid that does not exist: not found, and which processes can be captured.
  RunResult gone = profd_->Profctl({"capture", "--pid", "999999", "--duration", "1s"});
  EXPECT_EQ(gone.exit_code, 4);
  EXPECT_NE(gone.err.find("no process 999999"), std::string::npos) << gone.err;
  EXPECT_NE(gone.err.find(std::to_string(host->pid()) + " (agent_host)"), std::string::npos);
  // A live process without an agent: how to inject one.
  RunResult plain =
      profd_->Profctl({"capture", "--pid", std::to_string(getpid()), "--duration", "1s"});
  EXPECT_EQ(plain.exit_code, 4);
  EXPECT_NE(plain.err.find("has no profd agent"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("CUDA_INJECTION64_PATH"), std::string::npos);
  // Too long.
  RunResult long_one =
      profd_->Profctl({"capture", "--pid", std::to_string(host->pid()), "--duration", "1h"});
  EXPECT_EQ(long_one.exit_code, 2);
  EXPECT_NE(long_one.err.find("over this profd's limit of 10s"), std::string::npos) << long_one.err;
  // Past 32 bits of milliseconds: profd sees the whole 1193 h (it once saw 2 s and ran them).
  RunResult wrapped = profd_->Profctl(
      {"capture", "--pid", std::to_string(host->pid()), "--duration", "4294969296ms"});
  EXPECT_EQ(wrapped.exit_code, 2);
  EXPECT_NE(wrapped.err.find("duration 1193h2m49.296s is over this profd's limit"),
            std::string::npos)
      << wrapped.err;
  // Nothing named, bad duration, unknown kind: usage errors before profd is asked.
  EXPECT_EQ(profd_->Profctl({"capture", "--duration", "1s"}).exit_code, 2);
  EXPECT_EQ(profd_->Profctl({"capture", "--pid", "1", "--duration", "soon"}).exit_code, 2);
  RunResult kind = profd_->Profctl({"capture", "--pid", "1", "--kinds", "kernel,gpu"});
  EXPECT_EQ(kind.exit_code, 2);
  EXPECT_NE(kind.err.find("unknown activity kind 'gpu'"), std::string::npos);
  // A pod with no agent.
  RunResult pod = profd_->Profctl({"capture", "--pod", "llm-0", "-n", "serving"});
  EXPECT_EQ(pod.exit_code, 4);
  EXPECT_NE(pod.err.find("no agent in pod serving/llm-0"), std::string::npos) << pod.err;
  // The same pod as `profctl agents` prints it.
  RunResult slash = profd_->Profctl({"capture", "--pod", "serving/llm-0"});
  EXPECT_EQ(slash.exit_code, 4);
  EXPECT_NE(slash.err.find("no agent in pod serving/llm-0"), std::string::npos) << slash.err;
  RunResult clash = profd_->Profctl({"capture", "--pod", "serving/llm-0", "-n", "batch"});
  EXPECT_EQ(clash.exit_code, 2);
}

}  // namespace
}  // namespace profd::testing

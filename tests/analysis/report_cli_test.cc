// The real profctl: `report FILE` with no profd, --json, --html, several files, errors and their
// exit codes, a capture id resolved through a real profd, and `diff A B`.
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/analysis/kineto_trace_builder.h"
#include "tests/support/profd_process.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using profd::testing::BuildPath;
using profd::testing::Run;
using profd::testing::RunResult;
using profd::testing::SourcePath;
using profd::testing::TempDir;
using ::testing::HasSubstr;

const std::string kFixture = "tests/analysis/fixtures/gpt2_synthetic.json.gz";

RunResult Profctl(std::vector<std::string> args) {
  // A target nobody listens on: a FILE must not need profd.
  std::vector<std::string> argv = {BuildPath("client/profctl"), "--target",
                                   "unix:/nonexistent/profd.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

rapidjson::Document Json(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str());
  EXPECT_FALSE(d.HasParseError()) << text;
  return d;
}

TEST(ReportCliTest, ReportsAFileWithoutProfd) {
  RunResult r = Profctl({"report", SourcePath(kFixture)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("FINDINGS"));
  EXPECT_THAT(r.out, HasSubstr("is launch-bound"));
  EXPECT_THAT(r.out, HasSubstr("TOP KERNELS (cuda_gpu_kern_sum)"));
  EXPECT_THAT(r.out, HasSubstr("Time %  Total Time  Instances"));
  EXPECT_THAT(r.out, HasSubstr("CUDA API SUMMARY (cuda_api_sum)"));
  EXPECT_THAT(r.out, HasSubstr("cudaLaunchKernel"));
  EXPECT_THAT(r.out, HasSubstr("DtoH  Pageable"));
  EXPECT_THAT(r.out, HasSubstr("QUEUE DEPTH PER STREAM"));
}

TEST(ReportCliTest, JsonEitherWay) {
  for (auto args : {std::vector<std::string>{"report", "--json", SourcePath(kFixture)},
                    std::vector<std::string>{"--json", "report", SourcePath(kFixture)}}) {
    RunResult r = Profctl(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    rapidjson::Document d = Json(r.out);
    ASSERT_TRUE(d.IsObject());
    EXPECT_EQ(d["gpus"][0]["pid"].GetInt(), 4242);
    EXPECT_EQ(d["kernel_count"].GetUint64(), 1740u);
    EXPECT_GT(d["findings"].Size(), 0u);
  }
}

TEST(ReportCliTest, HtmlAndSeveralFiles) {
  TempDir dir;
  testing::KinetoTraceBuilder other;
  other.Launch("other_kernel", 0, 2, 5, 10, 0, 7, {}, /*pid=*/555, 555);
  other.Write(dir.File("other.json"), false);
  RunResult r = Profctl({"report", SourcePath(kFixture), dir.File("other.json"), "--html",
                         dir.File("r.html"), "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("HTML report: " + dir.File("r.html")));
  EXPECT_THAT(r.out, HasSubstr("other.json (kineto)"));
  std::string html = profd::testing::ReadFileOrEmpty(dir.File("r.html"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"plot-gpu-busy\""));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("<script")));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("http://cdn")));
  rapidjson::Document d =
      Json(Profctl({"report", "--json", "--top", "3", SourcePath(kFixture), dir.File("other.json")})
               .out);
  EXPECT_EQ(d["inputs"].Size(), 2u);
  EXPECT_EQ(d["gpus"].Size(), 2u);  // (4242, GPU 0) and (555, GPU 0)
  EXPECT_EQ(d["top_kernels"].Size(), 3u);
}

TEST(ReportCliTest, ErrorsHaveMessagesAndExitCodes) {
  RunResult missing = Profctl({"report", "/nonexistent/trace.json.gz"});
  EXPECT_EQ(missing.exit_code, 4);
  EXPECT_THAT(missing.err, HasSubstr("no trace file /nonexistent/trace.json.gz"));

  TempDir dir;
  testing::WriteFile(dir.File("bad.json"), "{\"traceEvents\":[{\"ph\":", false);
  RunResult bad = Profctl({"report", dir.File("bad.json")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("not a valid JSON trace"));

  // A capture id needs profd; none is running at this target.
  RunResult no_profd = Profctl({"report", "20260101T000000Z-host-deadbeef"});
  EXPECT_EQ(no_profd.exit_code, 3) << no_profd.err;
  EXPECT_THAT(no_profd.err, HasSubstr("neither a trace file here nor a capture profd knows"));

  RunResult usage = Profctl({"report"});
  EXPECT_EQ(usage.exit_code, 2);

  // No rows asked for, or nothing in the trace: said, not an empty report and exit 0.
  testing::WriteFile(dir.File("empty.json"), "{\"traceEvents\":[]}", false);
  RunResult empty = Profctl({"report", dir.File("empty.json")});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.err, HasSubstr("holds no trace events"));
  RunResult top0 = Profctl({"report", dir.File("empty.json"), "--top", "0"});
  EXPECT_EQ(top0.exit_code, 2);
}

TEST(ReportCliTest, UnknownCaptureIdThroughARealProfd) {
  profd::testing::ProfdProcess profd;
  profd.Start();
  RunResult r = profd.Profctl({"report", "20260101T000000Z-host-deadbeef"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("20260101T000000Z-host-deadbeef"));
}

// `profctl report <capture id>`: a real capture by a real profd from the agent replaying the
// recorded H200 batches, reported by id (the local store's trace files, read in place).
TEST(ReportCliTest, ReportsACaptureById) {
  TempDir captures;
  profd::testing::ProfdProcess profd({"--capture_dir=" + captures.path()});
  profd.Start();
  profd::testing::Subprocess agent({BuildPath("tests/integration/replay_agent"),
                                    SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
                                   {{"PROFD_AGENT_SOCKET", profd.agent_socket()}});
  ASSERT_TRUE(profd::testing::WaitFor(
      [&] { return profd.ProfctlJson({"agents"})["agents"].Size() > 0; }, absl::Seconds(5)));
  rapidjson::Document c =
      profd.ProfctlJson({"capture", "--pid", std::to_string(agent.pid()), "--duration", "500ms"});
  ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << profd.log();
  std::string id = c["capture_id"].GetString();

  RunResult r = profd.Profctl({"report", "--json", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  rapidjson::Document d = Json(r.out);
  EXPECT_EQ(d["kernel_count"].GetUint64(), 1000u);
  EXPECT_EQ(d["inputs"][0]["format"].GetString(), std::string("profd"));
  EXPECT_EQ(d["gpus"][0]["pid"].GetInt(), agent.pid());
}

TEST(ReportCliTest, DiffShowsTheChangePerKernel) {
  TempDir dir;
  // Before: 10 GEMMs of 100 µs and 100 tiny relu kernels. After: relu fused into the GEMM.
  testing::KinetoTraceBuilder before, after;
  double t = 0;
  for (int i = 0; i < 10; ++i) {
    before.Launch("gemm", t, 2, t + 3, 100);
    t += 110;
    for (int j = 0; j < 10; ++j, t += 10) before.Launch("relu", t, 5, t + 6, 3);
  }
  t = 0;
  // Over as long a window as before (the diff compares totals; per second when they differ).
  for (int i = 0; i < 10; ++i, t += 210) after.Launch("gemm_relu", t, 2, t + 3, 80);
  before.Write(dir.File("before.json.gz"), true);
  after.Write(dir.File("after.json"), false);

  RunResult r = Profctl({"diff", dir.File("before.json.gz"), dir.File("after.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KERNELS"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("1.00 ms +0 ns +-1.00 ms +gone +10 +0 .*gemm\n"));
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex("0 ns +800.0 µs +\\+800.0 µs +new +0 +10 .*gemm_relu"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("kernels +110 +10 +-90.9%"));
  EXPECT_THAT(r.out, HasSubstr("gone in B:  launch_bound"));

  rapidjson::Document d =
      Json(Profctl({"diff", "--json", dir.File("before.json.gz"), dir.File("after.json")}).out);
  ASSERT_TRUE(d.IsObject());
  bool relu = false;
  for (const auto& k : d["kernels"].GetArray()) {
    if (std::string(k["name"].GetString()) == "relu") {
      relu = true;
      EXPECT_EQ(k["count_a"].GetUint64(), 100u);
      EXPECT_EQ(k["count_b"].GetUint64(), 0u);
      EXPECT_EQ(k["delta_ns"].GetInt64(), -300'000);
    }
  }
  EXPECT_TRUE(relu);
}

}  // namespace
}  // namespace profd::analysis

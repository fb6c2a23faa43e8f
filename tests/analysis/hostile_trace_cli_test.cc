// The traces that crashed profd and profctl, through the commands where a user meets them: the
// real profctl `report FILE` (analysed client-side) and `import FILE` into a real profd (analysed
// on one of profd's gRPC threads). profd must answer the import with a report or a clear error,
// and still be the same process afterwards.
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/kineto_trace_builder.h"
#include "tests/support/profd_process.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using profd::testing::BuildPath;
using profd::testing::ProfdProcess;
using profd::testing::Run;
using profd::testing::RunResult;
using profd::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// 118 bytes: block (65536, 65536, 32) made the occupancy estimate divide by zero (SIGFPE).
constexpr char kHugeBlock[] =
    R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":0,"dur":1,"args":{"grid":[1,1,1],"block":[65536,65536,32]}}]})";

// JSON nested 100,000 deep: RapidJSON recursed once per level and overflowed the stack.
std::string Deep() {
  std::string s = R"({"traceEvents":[{"ph":"X","args":)";
  s += std::string(100'000, '[') + std::string(100'000, ']') + "}]}";
  return s;
}

// A time of 1e300 µs and a NaN one: printed as "-9223372036.85 s" before.
constexpr char kImpossibleTimes[] =
    R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":10,"dur":5,"args":{}},)"
    R"({"ph":"X","cat":"kernel","name":"k","ts":1e300,"dur":5,"args":{}},)"
    R"({"ph":"X","cat":"kernel","name":"k","ts":NaN,"dur":5,"args":{}},)"
    R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","ts":0,"dur":-Infinity}]})";

RunResult ProfctlReport(const std::string& file) {
  // No profd: a FILE is analysed by profctl itself.
  return Run(
      {BuildPath("client/profctl"), "--target", "unix:/nonexistent/profd.sock", "report", file});
}

std::string Crash(const RunResult& r) {
  return absl::StrCat("exit ", r.exit_code, " (128+n: killed by signal n)\nstdout:\n", r.out,
                      "\nstderr:\n", r.err);
}

class HostileTraceCliTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content, bool gzip = false) {
    testing::WriteFile(dir_.File(name), content, gzip);
    return dir_.File(name);
  }
  TempDir dir_;
};

TEST_F(HostileTraceCliTest, ProfctlReportOfAHugeBlockPrintsTheReport) {
  for (bool gzip : {false, true}) {
    RunResult r = ProfctlReport(Write(gzip ? "block.json.gz" : "block.json", kHugeBlock, gzip));
    ASSERT_EQ(r.exit_code, 0) << Crash(r);
    EXPECT_THAT(r.out, HasSubstr("TOP KERNELS"));
    EXPECT_THAT(r.out, HasSubstr("launch configuration no GPU can run (e.g. k: block "
                                 "[65536,65536,32] has 137438953472 threads"));
  }
}

TEST_F(HostileTraceCliTest, ProfctlReportOfDeepJsonSaysWhy) {
  RunResult r = ProfctlReport(Write("deep.json", Deep()));
  ASSERT_EQ(r.exit_code, 1) << Crash(r);
  EXPECT_THAT(r.err, HasSubstr("deep.json: JSON nested deeper than 64 levels at byte"));
  EXPECT_THAT(r.err, HasSubstr("this is not a trace"));
}

TEST_F(HostileTraceCliTest, ProfctlReportSkipsImpossibleTimes) {
  RunResult r = ProfctlReport(Write("times.json", kImpossibleTimes));
  ASSERT_EQ(r.exit_code, 0) << Crash(r);
  EXPECT_THAT(r.out, Not(HasSubstr("-9223372036")));
  EXPECT_THAT(r.out, Not(HasSubstr("nan")));
  EXPECT_THAT(r.out, HasSubstr("Window: 5.0 µs"));
  EXPECT_THAT(r.out, HasSubstr("3 events skipped: impossible numbers"));
}

// A trace naming every kernel differently (a Kineto trace of 2 M distinct names took profctl
// ~1.7 KB and a growing time per name): the report keeps a row for the first 16,384 kernel names
// and counts the others in one row, "[other names]", and says so in text, JSON and HTML.
TEST_F(HostileTraceCliTest, ProfctlReportOfTooManyDistinctNamesCountsTheRestInOneRow) {
  constexpr int kNames = 70'000, kRows = 16'384;
  std::string json = R"({"traceEvents":[)";
  for (int i = 0; i < kNames; ++i) {
    absl::StrAppend(&json, i ? "," : "", R"({"ph":"X","cat":"kernel","name":"kernel_)", i,
                    R"(","ts":)", i * 2, R"(,"dur":1,"args":{"device":0,"stream":7}})");
  }
  json += "]}";
  const std::string file = Write("names.json.gz", json, /*gzip=*/true);
  const std::string html = dir_.File("names.html");
  RunResult text =
      profd::testing::Run({BuildPath("client/profctl"), "--target", "unix:/nonexistent/profd.sock",
                           "report", file, "--html", html});
  ASSERT_EQ(text.exit_code, 0) << Crash(text);
  EXPECT_THAT(text.out, HasSubstr("[other names]"));
  EXPECT_THAT(text.out, HasSubstr("counted in one row"));
  EXPECT_THAT(profd::testing::ReadFileOrEmpty(html), HasSubstr("[other names]"));
  EXPECT_THAT(profd::testing::ReadFileOrEmpty(html), HasSubstr("counted in one row"));
  RunResult json_out =
      profd::testing::Run({BuildPath("client/profctl"), "--target", "unix:/nonexistent/profd.sock",
                           "report", "--json", file});
  ASSERT_EQ(json_out.exit_code, 0) << Crash(json_out);
  rapidjson::Document r;
  r.Parse(json_out.out.c_str());
  ASSERT_TRUE(r.IsObject()) << json_out.out.substr(0, 200);
  EXPECT_EQ(r["kernel_count"].GetUint64(), uint64_t{kNames});
  EXPECT_LE(r["distinct_kernels"].GetUint64(), uint64_t{kRows + 1});
  EXPECT_EQ(r["folded_kernels"].GetUint64(), uint64_t{kNames - kRows});
  EXPECT_STREQ(r["top_kernels"][0]["name"].GetString(), "[other names]");
}

TEST_F(HostileTraceCliTest, ProfdSurvivesImportingEachOfThem) {
  TempDir state;
  ProfdProcess profd({"--store=file://" + state.File("store"), "--spool_dir=" + state.File("spool"),
                      "--capture_dir=" + state.File("captures")});
  profd.Start();
  const pid_t pid = profd.pid();

  RunResult block = profd.Profctl({"import", Write("block.json", kHugeBlock)});
  ASSERT_EQ(block.exit_code, 0) << Crash(block) << "\nprofd log:\n" << profd.log();
  EXPECT_THAT(block.out, HasSubstr("(1 events, 1 kernels)"));

  RunResult deep = profd.Profctl({"import", Write("deep.json.gz", Deep(), /*gzip=*/true)});
  EXPECT_NE(deep.exit_code, 0) << Crash(deep);
  EXPECT_THAT(deep.err, HasSubstr("not a Chrome trace JSON"));
  EXPECT_THAT(deep.err, HasSubstr("JSON nested deeper than 64 levels"));

  RunResult times = profd.Profctl({"import", Write("times.json", kImpossibleTimes)});
  EXPECT_EQ(times.exit_code, 0) << Crash(times) << "\nprofd log:\n" << profd.log();
  // The stored report says what was skipped.
  rapidjson::Document listed = profd.ProfctlJson({"list"});
  ASSERT_TRUE(listed.IsObject());
  ASSERT_EQ(listed["traces"].GetArray().Size(), 2u);

  RunResult status = profd.Profctl({"status"});
  EXPECT_EQ(status.exit_code, 0) << Crash(status) << "\nprofd log:\n" << profd.log();
  EXPECT_EQ(profd.pid(), pid);
  EXPECT_EQ(::kill(pid, 0), 0) << "profd is gone:\n" << profd.log();
}

}  // namespace
}  // namespace profd::analysis

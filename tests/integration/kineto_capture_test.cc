// Operator-level captures of PyTorch processes through Kineto's daemon protocol, end to end: a
// real profd, the real profctl, and fake_pytorch, which speaks the protocol byte for byte from a
// private /tmp (as a pod would) and writes a Kineto trace recorded on the GPU host.
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kFixture[] = "tests/fixtures/torch/kineto_ondemand_gpt2_500ms.json.gz";

class KinetoCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (getuid() != 0) GTEST_SKIP() << "fake_pytorch needs root for its private /tmp (a pod's)";
    profd_.Start();
  }
  std::string KinetoDir() const { return profd_.runtime_dir() + "/kineto"; }

  // Starts fake_pytorch and waits until profd lists it as polling.
  pid_t StartPyTorch(std::vector<std::string> args = {},
                     const std::string& trace = SourcePath(kFixture)) {
    std::vector<std::string> argv = {BuildPath("tests/integration/fake_pytorch"), trace};
    argv.insert(argv.end(), args.begin(), args.end());
    out_ = dir_.File("fake_pytorch.out");
    kineto_ = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"KINETO_IPC_SOCKET_DIR", KinetoDir()}}, out_);
    const pid_t pid = kineto_->pid();
    EXPECT_TRUE(WaitFor(
        [&] {
          rapidjson::Document agents = profd_.ProfctlJson({"agents"});
          for (const auto& a : agents["agents"].GetArray()) {
            if (a["pid"].GetInt() == pid && a.HasMember("kineto") &&
                a["kineto"]["polling"].GetBool()) {
              return true;
            }
          }
          return false;
        },
        absl::Seconds(10)))
        << ReadFileOrEmpty(out_ + ".err") << profd_.log();
    return pid;
  }

  TempDir dir_;
  ProfdProcess profd_;
  std::unique_ptr<Subprocess> kineto_;
  std::string out_;
};

TEST_F(KinetoCaptureTest, AgentsSaysWhichPathEachProcessOffers) {
  const pid_t pid = StartPyTorch();
  RunResult table = profd_.Profctl({"agents"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("VIA"));
  EXPECT_THAT(table.out, HasSubstr("kineto"));
  rapidjson::Document agents = profd_.ProfctlJson({"agents"});
  bool found = false;
  for (const auto& a : agents["agents"].GetArray()) {
    if (a["pid"].GetInt() != pid) continue;
    found = true;
    EXPECT_FALSE(a.HasMember("has_agent") && a["has_agent"].GetBool());
    EXPECT_EQ(std::string(a["comm"].GetString()), "fake_pytorch");
  }
  EXPECT_TRUE(found);
  rapidjson::Document status = profd_.ProfctlJson({"status"});
  EXPECT_EQ(std::string(status["kineto_socket"].GetString()), KinetoDir() + "/dynolog");
  EXPECT_EQ(status["kineto_processes"].GetInt(), 1);
  // The base config pods read through KINETO_CONFIG: a 1 s poll, readable by every user.
  const std::string conf = profd_.runtime_dir() + "/kineto.conf";
  EXPECT_THAT(ReadFileOrEmpty(conf), HasSubstr("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n"));
  struct stat st;
  ASSERT_EQ(stat(conf.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(KinetoCaptureTest, CapturesThroughKinetoIntoTheCaptureFolder) {
  const pid_t pid = StartPyTorch();
  RunResult r = profd_.Profctl({"--json", "capture", "--pid", std::to_string(pid), "--duration",
                                "500ms", "--record-shapes"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << profd_.log();
  rapidjson::Document info;
  info.Parse(r.out.c_str());
  ASSERT_TRUE(info.IsObject()) << r.out;
  EXPECT_EQ(std::string(info["phase"].GetString()), "CAPTURE_PHASE_DONE");
  const auto& process = info["processes"][0];
  EXPECT_EQ(std::string(process["path"].GetString()), "CAPTURE_PATH_KINETO");
  EXPECT_GT(std::stoull(process["events"].GetString()), 30000u);
  ASSERT_EQ(info["files"].Size(), 1u);
  EXPECT_EQ(std::string(info["files"][0]["format"].GetString()), "kineto-json-gz");

  // Kineto's trace as the process wrote it: CPU operators, kernels, flows.
  rapidjson::Document trace = ReadGzipJson(info["files"][0]["path"].GetString());
  rapidjson::Document fixture = ReadGzipJson(SourcePath(kFixture));
  ASSERT_EQ(trace["traceEvents"].Size(), fixture["traceEvents"].Size());
  size_t ops = 0, kernels = 0;
  for (const auto& e : trace["traceEvents"].GetArray()) {
    if (!e.HasMember("cat")) continue;
    ops += std::string(e["cat"].GetString()) == "cpu_op";
    kernels += std::string(e["cat"].GetString()) == "kernel";
  }
  EXPECT_EQ(ops, 26618u);
  EXPECT_EQ(kernels, 5638u);
  const std::string folder = info["location"].GetString();
  struct stat st;
  EXPECT_EQ(stat((folder + "/summary.json").c_str(), &st), 0);
  EXPECT_EQ(stat((folder + "/manifest.json").c_str(), &st), 0);
  // The summary is the analysis of that trace.
  EXPECT_GT(std::stoull(info["summary"]["events"].GetString()), 30000u);
  EXPECT_GT(info["summary"]["top_kernels"].Size(), 0u);

  // The process got the options asked for, and keeps no copy of the trace in its /tmp.
  std::string config = ReadFileOrEmpty(out_);
  EXPECT_THAT(config, HasSubstr("PROFILE_REPORT_INPUT_SHAPES=true"));
  EXPECT_THAT(config, HasSubstr("ACTIVITIES_WARMUP_PERIOD_SECS=0"));
  const std::string id = info["capture_id"].GetString();
  EXPECT_NE(
      stat(absl::StrCat("/proc/", pid, "/root/tmp/profd-", id, "_", pid, ".json").c_str(), &st), 0);
}

TEST_F(KinetoCaptureTest, ABusyKinetoIsRefusedWithTheReason) {
  const pid_t pid = StartPyTorch({"--busy"});
  RunResult r = profd_.Profctl({"capture", "--pid", std::to_string(pid), "--duration", "500ms"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("a torch.profiler session"));
}

TEST_F(KinetoCaptureTest, ALinkPlantedWhereTheTraceGoesIsRefused) {
  // The process tries to make profd (root) copy a file it cannot read into the capture.
  const std::string secret = dir_.File("secret");
  {
    FILE* f = std::fopen(secret.c_str(), "w");
    std::fputs("root only", f);
    std::fclose(f);
  }
  chmod(secret.c_str(), 0600);
  const pid_t pid = StartPyTorch({"--link-to", secret});
  RunResult r =
      profd_.Profctl({"--json", "capture", "--pid", std::to_string(pid), "--duration", "300ms"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out + r.err, HasSubstr("symbolic link"));
}

// The file a process writes where Kineto's trace goes is parsed as profd copies it: one that is
// not a trace fails the capture with the reason, at the first chunk that shows it (a 2 GB file
// of NULs costs profd a few MiB of reading), instead of ending "done, 0 events".
TEST_F(KinetoCaptureTest, AFileThatIsNotATraceFailsTheCaptureWithTheReason) {
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    FILE* f = std::fopen(path.c_str(), "w");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return path;
  };
  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::string trace;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"2 GB of NULs", {"--nuls", "2000000000"}, SourcePath(kFixture), "not a valid JSON trace"},
      {"deep nesting",
       {},
       write("deep.json", std::string(200000, '[')),
       "nested deeper than 64 levels"},
      {"an array", {}, write("array.json", "[1, 2, 3]"), "no \"traceEvents\" array"},
      {"an object without traceEvents",
       {},
       write("object.json", R"({"schemaVersion": 1})"),
       "no \"traceEvents\" array"},
  };
  for (const Case& c : cases) {
    const pid_t pid = StartPyTorch(c.args, c.trace);
    RunResult r =
        profd_.Profctl({"--json", "capture", "--pid", std::to_string(pid), "--duration", "300ms"});
    EXPECT_NE(r.exit_code, 0) << c.what << ": " << r.out;
    EXPECT_THAT(r.out + r.err, HasSubstr(c.reason)) << c.what;
    EXPECT_THAT(r.out + r.err, HasSubstr("Kineto's trace of pid " + std::to_string(pid))) << c.what;
    EXPECT_THAT(r.out, Not(HasSubstr("CAPTURE_PHASE_DONE"))) << c.what;
    kineto_.reset();
  }
}

TEST_F(KinetoCaptureTest, APathThatTheProcessDoesNotOfferSaysWhatToDo) {
  const pid_t pid = StartPyTorch();
  RunResult r = profd_.Profctl(
      {"capture", "--pid", std::to_string(pid), "--duration", "300ms", "--via", "cupti"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("has no profd agent (it is known from Kineto's polls only)"));
  RunResult bad = profd_.Profctl(
      {"capture", "--pid", std::to_string(pid), "--duration", "300ms", "--via", "banana"});
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
}  // namespace profd::testing

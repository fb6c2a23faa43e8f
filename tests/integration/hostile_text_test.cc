// What a peer sends cannot masquerade in a terminal: pod and container names an agent reports,
// kernel names in its events and names in a trace file reach profctl's tables, summaries and
// reports, and the HTML report. Bidirectional overrides and isolates (U+202E, U+2066-U+2069),
// directional marks (U+200E, U+200F, U+061C), line and paragraph separators (U+2028, U+2029), C1
// controls (U+0085, U+009B) and C0 controls must come out escaped (\u{202e}, \x1b, \n) wherever a
// person reads them, and exact in JSON. A real profd, the real agent (replay_agent, with its
// labels from the environment and its kernels renamed), the real profctl.
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;

// Split literals: a hex escape would otherwise swallow the letters after it.
const std::string kPod =
    "llm\xe2\x80\xae"
    "gnp.exe"
    "\xe2\x81\xa6"
    "x"
    "\xe2\x81\xa9"
    "\xe2\x80\x8f"
    "\xd8\x9c"
    "\xc2\x85"
    "\xe2\x80\xa8"
    "7f9c";
const std::string kNamespace =
    "serving\xe2\x80\x8e"
    "\xe2\x81\xa7"
    "\xe2\x81\xa8";
const std::string kContainer =
    "main\xe2\x80\xa9"
    "sidecar";
// Before every kernel's name: a colour, an override, a C1 CSI, a newline forging a report line.
const std::string kKernelPrefix =
    "evil\x1b[31m\xe2\x80\xae"
    "\xc2\x9b"
    "2J\n  1. [CRITICAL] forged"
    "\xe2\x80\xa8"
    "|";

// Every control above, raw, and the line a newline would forge.
const std::vector<std::pair<std::string, std::string>> kRaw = {
    {"\x1b", "ESC"},
    {"\r", "CR"},
    {"\xc2\x85", "U+0085"},
    {"\xc2\x9b", "U+009B"},
    {"\xd8\x9c", "U+061C"},
    {"\xe2\x80\x8e", "U+200E"},
    {"\xe2\x80\x8f", "U+200F"},
    {"\xe2\x80\xa8", "U+2028"},
    {"\xe2\x80\xa9", "U+2029"},
    {"\xe2\x80\xae", "U+202E"},
    {"\xe2\x81\xa6", "U+2066"},
    {"\xe2\x81\xa7", "U+2067"},
    {"\xe2\x81\xa8", "U+2068"},
    {"\xe2\x81\xa9", "U+2069"},
    {"\n  1. [CRITICAL] forged", "a forged report line"},
};

// What a person reads holds none of them.
void ExpectNothingRaw(const std::string& text, const std::string& what) {
  for (const auto& [raw, name] : kRaw) {
    EXPECT_EQ(text.find(raw), std::string::npos) << what << " shows " << name << " raw:\n" << text;
  }
}

class HostileTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_.Start();
    agent_ = std::make_unique<Subprocess>(
        std::vector<std::string>{BuildPath("tests/integration/replay_agent"),
                                 SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
        std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", profd_.agent_socket()},
                                           {"POD_NAME", kPod},
                                           {"POD_NAMESPACE", kNamespace},
                                           {"CONTAINER_NAME", kContainer},
                                           {"REPLAY_KERNEL_NAME", kKernelPrefix}});
    ASSERT_TRUE(WaitFor([&] { return Registered(profd_, agent_->pid()); }, absl::Seconds(15)))
        << profd_.log();
  }

  ProfdProcess profd_;
  std::unique_ptr<Subprocess> agent_;
};

TEST_F(HostileTextTest, PodNamesAndKernelNamesAreEscapedByEveryCommand) {
  // agents: the pod, namespace and container as a table row.
  RunResult agents = profd_.Profctl({"agents"});
  ASSERT_EQ(agents.exit_code, 0) << agents.err;
  ExpectNothingRaw(agents.out, "profctl agents");
  EXPECT_THAT(agents.out, HasSubstr("llm\\u{202e}gnp.exe\\u{2066}x\\u{2069}")) << agents.out;
  // --json keeps the exact text.
  rapidjson::Document json_agents = profd_.ProfctlJson({"agents"});
  bool found = false;
  for (const auto& a : json_agents["agents"].GetArray()) {
    if (a["pid"].GetInt() != agent_->pid()) continue;
    found = true;
    EXPECT_EQ(a["pod_name"].GetString(), kPod);
    EXPECT_EQ(a["pod_namespace"].GetString(), kNamespace);
    EXPECT_EQ(a["container_name"].GetString(), kContainer);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(profd_.Profctl({"--json", "agents"}).out.find("\xe2\x80\xa8"), std::string::npos)
      << "U+2028 raw in JSON";

  // capture: the summary's top kernels.
  RunResult capture = profd_.Profctl(
      {"capture", "--pid", std::to_string(agent_->pid()), "--duration", "300ms", "--no-progress"});
  ASSERT_EQ(capture.exit_code, 0) << capture.err << capture.out << profd_.log();
  ExpectNothingRaw(capture.out + capture.err, "profctl capture");
  EXPECT_THAT(capture.out, HasSubstr("evil\\x1b[31m\\u{202e}\\u{009b}2J\\n")) << capture.out;
  rapidjson::Document captures = profd_.ProfctlJson({"captures"});
  ASSERT_GT(captures["captures"].Size(), 0u);
  const std::string id = captures["captures"][0]["capture_id"].GetString();
  RunResult listed = profd_.Profctl({"captures"});
  ExpectNothingRaw(listed.out, "profctl captures");

  // list and show: the stored capture's pods, processes and summary.
  RunResult list;
  ASSERT_TRUE(WaitFor(
      [&] {
        list = profd_.Profctl({"list"});
        return list.out.find(id) != std::string::npos;
      },
      absl::Seconds(20)))
      << list.out << list.err << profd_.log();
  ExpectNothingRaw(list.out + list.err, "profctl list");
  EXPECT_THAT(list.out, HasSubstr("\\u{202e}")) << list.out;
  RunResult show = profd_.Profctl({"show", id});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  ExpectNothingRaw(show.out + show.err, "profctl show");
  EXPECT_THAT(show.out, HasSubstr("llm\\u{202e}gnp.exe")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("evil\\x1b[31m\\u{202e}")) << show.out;
  RunResult show_json = profd_.Profctl({"--json", "show", id});
  ASSERT_EQ(show_json.exit_code, 0) << show_json.err;
  EXPECT_EQ(show_json.out.find("\xe2\x80\xa8"), std::string::npos) << "U+2028 raw in JSON";
  rapidjson::Document shown;
  shown.Parse(show_json.out.c_str());
  ASSERT_FALSE(shown.HasParseError()) << show_json.out;

  // report of the capture: text, HTML and JSON.
  TempDir dir;
  RunResult report = profd_.Profctl({"report", id, "--html", dir.File("report.html")});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  ExpectNothingRaw(report.out + report.err, "profctl report");
  EXPECT_THAT(report.out, HasSubstr("evil\\x1b[31m\\u{202e}")) << report.out;
  const std::string html = ReadFileOrEmpty(dir.File("report.html"));
  ExpectNothingRaw(html, "the HTML report");
  EXPECT_THAT(html, HasSubstr("evil\\x1b[31m\\u{202e}"));
  rapidjson::Document report_json = profd_.ProfctlJson({"report", id});
  ASSERT_TRUE(report_json.HasMember("top_kernels"));
  ASSERT_GT(report_json["top_kernels"].Size(), 0u);
  EXPECT_EQ(std::string(report_json["top_kernels"][0]["name"].GetString()).rfind(kKernelPrefix, 0),
            0u)
      << "the JSON report keeps the exact name";
}

TEST(HostileTraceFileTest, ProfctlReportOfATraceFileEscapesItsNames) {
  // A trace from elsewhere (torch.profiler, another tool): names chosen by whoever wrote it,
  // including an operator and a GPU name.
  TempDir dir;
  const std::string trace = dir.File("hostile.json");
  std::ofstream(trace)
      << R"({"deviceProperties":[{"id":0,"name":"H200\u202e\u2066gpu\u2069","numSms":132}],)"
      << R"("traceEvents":[)"
      << R"({"ph":"X","cat":"cpu_op","name":"aten::mm\u2028\u200f\u061c","pid":1,"tid":1,)"
      << R"("ts":0,"dur":50,"args":{"External id":1}},)"
      << R"({"ph":"X","cat":"kernel","name":"gemm\u001b[2J\u202e\u0085\u009b\n  1. [CRITICAL] )"
      << R"(forged\u2029","pid":0,"tid":7,"ts":10,"dur":30,)"
      << R"("args":{"device":0,"stream":7,"correlation":1,"External id":1}}]})";
  const std::string profctl = BuildPath("client/profctl");
  RunResult text =
      profd::testing::Run({profctl, "report", trace, "--html", dir.File("report.html")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ExpectNothingRaw(text.out + text.err, "profctl report");
  EXPECT_THAT(text.out, HasSubstr("gemm\\x1b[2J\\u{202e}\\u{0085}\\u{009b}\\n")) << text.out;
  const std::string html = ReadFileOrEmpty(dir.File("report.html"));
  ExpectNothingRaw(html, "the HTML report");
  EXPECT_THAT(html, HasSubstr("gemm\\x1b[2J\\u{202e}"));

  RunResult json = profd::testing::Run({profctl, "report", "--json", trace});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out.find("\xe2\x80\xa8"), std::string::npos) << "U+2028 raw in JSON";
  EXPECT_EQ(json.out.find("\xe2\x80\xa9"), std::string::npos) << "U+2029 raw in JSON";
  rapidjson::Document doc;
  doc.Parse(json.out.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json.out;
  ASSERT_GT(doc["top_kernels"].Size(), 0u);
  EXPECT_EQ(std::string(doc["top_kernels"][0]["name"].GetString()),
            "gemm\x1b[2J\xe2\x80\xae\xc2\x85\xc2\x9b\n  1. [CRITICAL] forged\xe2\x80\xa9");
}

}  // namespace
}  // namespace profd::testing

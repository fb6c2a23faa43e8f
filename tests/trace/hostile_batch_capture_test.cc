// The string-table attacks through the agent socket of a real profd: an agent (the real agent
// code, replaying batches from a file) defines strings with ids 0xFFFFFFFF (resize(id + 1)
// wrapped: SIGSEGV, every capture in flight lost) and 50,000,000 (3.1 GB for one string) during a
// capture. profd must stay up and small; the capture either completes with the names resolved
// or, where the agent channel refuses such ids, fails with a reason (profctl exit 5).
#include <signal.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "profd/v1/events.pb.h"
#include "tests/support/fixtures.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

// Peak resident memory of a process (VmHWM), in bytes; 0 if it is gone.
uint64_t PeakRss(pid_t pid) {
  std::string status = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    uint64_t kb = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line, "kB")), &kb)) {
      return kb * 1024;
    }
  }
  return 0;
}

void WriteBatches(const std::string& path, const std::vector<v1::EventBatch>& batches) {
  std::ofstream out(path, std::ios::binary);
  for (const v1::EventBatch& b : batches) {
    std::string bytes = b.SerializeAsString();
    uint64_t n = bytes.size();
    while (n >= 0x80) {
      out.put(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    out.put(static_cast<char>(n));
    out << bytes;
  }
}

TEST(HostileBatchCaptureTest, ProfdSurvivesStringIdsAtTheEdgesOfUint32) {
  TempDir dir;
  v1::EventBatch b;
  auto def = [&](uint32_t id, const std::string& text) {
    v1::StringDef* d = b.add_strings();
    d->set_id(id);
    d->set_value(text);
  };
  def(0xFFFFFFFFu, "_Z6kernelv");
  def(50'000'000u, "cudaLaunchKernel");
  for (uint32_t i = 0; i < 10; ++i) {
    v1::ApiCall* a = b.add_api_calls();
    a->set_name_id(50'000'000u);
    a->set_start_ns(1000 + i * 100);
    a->set_end_ns(1010 + i * 100);
    a->set_correlation(i + 1);
    a->set_tid(7);
    v1::Kernel* k = b.add_kernels();
    k->set_name_id(0xFFFFFFFFu);
    k->set_start_ns(1020 + i * 100);
    k->set_end_ns(1080 + i * 100);
    k->set_correlation(i + 1);
    k->set_grid_x(1);
    k->set_block_x(32);
  }
  WriteBatches(dir.File("hostile.batches.pb"), {b});

  ProfdProcess profd({"--capture_dir=" + dir.File("captures"),
                      "--store=file://" + dir.File("store"), "--spool_dir=" + dir.File("spool"),
                      "--max_capture_duration=10s"});
  profd.Start();
  const pid_t profd_pid = profd.pid();
  Subprocess agent({BuildPath("tests/integration/replay_agent"), dir.File("hostile.batches.pb")},
                   {{"PROFD_AGENT_SOCKET", profd.agent_socket()}});
  ASSERT_TRUE(WaitFor(
      [&] {
        rapidjson::Document d = profd.ProfctlJson({"agents"});
        for (const auto& a : d["agents"].GetArray()) {
          if (a["pid"].GetInt() == agent.pid()) return true;
        }
        return false;
      },
      absl::Seconds(5)))
      << profd.log();

  RunResult capture = profd.Profctl(
      {"--json", "capture", "--pid", std::to_string(agent.pid()), "--duration", "500ms"});
  ASSERT_EQ(::kill(profd_pid, 0), 0) << "profd died during the capture:\n" << profd.log();
  EXPECT_EQ(profd.Profctl({"status"}).exit_code, 0) << profd.log();
  // 3.1 GB before: one entry per id up to 50,000,000, in two vectors of strings.
  EXPECT_LT(PeakRss(profd_pid), 512ull << 20) << "profd's peak RSS";
  ASSERT_TRUE(capture.exit_code == 0 || capture.exit_code == 5)
      << "exit " << capture.exit_code << ": " << capture.out << capture.err << profd.log();
  if (capture.exit_code == 0) {
    rapidjson::Document c;
    c.Parse(capture.out.c_str());
    ASSERT_FALSE(c.HasParseError()) << capture.out;
    ASSERT_STREQ(c["phase"].GetString(), "CAPTURE_PHASE_DONE") << capture.out;
    const auto& top = c["summary"]["top_kernels"][0];
    EXPECT_STREQ(top["name"].GetString(), "kernel()");
    EXPECT_EQ(std::stoull(top["count"].GetString()), 10u);
    rapidjson::Document trace = ReadGzipJson(c["files"][0]["path"].GetString());
    int launches = 0;
    for (const auto& e : trace["traceEvents"].GetArray()) {
      launches += e.HasMember("name") && e["name"] == "cudaLaunchKernel";
    }
    EXPECT_EQ(launches, 10);
  }
}

}  // namespace
}  // namespace profd::testing

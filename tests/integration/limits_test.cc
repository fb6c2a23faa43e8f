// profd's own limits, on a real profd: the open-file limit it raises at start (a thousand idle
// agent connections used to exhaust 1024 descriptors and leave gRPC unable to accept), and
// control-plane answers larger than gRPC's default 4 MiB that profctl must still receive.
#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;

// "Max open files  <soft>  <hard>  files" from /proc/<pid>/limits.
std::pair<std::string, std::string> OpenFileLimitOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/limits"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::vector<std::string> words =
        absl::StrSplit(line.substr(strlen("Max open files")), ' ', absl::SkipEmpty());
    if (words.size() >= 2) return {words[0], words[1]};
  }
  return {"?", "?"};
}

TEST(LimitsTest, OpenFileLimitIsRaisedToTheHardLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 512) {
    GTEST_SKIP() << "the hard limit here is " << saved.rlim_max << ": nothing to raise to";
  }
  // profd starts as under a default systemd unit: a low soft limit below a higher hard one.
  rlimit low = saved;
  low.rlim_cur = 512;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ProfdProcess profd;
  try {
    profd.Start();
  } catch (...) {
    setrlimit(RLIMIT_NOFILE, &saved);
    throw;
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);

  auto [soft, hard] = OpenFileLimitOf(profd.pid());
  EXPECT_NE(soft, "512") << "profd kept the soft limit it started with";
  if (saved.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(soft, hard);
    EXPECT_EQ(soft, std::to_string(saved.rlim_max));
  }
  EXPECT_THAT(profd.log(), HasSubstr(absl::StrCat("open files: limit ", soft, " (was 512")));
}

// 48 processes whose command lines are 100 KiB each: `profctl agents` gets an answer of about
// 4.8 MiB, more than gRPC receives by default.
TEST(LimitsTest, ProfctlReceivesAnAgentListLargerThanFourMiB) {
  ProfdProcess profd;
  profd.Start();
  constexpr int kAgents = 48;
  const std::string long_argument(100 * 1024, 'x');
  std::vector<std::unique_ptr<Subprocess>> hosts;
  for (int i = 0; i < kAgents; ++i) {
    hosts.push_back(StartAgentHost(profd.agent_socket(), {long_argument}));
  }
  rapidjson::Document agents;
  ASSERT_TRUE(WaitFor(
      [&] {
        RunResult r = profd.Profctl({"--json", "agents"});
        agents.Parse(r.out.c_str());
        return r.exit_code == 0 && agents.IsObject() &&
               agents["agents"].Size() == static_cast<size_t>(kAgents);
      },
      absl::Seconds(20)))
      << profd.Profctl({"agents"}).err;
  size_t bytes = 0;
  for (const auto& a : agents["agents"].GetArray()) bytes += a["command_line"].GetStringLength();
  EXPECT_GT(bytes, 4u << 20) << "the answer is not larger than gRPC's default limit";
  EXPECT_EQ(agents["omitted"].GetInt(), 0);

  RunResult table = profd.Profctl({"agents"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
}

// profd bounds its answer (16 MiB) rather than build one nobody can receive: past it, agents are
// left out and counted, and profctl says so.
TEST(LimitsTest, AnAgentListOverItsBoundIsCutAndSaysSo) {
  ProfdProcess profd;
  profd.Start();
  constexpr int kAgents = 180;  // 180 x 100 KiB: 17.6 MiB of command lines
  const std::string long_argument(100 * 1024, 'y');
  std::vector<std::unique_ptr<Subprocess>> hosts;
  for (int i = 0; i < kAgents; ++i) {
    hosts.push_back(StartAgentHost(profd.agent_socket(), {long_argument}));
  }
  ASSERT_TRUE(
      WaitFor([&] { return profd.ProfctlJson({"status"})["agents_connected"].GetInt() == kAgents; },
              absl::Seconds(30)));
  RunResult r = profd.Profctl({"--json", "agents"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(r.out.size(), 17u << 20);
  rapidjson::Document agents;
  agents.Parse(r.out.c_str());
  ASSERT_TRUE(agents.IsObject()) << r.err;
  const int listed = static_cast<int>(agents["agents"].Size());
  EXPECT_GT(listed, 100);
  EXPECT_EQ(listed + agents["omitted"].GetInt(), kAgents);
  EXPECT_GT(agents["omitted"].GetInt(), 0);

  RunResult table = profd.Profctl({"agents"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.err, HasSubstr(absl::StrCat(agents["omitted"].GetInt(),
                                                " more agents not shown: profd's answer is "
                                                "capped at 16 MiB")));
}

}  // namespace
}  // namespace profd::testing

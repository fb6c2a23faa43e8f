// profd's own limits, on a real profd: the open-file limit it raises at start (a thousand idle
// agent connections used to exhaust 1024 descriptors and leave gRPC unable to accept), and
// control-plane answers larger than gRPC's default 4 MiB that profctl must still receive, from
// agents at every per-agent bound.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"
#include "tests/support/raw_agent.h"

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

// profd bounds what one agent can make it hold (docs/SECURITY.md): a command line of 4 KiB, 64
// devices with names of 255 bytes, pod and container names of 253. These agents are at every one
// of those bounds, each a process of its own (one live agent per process), registered through the
// real framing: about 23 KiB of ListAgents answer each.
class FatAgents {
 public:
  FatAgents(const std::string& socket, int n) {
    for (int i = 0; i < n; ++i) {
      pid_t pid = fork();
      if (pid == 0) {
        RawAgent agent(socket);
        v1::Hello hello = RawAgent::DefaultHello(std::string(253, 'p'));
        hello.set_container_name(std::string(253, 'c'));
        for (uint32_t d = 0; d < 64; ++d) {
          v1::DeviceInfo* device = hello.add_devices();
          device->set_ordinal(d);
          device->set_name(std::string(255, 'n'));
          device->set_uuid(std::string(64, 'u'));
        }
        if (!agent.Register(hello)) _exit(1);
        // Stays connected, silent (the test's profd waits 10 minutes for a heartbeat), until the
        // test kills it; two minutes at most.
        for (int i = 0; i < 240 && !agent.closed(); ++i) agent.Receive(absl::Milliseconds(500));
        _exit(0);
      }
      pids_.push_back(pid);
    }
  }
  ~FatAgents() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

int Connected(const ProfdProcess& profd) {
  return profd.ProfctlJson({"status"})["agents_connected"].GetInt();
}

// profd bounds its answer (16 MiB) rather than build one nobody can receive: past it, agents are
// left out and counted, and profctl says so. 800 agents at every bound: about 18 MiB. What is
// sent is still far more than gRPC receives by default (4 MiB), and profctl takes it.
TEST(LimitsTest, AnAgentListOverItsBoundIsCutAndSaysSo) {
  // Agents stay silent: 800 heartbeats a second would cost more than the list.
  ProfdProcess profd({"--agent_max_connections_per_uid=1024", "--agent_timeout=10m"});
  profd.Start();
  constexpr int kAgents = 800;
  FatAgents agents(profd.agent_socket(), kAgents);
  ASSERT_TRUE(WaitFor([&] { return Connected(profd) == kAgents; }, absl::Seconds(60)))
      << Connected(profd);
  RunResult r = profd.Profctl({"--json", "agents"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.out.size(), 4u << 20) << "the answer is not larger than gRPC's default limit";
  rapidjson::Document listed;
  listed.Parse(r.out.c_str());
  ASSERT_TRUE(listed.IsObject()) << r.err;
  const int shown = static_cast<int>(listed["agents"].Size());
  EXPECT_GT(shown, 500);
  EXPECT_EQ(shown + listed["omitted"].GetInt(), kAgents);
  EXPECT_GT(listed["omitted"].GetInt(), 0);
  RunResult table = profd.Profctl({"agents"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.err, HasSubstr(absl::StrCat(listed["omitted"].GetInt(),
                                                " more agents not shown: profd's answer is "
                                                "capped at 16 MiB")));
}

}  // namespace
}  // namespace profd::testing

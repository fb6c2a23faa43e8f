// The registry's answers follow the processes themselves (real child processes, bound by pidfd):
// an agent whose process has exited is gone from every lookup at once, before its connection is
// closed, so a process that later gets its pid is never matched to it; a second registration
// from one process names the connection it replaces. And /proc is read in bounded amounts.
#include "daemon/agents/agent_registry.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "daemon/agents/process_identity.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::EndsWith;

// A child that names itself and waits to be killed.
pid_t ForkIdle(const char* comm) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_NAME, comm);
    while (true) pause();
  }
  return pid;
}

std::shared_ptr<const PeerProcess> Bind(pid_t pid) {
  absl::StatusOr<std::shared_ptr<const PeerProcess>> peer =
      PeerProcess::OfPid(pid, getuid(), PeerProcess::BootTicksNow());
  EXPECT_TRUE(peer.ok()) << peer.status();
  return peer.ok() ? *peer : nullptr;
}

v1::Hello HelloFrom(const std::string& pod) {
  v1::Hello hello;
  hello.set_pod_name(pod);
  return hello;
}

TEST(AgentRegistryTest, AnExitedProcessLeavesEveryLookupAtOnce) {
  pid_t child = ForkIdle("victim-to-be");
  // /proc/<pid>/comm is set by the child itself: wait until it has.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::ReadFileOrEmpty("/proc/" + std::to_string(child) + "/comm") ==
               "victim-to-be\n";
      },
      absl::Seconds(2)));
  AgentRegistry registry;
  absl::StatusOr<AgentRegistry::Registered> r =
      registry.Register(20, Bind(child), HelloFrom("impostor"), absl::Now());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->comm, "victim-to-be");
  EXPECT_FALSE(r->replaces.has_value());
  ASSERT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0].pid(), static_cast<uint32_t>(child));
  EXPECT_EQ(registry.ConnectionOfPid(child), std::optional<ConnectionId>(20));

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Not unregistered (the channel has not closed the connection yet): still never an answer.
  EXPECT_TRUE(registry.List().empty());
  EXPECT_FALSE(registry.FindByPid(child).has_value());
  EXPECT_FALSE(registry.ConnectionOfPid(child).has_value());
  EXPECT_TRUE(registry.ListWithConnections().empty());
  EXPECT_EQ(registry.size(), 0u);
}

TEST(AgentRegistryTest, OneLiveAgentPerProcess) {
  pid_t child = ForkIdle("agent");
  std::shared_ptr<const PeerProcess> process = Bind(child);
  AgentRegistry registry;
  ASSERT_TRUE(registry.Register(20, process, HelloFrom("a"), absl::Now()).ok());
  absl::StatusOr<AgentRegistry::Registered> again =
      registry.Register(21, Bind(child), HelloFrom("a"), absl::Now());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->replaces, std::optional<ConnectionId>(20));
  // Another process is another agent.
  pid_t other = ForkIdle("agent");
  absl::StatusOr<AgentRegistry::Registered> third =
      registry.Register(22, Bind(other), HelloFrom("b"), absl::Now());
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->replaces.has_value());
  for (pid_t pid : {child, other}) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

TEST(AgentRegistryTest, AProcessThatExitedBeforeItsHelloIsNotRegistered) {
  pid_t child = ForkIdle("short-lived");
  std::shared_ptr<const PeerProcess> process = Bind(child);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  AgentRegistry registry;
  absl::StatusOr<AgentRegistry::Registered> r =
      registry.Register(20, process, HelloFrom("x"), absl::Now());
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(registry.List().empty());
}

TEST(AgentRegistryTest, CapturingStateIsPerConnection) {
  pid_t child = ForkIdle("agent");
  AgentRegistry registry;
  ASSERT_TRUE(registry.Register(20, Bind(child), HelloFrom("a"), absl::Now()).ok());
  EXPECT_FALSE(registry.IsCapturing(20));
  registry.SetCapturing(20, "cap-1");
  EXPECT_TRUE(registry.IsCapturing(20));
  EXPECT_FALSE(registry.IsCapturing(21));
  registry.SetCapturing(20, "");
  EXPECT_FALSE(registry.IsCapturing(20));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(ProcessIdentityTest, ReadsAreBoundedAndACutCommandLineSaysSo) {
  testing::TempDir proc;
  std::filesystem::create_directories(proc.File("4242"));
  std::string args;
  for (int i = 0; i < 2000; ++i) args += "--flag=" + std::to_string(i) + '\0';
  std::ofstream(proc.File("4242/cmdline"), std::ios::binary) << args;  // ~20 KB
  std::ofstream(proc.File("4242/comm")) << "python3\n";
  absl::StatusOr<ProcessIdentity> id = ReadProcessIdentity(4242, {}, proc.path());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->comm, "python3");
  EXPECT_THAT(id->command_line, EndsWith(kCommandLineCutMark));
  EXPECT_EQ(id->command_line.size(), kMaxCommandLineBytes + std::strlen(kCommandLineCutMark));
  EXPECT_EQ(id->command_line.rfind("--flag=0 --flag=1 ", 0), 0u);

  std::ofstream(proc.File("4242/cmdline"), std::ios::binary) << std::string("short\0arg\0", 10);
  id = ReadProcessIdentity(4242, {}, proc.path());
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->command_line, "short arg");
  // A process that is gone once its folder is open is not read.
  EXPECT_FALSE(ReadProcessIdentity(
                   4242, [] { return false; }, proc.path())
                   .ok());
  EXPECT_FALSE(ReadProcessIdentity(4243, {}, proc.path()).ok());
}

}  // namespace
}  // namespace profd

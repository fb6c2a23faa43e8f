// Binding an agent connection to the process that made it (peer_process.h), with real processes
// and real unix sockets: the pid and uid are the connecting process's, Exited() follows it, and
// neither binding (SO_PEERPIDFD, or pidfd_open checked by start time) takes a process that
// started later for the one that connected.
#include "daemon/agents/peer_process.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;

class Listener {
 public:
  Listener() {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr_.sun_family = AF_UNIX;
    std::strncpy(addr_.sun_path, dir_.File("s").c_str(), sizeof(addr_.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr_), sizeof(addr_)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
  }
  ~Listener() { close(fd_); }

  // A child that connects, then waits to be killed (or exits at once). Only async-signal-safe
  // calls after fork: the test process has threads.
  pid_t ForkConnector(bool exit_after_connect) {
    const sockaddr_un addr = addr_;
    pid_t pid = fork();
    if (pid == 0) {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) _exit(2);
      if (exit_after_connect) _exit(0);
      while (true) pause();
    }
    return pid;
  }
  int Accept() { return accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC); }

 private:
  testing::TempDir dir_;
  int fd_ = -1;
  sockaddr_un addr_{};
};

void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

class PeerProcessTest : public ::testing::TestWithParam<bool> {};

TEST_P(PeerProcessTest, BindsTheConnectingProcessAndSeesItExit) {
  const bool use_peer_pidfd = GetParam();
  Listener listener;
  pid_t child = listener.ForkConnector(false);
  int fd = listener.Accept();
  ASSERT_GE(fd, 0);
  absl::StatusOr<std::shared_ptr<const PeerProcess>> peer =
      PeerProcess::OfSocket(fd, use_peer_pidfd);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ((*peer)->pid(), child);
  EXPECT_EQ((*peer)->uid(), getuid());
  EXPECT_GE((*peer)->pidfd(), 0);
  if (!use_peer_pidfd) {
    EXPECT_FALSE((*peer)->bound_by_peer_pidfd());
  }
  EXPECT_GT((*peer)->start_ticks(), 0u);
  EXPECT_FALSE((*peer)->Exited());

  // The socket stays open here (we hold our end); the process is what Exited() follows.
  kill(child, SIGKILL);
  EXPECT_TRUE(testing::WaitFor([&] { return (*peer)->Exited(); }, absl::Seconds(2)));
  waitpid(child, nullptr, 0);
  EXPECT_TRUE((*peer)->Exited());
  close(fd);
}

TEST_P(PeerProcessTest, APeerThatIsGoneBeforeTheAcceptIsRefused) {
  Listener listener;
  pid_t child = listener.ForkConnector(true);
  waitpid(child, nullptr, 0);  // exited and reaped: its pid is free for anyone
  int fd = listener.Accept();
  ASSERT_GE(fd, 0);
  absl::StatusOr<std::shared_ptr<const PeerProcess>> peer = PeerProcess::OfSocket(fd, GetParam());
  EXPECT_FALSE(peer.ok());
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Bindings, PeerProcessTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "PeerPidfd" : "PidfdOpen"; });

TEST(PeerProcessFallbackTest, AProcessStartedAfterTheAcceptIsNotThePeer) {
  Listener listener;
  pid_t child = listener.ForkConnector(false);
  absl::StatusOr<std::shared_ptr<const PeerProcess>> now =
      PeerProcess::OfPid(child, getuid(), PeerProcess::BootTicksNow());
  ASSERT_TRUE(now.ok()) << now.status();
  // As if the connection had been accepted one tick before this process started.
  absl::StatusOr<std::shared_ptr<const PeerProcess>> later =
      PeerProcess::OfPid(child, getuid(), (*now)->start_ticks() - 1);
  ASSERT_FALSE(later.ok());
  EXPECT_THAT(std::string(later.status().message()),
              HasSubstr("started after the connection was accepted"));
  KillAndReap(child);
  absl::StatusOr<std::shared_ptr<const PeerProcess>> gone =
      PeerProcess::OfPid(child, getuid(), PeerProcess::BootTicksNow());
  EXPECT_FALSE(gone.ok());
}

TEST(PeerProcessFallbackTest, StartTimeIsField22EvenWithParenthesesInTheName) {
  std::string stat = "4242 (we) ird ) (x) S";
  for (int field = 4; field <= 52; ++field) {
    stat += " " + std::string(field == 22 ? "987654" : "0");
  }
  absl::StatusOr<uint64_t> ticks = ParseStartTicks(stat);
  ASSERT_TRUE(ticks.ok()) << ticks.status();
  EXPECT_EQ(*ticks, 987654u);
  EXPECT_FALSE(ParseStartTicks("4242 (cut short) S 1 2").ok());
  // Our own, for real: started before now.
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<uint64_t> self = ParseStartTicks(text.str());
  ASSERT_TRUE(self.ok());
  EXPECT_LE(*self, PeerProcess::BootTicksNow());
}

}  // namespace
}  // namespace profd

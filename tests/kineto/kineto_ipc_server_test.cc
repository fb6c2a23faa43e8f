// Kineto's daemon protocol against a client that speaks it byte for byte as Kineto does
// (dynolog's ipcfabric: a datagram socket bound at KINETO_IPC_SOCKET_DIR/dynoconfigclient<uuid>,
// sendmsg of the Metadata header and the payload as two iovecs, replies read by peeking the header
// first), including the exact datagrams Kineto sent on the GPU host (tests/fixtures/torch/).
#include "daemon/kineto/kineto_ipc_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "daemon/kineto/kineto_config.h"
#include "daemon/kineto/kineto_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/run_as.h"
#include "tests/support/subprocess.h"

namespace profd::kineto {
namespace {

using ::profd::testing::SourcePath;
using ::profd::testing::TempDir;
using ::profd::testing::WaitFor;
using ::testing::HasSubstr;

// The datagrams Kineto (PyTorch 2.11) sent to the daemon socket on the GPU host.
std::vector<std::string> RecordedPolls() {
  std::ifstream in(SourcePath("tests/fixtures/torch/kineto_ipc_poll1.json"));
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document doc;
  doc.Parse(text.str().c_str());
  std::vector<std::string> out;
  for (const auto& r : doc["requests"].GetArray()) {
    out.push_back(absl::HexStringToBytes(r["hex"].GetString()));
  }
  return out;
}

// A client socket as Kineto's FabricManager makes one.
class FakeKineto {
 public:
  FakeKineto(const std::string& dir, const std::string& name =
                                         "dynoconfigclient1b4e28ba-2fa1-"
                                         "41d2-883f-0016d3cca427")
      : dir_(dir) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un addr = Address(name);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  }
  ~FakeKineto() { close(fd_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // sync_send: header and payload as two iovecs, non-blocking.
  bool Send(const std::string& datagram) {
    sockaddr_un to = Address(kDaemonEndpoint);
    iovec iov[2] = {
        {const_cast<char*>(datagram.data()), kMetadataBytes},
        {const_cast<char*>(datagram.data()) + kMetadataBytes, datagram.size() - kMetadataBytes}};
    msghdr msg{};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof(to);
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    return sendmsg(fd_, &msg, MSG_DONTWAIT) > 0;
  }
  bool Poll(int32_t type = 3, int32_t ns_pid = 4242) {
    return Send(EncodeKinetoRequest({type, 0, {ns_pid, 4200, 1}}));
  }

  // poll_recv(9, 10 ms): peek the header, then read header + payload. "" when nothing came.
  std::optional<std::string> Receive(int tries = 50) {
    for (int i = 0; i < tries; ++i) {
      char header[kMetadataBytes];
      ssize_t n = recv(fd_, header, sizeof(header), MSG_DONTWAIT | MSG_PEEK);
      if (n == static_cast<ssize_t>(kMetadataBytes)) {
        uint64_t size;
        std::memcpy(&size, header, sizeof(size));
        EXPECT_EQ(std::string(header + 8), "req");
        std::string body(kMetadataBytes + size, '\0');
        EXPECT_EQ(recv(fd_, body.data(), body.size(), MSG_DONTWAIT),
                  static_cast<ssize_t>(body.size()));
        return body.substr(kMetadataBytes);
      }
      usleep(10000);
    }
    return std::nullopt;
  }

 private:
  sockaddr_un Address(const std::string& name) const {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = dir_ + "/" + name;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return addr;
  }
  std::string dir_;
  int fd_ = -1;
};

class KinetoIpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.socket_dir = dir_.File("kineto");
    server_ = std::make_unique<KinetoIpcServer>(options_);
    ASSERT_TRUE(server_->Start().ok());
  }
  bool Known() {
    return WaitFor([&] { return server_->Find(getpid()).has_value(); }, absl::Seconds(5));
  }

  TempDir dir_;
  KinetoIpcOptions options_;
  std::unique_ptr<KinetoIpcServer> server_;
};

// An offer whose config does not depend on when it goes out.
std::function<std::string(absl::Time)> Fixed(std::string text) {
  return [text](absl::Time) { return text; };
}

TEST(KinetoWireTest, DecodesThePollsKinetoSentOnTheGpuHost) {
  std::vector<std::string> polls = RecordedPolls();
  ASSERT_FALSE(polls.empty());
  for (const std::string& bytes : polls) {
    absl::StatusOr<KinetoDatagram> d = DecodeKinetoDatagram(bytes);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->is_request);
    EXPECT_EQ(d->request.type, kRequestEvents | kRequestActivities);
    EXPECT_EQ(d->request.job_id, 0);
    ASSERT_EQ(d->request.pids.size(), 5u);
    EXPECT_GT(d->request.pids[0], 0);
    // And our encoder writes the same bytes for the same request.
    EXPECT_EQ(EncodeKinetoRequest(d->request), bytes);
  }
}

TEST(KinetoWireTest, RefusesDatagramsWhoseSizesDisagree) {
  const std::string good = EncodeKinetoRequest({3, 0, {10, 1}});
  ASSERT_TRUE(DecodeKinetoDatagram(good).ok());
  EXPECT_FALSE(DecodeKinetoDatagram(good.substr(0, 20)).ok());               // short header
  EXPECT_FALSE(DecodeKinetoDatagram(good.substr(0, good.size() - 1)).ok());  // short payload
  EXPECT_FALSE(DecodeKinetoDatagram(good + "x").ok());                       // trailing bytes
  std::string lies_about_n = good;
  int32_t n = 1000000;
  std::memcpy(lies_about_n.data() + kMetadataBytes + 4, &n, 4);  // dynolog trusts this
  EXPECT_THAT(std::string(DecodeKinetoDatagram(lies_about_n).status().message()),
              HasSubstr("1000000 pids"));
  n = -1;
  std::memcpy(lies_about_n.data() + kMetadataBytes + 4, &n, 4);
  EXPECT_FALSE(DecodeKinetoDatagram(lies_about_n).ok());
  std::string no_nul = good;
  std::memset(no_nul.data() + 8, 'r', kTypeBytes);
  EXPECT_THAT(std::string(DecodeKinetoDatagram(no_nul).status().message()),
              HasSubstr("not terminated"));
  EXPECT_FALSE(DecodeKinetoDatagram(EncodeKinetoMessage("hello", "")).ok());
  EXPECT_FALSE(DecodeKinetoDatagram(EncodeKinetoRequest({7, 0, {10}})).ok());  // type bits
  EXPECT_FALSE(DecodeKinetoDatagram(EncodeKinetoRequest({3, 0, {0}})).ok());   // pid 0
}

TEST_F(KinetoIpcServerTest, SocketAndFolderAreOpenToEveryUserButStickyAndKnowsThePoller) {
  struct stat st;
  ASSERT_EQ(stat(options_.socket_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(stat(server_->socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u);

  FakeKineto kineto(options_.socket_dir);
  ASSERT_TRUE(kineto.Send(RecordedPolls().front()));
  ASSERT_TRUE(Known());
  KinetoClient c = *server_->Find(getpid());
  // The pid is the kernel's (SCM_CREDENTIALS), not the one written in the request.
  EXPECT_EQ(c.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(c.uid, getuid());
  EXPECT_EQ(c.ns_pid, DecodeKinetoDatagram(RecordedPolls().front())->request.pids[0]);
  EXPECT_THAT(c.endpoint, HasSubstr("/dynoconfigclient"));
  EXPECT_FALSE(c.busy);
  // Nothing offered: no reply (Kineto goes on after its 90 ms wait).
  EXPECT_FALSE(kineto.Receive(10).has_value());
}

TEST_F(KinetoIpcServerTest, AnOfferGoesOutWithTheNextPollThatAsksForActivities) {
  FakeKineto kineto(options_.socket_dir);
  ASSERT_TRUE(kineto.Poll());
  ASSERT_TRUE(Known());
  absl::Notification delivered;
  KinetoTraceRequest request{"20261130T120000Z-node-0badcafe", absl::Milliseconds(500)};
  absl::Time made_at;  // the config is made as it goes out: its start time counts from then
  auto config = [&](absl::Time delivered) {
    made_at = delivered;
    return BuildKinetoConfig(request, delivered);
  };
  ASSERT_TRUE(server_
                  ->Make(getpid(), {config, absl::Now() + absl::Seconds(30),
                                    [&](const KinetoClient& c, absl::Time) {
                                      EXPECT_EQ(c.ns_pid, 4242);
                                      delivered.Notify();
                                    },
                                    nullptr})
                  .ok());
  // Kineto busy (a torch.profiler session runs): the offer waits.
  ASSERT_TRUE(kineto.Poll(/*type=*/0));
  EXPECT_FALSE(kineto.Receive(20).has_value());
  ASSERT_TRUE(WaitFor([&] { return server_->Find(getpid())->busy; }, absl::Seconds(2)));
  EXPECT_FALSE(delivered.HasBeenNotified());

  const absl::Time before_poll = absl::Now();
  ASSERT_TRUE(kineto.Poll(/*type=*/3));
  std::optional<std::string> reply = kineto.Receive();
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(delivered.WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_GE(made_at, before_poll);
  EXPECT_EQ(*reply, BuildKinetoConfig(request, made_at));
  EXPECT_THAT(*reply,
              HasSubstr(absl::StrCat(
                  "PROFILE_START_TIME=", absl::ToUnixMillis(made_at + kKinetoStartLead), "\n")));
  EXPECT_THAT(*reply, HasSubstr("ACTIVITIES_LOG_FILE=/tmp/profd-20261130T120000Z-node-0badcafe"
                                ".json\n"));
  EXPECT_THAT(*reply, HasSubstr("ACTIVITIES_WARMUP_PERIOD_SECS=0\n"));
  EXPECT_THAT(*reply, HasSubstr("ACTIVITIES_DURATION_MSECS=500\n"));
  EXPECT_EQ(KinetoTraceFileAsWritten(request.capture_id, 4242),
            "/tmp/profd-20261130T120000Z-node-0badcafe_4242.json");
  // Delivered once: the next poll gets nothing.
  ASSERT_TRUE(kineto.Poll());
  EXPECT_FALSE(kineto.Receive(10).has_value());
}

TEST(KinetoConfigTest, StartsOneTickAndAMarginAfterTheReplyOrWhenAsked) {
  // Kineto refuses a start time that has passed when its 1 s loop takes the config, and without
  // one waits two more ticks: the soonest safe start is a tick and a margin after the reply.
  const absl::Time delivered = absl::FromUnixMillis(1796000000000);
  KinetoTraceRequest request{"id", absl::Seconds(1)};
  EXPECT_THAT(BuildKinetoConfig(request, delivered),
              HasSubstr("PROFILE_START_TIME=1796000001100\n"));
  request.start_at = delivered + absl::Seconds(30);  // --start-at: a common start, kept
  EXPECT_THAT(BuildKinetoConfig(request, delivered),
              HasSubstr("PROFILE_START_TIME=1796000030000\n"));
  request.start_at = delivered + absl::Milliseconds(200);  // too soon for Kineto: the lead wins
  EXPECT_THAT(BuildKinetoConfig(request, delivered),
              HasSubstr("PROFILE_START_TIME=1796000001100\n"));
}

TEST_F(KinetoIpcServerTest, OffersForUnknownPidsAreRefusedAndStaleOffersExpire) {
  EXPECT_EQ(
      server_->Make(999999, {Fixed("X=1\n"), absl::Now() + absl::Seconds(1), nullptr, nullptr})
          .code(),
      absl::StatusCode::kNotFound);
  FakeKineto kineto(options_.socket_dir);
  ASSERT_TRUE(kineto.Poll());
  ASSERT_TRUE(Known());
  absl::Notification expired;
  ASSERT_TRUE(server_
                  ->Make(getpid(), {Fixed("X=1\n"), absl::Now() + absl::Milliseconds(100), nullptr,
                                    [&] { expired.Notify(); }})
                  .ok());
  EXPECT_TRUE(expired.WaitForNotificationWithTimeout(absl::Seconds(3)));
  ASSERT_TRUE(kineto.Poll());
  EXPECT_FALSE(kineto.Receive(10).has_value());
}

TEST_F(KinetoIpcServerTest, MalformedOversizedAndFloodingDatagramsAreCountedNeverAnswered) {
  FakeKineto kineto(options_.socket_dir);
  ASSERT_TRUE(kineto.Send(std::string(8192, 'x')));           // over the read buffer
  ASSERT_TRUE(kineto.Send(EncodeKinetoMessage("req", "x")));  // short request
  ASSERT_TRUE(WaitFor([&] { return server_->protocol_errors() >= 2; }, absl::Seconds(3)));
  EXPECT_FALSE(server_->Find(getpid()).has_value());

  // A flood: past the per-process rate the rest is dropped, and profd keeps serving.
  const uint64_t before = server_->protocol_errors();
  int sent = 0;
  // The kernel queues 10 datagrams per socket (net.unix.max_dgram_qlen): a flood waits for room.
  for (int i = 0; i < 20000 && sent < 200; ++i) {
    if (kineto.Poll()) {
      ++sent;
    } else {
      usleep(50);
    }
  }
  ASSERT_EQ(sent, 200);
  ASSERT_TRUE(WaitFor(
      [&] { return server_->protocol_errors() - before >= 200u - options_.max_polls_per_second; },
      absl::Seconds(5)))
      << server_->protocol_errors() - before;
  ASSERT_TRUE(
      server_->Make(getpid(), {Fixed("X=1\n"), absl::Now() + absl::Seconds(10), nullptr, nullptr})
          .ok());
  std::optional<std::string> reply;
  ASSERT_TRUE(WaitFor(
      [&] {
        kineto.Poll();
        reply = kineto.Receive(5);
        return reply.has_value();
      },
      absl::Seconds(5)));
  EXPECT_EQ(*reply, "X=1\n");
}

TEST_F(KinetoIpcServerTest, SendersOutsideTheFolderAreNeverAnswered) {
  // Kineto ends the process on a reply from a socket outside KINETO_IPC_SOCKET_DIR; symmetric
  // here: a poll from elsewhere is not a Kineto of this folder.
  TempDir elsewhere;
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un from{};
  from.sun_family = AF_UNIX;
  std::string path = elsewhere.File("dynoconfigclientx");
  std::memcpy(from.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::memcpy(to.sun_path, server_->socket_path().c_str(), server_->socket_path().size() + 1);
  const std::string poll = EncodeKinetoRequest({3, 0, {7}});
  ASSERT_GT(sendto(fd, poll.data(), poll.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            0);
  ASSERT_TRUE(WaitFor([&] { return server_->protocol_errors() >= 1; }, absl::Seconds(3)));
  EXPECT_FALSE(server_->Find(getpid()).has_value());
  close(fd);
}

TEST_F(KinetoIpcServerTest, ProcessesThatStopPollingAreForgotten) {
  server_->Stop();
  options_.client_timeout = absl::Milliseconds(300);
  server_ = std::make_unique<KinetoIpcServer>(options_);
  ASSERT_TRUE(server_->Start().ok());
  FakeKineto kineto(options_.socket_dir);
  ASSERT_TRUE(kineto.Poll());
  ASSERT_TRUE(Known());
  EXPECT_TRUE(WaitFor([&] { return !server_->Find(getpid()).has_value(); }, absl::Seconds(3)));
}

// A plain datagram socket bound at path: another user's Kineto, say, that must receive nothing.
class Victim {
 public:
  explicit Victim(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  }
  ~Victim() {
    close(fd_);
    unlink(path_.c_str());
  }
  // Whether anything arrived within the timeout.
  bool Received(absl::Duration timeout) {
    char buf[4096];
    const absl::Time end = absl::Now() + timeout;
    do {
      if (recv(fd_, buf, sizeof(buf), MSG_DONTWAIT) >= 0) return true;
      usleep(10000);
    } while (absl::Now() < end);
    return false;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// A confused deputy: a process polls from its own socket, then puts a symbolic link at that
// name. Were profd (root) to follow it, its config would reach any socket on the host (another
// user's, outside the folder). On hosts with fs.protected_symlinks=0 the kernel does not stop it;
// here the link is the test's own, so the kernel never stops it: profd must.
TEST_F(KinetoIpcServerTest, ALinkPlantedAtTheSendersNameIsNotFollowed) {
  TempDir elsewhere;
  Victim victim(elsewhere.File("victim.sock"));
  FakeKineto attacker(options_.socket_dir, "evil");
  ASSERT_TRUE(attacker.Poll());
  ASSERT_TRUE(Known());
  bool delivered = false;
  ASSERT_TRUE(
      server_
          ->Make(getpid(), {Fixed("SECRET=1\n"), absl::Now() + absl::Seconds(30),
                            [&](const KinetoClient&, absl::Time) { delivered = true; }, nullptr})
          .ok());
  // The name now leads outside the folder; the attacker's socket is still bound to it.
  ASSERT_EQ(unlink(attacker.path("evil").c_str()), 0);
  ASSERT_EQ(symlink(elsewhere.File("victim.sock").c_str(), attacker.path("evil").c_str()), 0);
  const uint64_t errors = server_->protocol_errors();
  ASSERT_TRUE(attacker.Poll());
  EXPECT_FALSE(victim.Received(absl::Seconds(1)))
      << "profd followed the planted link: the config reached a socket outside the folder";
  EXPECT_TRUE(WaitFor([&] { return server_->protocol_errors() > errors; }, absl::Seconds(3)))
      << "the poll from a name that is now a link was not refused";
  EXPECT_FALSE(delivered);
  // The offer stays for the process's own socket.
  FakeKineto honest(options_.socket_dir, "honest");
  ASSERT_TRUE(honest.Poll());
  std::optional<std::string> reply = honest.Receive();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(*reply, "SECRET=1\n");
}

// The same with a socket of another user put at the sender's name (a hard link to it; root can
// make one whatever fs.protected_hardlinks says): the socket is not the sender's uid's.
TEST_F(KinetoIpcServerTest, ASocketOfAnotherUserAtTheSendersNameIsNotAnswered) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: the victim's socket is chowned to another uid";
  const ::profd::testing::Identity other = ::profd::testing::UnusedIdentity();
  Victim victim(options_.socket_dir + "/dynoconfigclient-victim");
  ASSERT_EQ(chown((options_.socket_dir + "/dynoconfigclient-victim").c_str(), other.uid, other.gid),
            0);
  FakeKineto attacker(options_.socket_dir, "evil");
  ASSERT_TRUE(attacker.Poll());
  ASSERT_TRUE(Known());
  bool delivered = false;
  ASSERT_TRUE(
      server_
          ->Make(getpid(), {Fixed("SECRET=1\n"), absl::Now() + absl::Seconds(30),
                            [&](const KinetoClient&, absl::Time) { delivered = true; }, nullptr})
          .ok());
  ASSERT_EQ(unlink(attacker.path("evil").c_str()), 0);
  ASSERT_EQ(link((options_.socket_dir + "/dynoconfigclient-victim").c_str(),
                 attacker.path("evil").c_str()),
            0)
      << strerror(errno);
  const uint64_t errors = server_->protocol_errors();
  ASSERT_TRUE(attacker.Poll());
  EXPECT_FALSE(victim.Received(absl::Seconds(1))) << "profd answered another user's socket";
  EXPECT_TRUE(WaitFor([&] { return server_->protocol_errors() > errors; }, absl::Seconds(3)))
      << "the poll from a name that is now another user's socket was not refused";
  EXPECT_FALSE(delivered);
  unlink(attacker.path("evil").c_str());
}

// Senders in folders made inside the Kineto folder: the folder could be swapped for a link
// between the poll and the reply. Only a name directly in the folder is answered.
TEST_F(KinetoIpcServerTest, SendersInAFolderInsideTheFolderAreNeverAnswered) {
  const std::string sub = options_.socket_dir + "/sub";
  ASSERT_EQ(mkdir(sub.c_str(), 0777), 0);
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un from{};
  from.sun_family = AF_UNIX;
  const std::string path = sub + "/dynoconfigclientx";
  std::memcpy(from.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::memcpy(to.sun_path, server_->socket_path().c_str(), server_->socket_path().size() + 1);
  const std::string poll = EncodeKinetoRequest({3, 0, {7}});
  ASSERT_GT(sendto(fd, poll.data(), poll.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            0);
  ASSERT_TRUE(WaitFor([&] { return server_->protocol_errors() >= 1; }, absl::Seconds(3)))
      << "a poll from a sub-folder was taken";
  EXPECT_FALSE(server_->Find(getpid()).has_value());
  close(fd);
}

// Many processes each sending one bad datagram (or polling from a link): profd's log gets a few
// lines and a count, not one line per process.
TEST_F(KinetoIpcServerTest, RefusalsFromManyProcessesAreLoggedWithinABudget) {
  constexpr int kSenders = 60;
  const std::string bad = EncodeKinetoMessage("req", "x");  // a request too short to be one
  std::vector<sockaddr_un> from(kSenders), to(1);
  for (int i = 0; i < kSenders; ++i) {
    from[i].sun_family = AF_UNIX;
    const std::string path = absl::StrCat(options_.socket_dir, "/flood", i);
    std::memcpy(from[i].sun_path, path.c_str(), path.size() + 1);
  }
  to[0].sun_family = AF_UNIX;
  std::memcpy(to[0].sun_path, server_->socket_path().c_str(), server_->socket_path().size() + 1);

  TempDir dir;
  const int saved = dup(STDERR_FILENO);
  const int file = open(dir.File("log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(file, STDERR_FILENO);
  std::vector<pid_t> children;
  for (int i = 0; i < kSenders; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      // Only async-signal-safe calls: the test process has threads.
      const int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
      bind(fd, reinterpret_cast<const sockaddr*>(&from[i]), sizeof(from[i]));
      sendto(fd, bad.data(), bad.size(), 0, reinterpret_cast<const sockaddr*>(&to[0]),
             sizeof(to[0]));
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) waitpid(child, nullptr, 0);
  const bool all_counted =
      WaitFor([&] { return server_->protocol_errors() >= static_cast<uint64_t>(kSenders); },
              absl::Seconds(5));
  usleep(100000);
  dup2(saved, STDERR_FILENO);
  close(file);
  close(saved);
  ASSERT_TRUE(all_counted) << server_->protocol_errors();
  const std::string log = ::profd::testing::ReadFileOrEmpty(dir.File("log"));
  int lines = 0;
  for (size_t at = log.find("kineto-ipc]"); at != std::string::npos;
       at = log.find("kineto-ipc]", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1) << log;
  EXPECT_LE(lines, 11) << "one line per sending process:\n" << log;
}

}  // namespace
}  // namespace profd::kineto

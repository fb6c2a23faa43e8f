// Agent registration end to end: real profd, real libprofagent.so in a child process, real
// profctl. No GPU needed: the child loads the agent the way the CUDA driver does.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

const rapidjson::Value* FindAgent(const rapidjson::Document& doc, pid_t pid) {
  if (!doc.IsObject() || !doc.HasMember("agents")) return nullptr;
  for (const auto& a : doc["agents"].GetArray()) {
    if (a["pid"].GetUint() == static_cast<unsigned>(pid)) return &a;
  }
  return nullptr;
}

bool Listed(const ProfdProcess& profd, pid_t pid) {
  return FindAgent(profd.ProfctlJson({"agents"}), pid) != nullptr;
}

TEST(RegistrationTest, AgentRegistersReconnectsAndIsReaped) {
  ProfdProcess profd;
  profd.Start();
  auto host = StartAgentHost(
      profd.agent_socket(), {},
      {{"POD_NAME", "llm-7f9c"}, {"POD_NAMESPACE", "serving"}, {"CONTAINER_NAME", "server"}});

  ASSERT_TRUE(WaitFor([&] { return Listed(profd, host->pid()); }, absl::Seconds(2))) << profd.log();
  rapidjson::Document doc = profd.ProfctlJson({"agents"});
  const rapidjson::Value* agent = FindAgent(doc, host->pid());
  ASSERT_NE(agent, nullptr);
  EXPECT_STREQ((*agent)["comm"].GetString(), "agent_host");
  EXPECT_NE(std::string((*agent)["command_line"].GetString()).find("libprofagent.so"),
            std::string::npos);
  EXPECT_STREQ((*agent)["pod_name"].GetString(), "llm-7f9c");
  EXPECT_STREQ((*agent)["pod_namespace"].GetString(), "serving");
  EXPECT_TRUE((*agent)["injected"].GetBool());
  EXPECT_EQ((*agent)["uid"].GetUint(), getuid());

  // The human table names the process too.
  RunResult table = profd.Profctl({"agents"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find(std::to_string(host->pid())), std::string::npos) << table.out;
  // Namespace, pod and container are the words of --json and of /metrics' labels, each in its
  // own column: the POD cell is what `profctl capture --pod` takes (with -n NAMESPACE).
  EXPECT_NE(table.out.find("NAMESPACE"), std::string::npos) << table.out;
  std::vector<std::string> cells;
  for (absl::string_view line : absl::StrSplit(table.out, '\n')) {
    if (absl::StrContains(line, std::to_string(host->pid()))) {
      cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    }
  }
  ASSERT_GE(cells.size(), 4u) << table.out;
  EXPECT_EQ(cells[1], "serving") << table.out;
  EXPECT_EQ(cells[2], "llm-7f9c") << table.out;
  EXPECT_EQ(cells[3], "server") << table.out;
  EXPECT_STREQ((*agent)["container_name"].GetString(), "server");

  // profd dies and comes back: the agent finds it again by itself (back-off tops out at 5 s).
  profd.Kill();
  profd.Start();
  EXPECT_TRUE(WaitFor([&] { return Listed(profd, host->pid()); }, absl::Seconds(8))) << profd.log();

  // The process exits: it leaves the list.
  host->Kill();
  EXPECT_TRUE(WaitFor([&] { return !Listed(profd, host->pid()); }, absl::Seconds(3)));
  EXPECT_NE(profd.log().find("gone"), std::string::npos) << profd.log();
}

TEST(RegistrationTest, ForkedChildStaysSilentAndParentStaysRegistered) {
  ProfdProcess profd;
  profd.Start();
  auto host = StartAgentHost(profd.agent_socket(), {"--fork"});
  ASSERT_TRUE(WaitFor([&] { return Listed(profd, host->pid()); }, absl::Seconds(2)));
  absl::SleepFor(absl::Seconds(3.5));  // the child lives 3 s, then exits
  rapidjson::Document doc = profd.ProfctlJson({"agents"});
  EXPECT_EQ(doc["agents"].GetArray().Size(), 1u);
  EXPECT_NE(FindAgent(doc, host->pid()), nullptr);
  EXPECT_TRUE(host->Running());
}

TEST(RegistrationTest, GarbageOnTheAgentSocketIsRejectedAndOthersServed) {
  ProfdProcess profd;
  profd.Start();
  auto connect_raw = [&] {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, profd.agent_socket().c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  };
  // Not a frame of ours: an HTTP request. Its first four bytes read as a huge length.
  int http = connect_raw();
  const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(write(http, request, sizeof(request) - 1), 0);
  // A well-sized frame that is not a valid message.
  int junk = connect_raw();
  const unsigned char frame[] = {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ASSERT_GT(write(junk, frame, sizeof(frame)), 0);
  // Half a frame, then a half-close.
  int half = connect_raw();
  const unsigned char partial[] = {100, 0, 0, 0, 0x0a, 0x02};
  ASSERT_GT(write(half, partial, sizeof(partial)), 0);
  shutdown(half, SHUT_WR);

  auto host = StartAgentHost(profd.agent_socket());
  EXPECT_TRUE(WaitFor([&] { return Listed(profd, host->pid()); }, absl::Seconds(2)));
  EXPECT_TRUE(WaitFor(
      [&] {
        rapidjson::Document s = profd.ProfctlJson({"status"});
        return s["agent_protocol_errors"].GetString() == std::string("3");
      },
      absl::Seconds(3)))
      << profd.log();
  std::string log = profd.log();
  EXPECT_NE(log.find("exceeds the"), std::string::npos) << log;
  EXPECT_NE(log.find("malformed message"), std::string::npos) << log;
  EXPECT_NE(log.find("closed in the middle of a frame"), std::string::npos) << log;
  close(http);
  close(junk);
  close(half);
}

TEST(RegistrationTest, ProfctlSaysWhenProfdIsNotThere) {
  TempDir dir;
  RunResult r = profd::testing::Run({BuildPath("client/profctl"), "--target",
                                     "unix:" + dir.File("none.sock"), "--timeout", "2s", "agents"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("profd not reachable at unix:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is it running?"), std::string::npos) << r.err;

  RunResult usage = profd::testing::Run({BuildPath("client/profctl"), "no-such-command"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("unknown command 'no-such-command'"), std::string::npos) << usage.err;
  EXPECT_NE(usage.err.find("capture"), std::string::npos) << "the commands are listed";
}

// What a new user types first: the version, the list of commands, and the global options where
// they come to mind, after the command as well as before it.
TEST(RegistrationTest, ProfctlSaysItsVersionCommandsAndTakesOptionsAfterTheCommand) {
  const std::string profctl = BuildPath("client/profctl");
  RunResult version = profd::testing::Run({profctl, "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "profctl " PROFD_VERSION "\n");
  RunResult profd_version = profd::testing::Run({BuildPath("daemon/profd"), "--version"});
  EXPECT_EQ(profd_version.exit_code, 0);
  EXPECT_NE(profd_version.out.find("profd " PROFD_VERSION), std::string::npos) << profd_version.out;
  RunResult help = profd::testing::Run({profctl, "help"});
  EXPECT_EQ(help.exit_code, 0);
  RunResult bare = profd::testing::Run({profctl});
  EXPECT_EQ(bare.exit_code, 2);
  for (const RunResult* r : {&help, &bare}) {
    for (const char* command : {"agents", "capture", "report", "list", "show", "get", "import"}) {
      EXPECT_NE(r->out.find(std::string("  ") + command + " "), std::string::npos) << command;
    }
  }

  ProfdProcess profd;
  profd.Start();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--json", "agents"}, std::vector<std::string>{"agents", "--json"},
        std::vector<std::string>{"status", "--json"},
        std::vector<std::string>{"captures", "--json"},
        std::vector<std::string>{"list", "--json"}}) {
    std::vector<std::string> argv = {profctl};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--target", profd.target()});  // after the command too
    RunResult r = profd::testing::Run(argv);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_EQ(r.out.substr(0, 1), "{") << args[0] << " " << args[1] << ": " << r.out;
  }
  RunResult command_help = profd::testing::Run({profctl, "agents", "--help"});
  EXPECT_NE(command_help.out.find("--json"), std::string::npos) << command_help.out;

  // Durations say what is wrong with them instead of becoming something else.
  const std::string target = profd.target();
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--timeout", "5", "status"}, "--timeout wants a duration with its unit"},
           {{"status", "--timeout", "banana"}, "not 'banana'"},
           // 64-bit milliseconds: profd sees the whole 1193 h and applies its own limit.
           {{"capture", "--pid", "1", "--duration", "4294969296ms"},
            "duration 1193h2m49.296s is over this profd's limit"},
           {{"capture", "--pid", "1", "--duration", "9000h"}, "out of range"},
           {{"capture", "--pid", "1", "--duration", "0.5ms"}, "from 1ms"},
           {{"capture", "--pid", "1", "--duration", "5s", "--delay", "-1s"}, "--delay"}}) {
    std::vector<std::string> argv = {profctl, "--target", target};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = profd::testing::Run(argv);
    EXPECT_EQ(r.exit_code, 2) << args[1] << " " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
}

// A second profd on the same runtime folder refuses to start and says who holds it, instead of
// taking over the first one's sockets.
TEST(RegistrationTest, ASecondProfdOnTheSameRuntimeDirRefusesToStart) {
  ProfdProcess first;
  first.Start();
  const std::string runtime_dir =
      std::filesystem::path(first.agent_socket()).parent_path().string();
  TempDir other;
  RunResult second = profd::testing::Run(
      {BuildPath("daemon/profd"), "--runtime_dir=" + runtime_dir, "--grpc_address=none",
       "--metrics_address=none", "--capture_dir=" + other.File("captures"),
       "--spool_dir=" + other.File("spool"), "--store=file://" + other.File("store")},
      {}, absl::Seconds(20));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find(absl::StrCat("another profd (pid ", first.pid(), ")")),
            std::string::npos)
      << second.err;
  // The first one still has its sockets.
  EXPECT_EQ(first.Profctl({"status"}).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(first.agent_socket()));
}

}  // namespace
}  // namespace profd::testing

// Who may use profd: root, and the members of --access_group, and nobody else, over every
// transport. A real profd, a real agent (the replay agent) and the real profctl run as a second
// user the test makes up (a uid and gid no account on the host has): the kernel then checks
// exactly what it would for a local user without privileges. Runs as root (CI does).
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/profd_process.h"
#include "tests/support/run_as.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct FileMode {
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

FileMode ModeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) ADD_FAILURE() << "cannot stat " << path;
  return {st.st_mode & 07777, st.st_uid, st.st_gid};
}

std::string Octal(mode_t mode) {
  char text[8];
  snprintf(text, sizeof(text), "%04o", mode);
  return text;
}

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "runs profctl as a second uid: needs root (CI is)";
    stranger_ = UnusedIdentity();
    ASSERT_NE(stranger_.uid, 0u) << "no unused uid between 61000 and 65000 on this host";
    // The access group: another id nobody has, so only the test's member is in it.
    group_ = UnusedGroup(stranger_.gid);
    ASSERT_NE(group_, 0u) << "no unused gid above " << stranger_.gid;
    member_ = stranger_;
    member_.groups = {group_};
    // A member could never reach the build folder if others could not read it.
    RunResult can_exec = RunAs(stranger_, {BuildPath("client/profctl"), "--help"});
    ASSERT_EQ(can_exec.exit_code, 0)
        << "profctl cannot run as uid " << stranger_.uid
        << " (the build folder must be readable by others): " << can_exec.err;
  }

  // profctl as `who`, against `target`, with a short deadline.
  RunResult ProfctlAs(const Identity& who, const std::string& target,
                      std::vector<std::string> args) {
    std::vector<std::string> argv = {BuildPath("client/profctl"), "--target", target, "--timeout",
                                     "5s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunAs(who, argv);
  }

  // A capture of the replay agent taken by root: its JSON.
  rapidjson::Document CaptureAsRoot(const ProfdProcess& profd, pid_t pid) {
    return profd.ProfctlJson({"capture", "--pid", std::to_string(pid), "--duration", "300ms"});
  }

  void ExpectDenied(const RunResult& r, const std::string& what) {
    EXPECT_EQ(r.exit_code, 6) << what << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("permission denied")) << what;
    EXPECT_THAT(r.err, HasSubstr("sudo profctl")) << what;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("is it running"))) << what;
  }

  Identity stranger_;  // a local user who is in no group of profd's
  Identity member_;    // the same user, in the access group
  gid_t group_ = 0;
};

// profd as installed, with nothing about access given: no TCP listener, the control socket and
// every trace root's only.
TEST_F(AccessTest, ByDefaultOnlyRootMayListCaptureOrRead) {
  TempDir work;
  chmod(work.path().c_str(), 0755);  // the stranger can get to the socket: only its mode stops them
  // No --grpc_address: the default is what is tested.
  Subprocess profd({BuildPath("daemon/profd"), "--runtime_dir=" + work.path(),
                    "--metrics_address=none", "--capture_dir=" + work.File("captures"),
                    "--spool_dir=" + work.File("spool"), "--store=file://" + work.File("store")},
                   {}, work.File("profd.log"));
  const std::string target = "unix:" + work.File("profd.sock");
  auto root_profctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {BuildPath("client/profctl"), "--target", target};
    argv.insert(argv.end(), args.begin(), args.end());
    return profd::testing::Run(argv);
  };
  ASSERT_TRUE(WaitFor([&] { return root_profctl({"status"}).exit_code == 0 || !profd.Running(); },
                      absl::Seconds(15)));
  ASSERT_TRUE(profd.Running()) << ReadFileOrEmpty(work.File("profd.log.err"));

  // Nothing on TCP: the unix socket is the only way in.
  RunResult status = root_profctl({"--json", "status"});
  rapidjson::Document doc;
  doc.Parse(status.out.c_str());
  ASSERT_TRUE(doc.IsObject()) << status.out << status.err;
  EXPECT_EQ(doc["grpc_addresses"].Size(), 1u) << status.out;
  ASSERT_GE(doc["grpc_addresses"].Size(), 1u) << status.out;
  EXPECT_EQ(std::string(doc["grpc_addresses"][0].GetString()), target);
  RunResult tcp = ProfctlAs(stranger_, "127.0.0.1:7465", {"agents"});
  EXPECT_NE(tcp.exit_code, 0) << "a local user listed agents over TCP: " << tcp.out;

  // The socket is root's alone.
  FileMode socket = ModeOf(work.File("profd.sock"));
  EXPECT_EQ(Octal(socket.mode), "0600");
  EXPECT_EQ(socket.uid, 0u);

  auto agent = StartReplayAgent(work.File("agent.sock"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return root_profctl({"agents"}).out.find(std::to_string(agent->pid())) != std::string::npos;
      },
      absl::Seconds(5)));
  const std::string pid = std::to_string(agent->pid());

  ExpectDenied(ProfctlAs(stranger_, target, {"agents"}), "agents");
  ExpectDenied(ProfctlAs(stranger_, target, {"capture", "--pid", pid, "--duration", "300ms"}),
               "capture");
  RunResult denied = ProfctlAs(stranger_, target, {"list"});
  ExpectDenied(denied, "list");
  EXPECT_THAT(denied.err, HasSubstr("open to root only")) << denied.err;
  EXPECT_THAT(denied.err, HasSubstr("--access_group")) << denied.err;

  // Root captures; the stranger can read none of it.
  RunResult capture = root_profctl({"--json", "capture", "--pid", pid, "--duration", "300ms"});
  rapidjson::Document c;
  c.Parse(capture.out.c_str());
  ASSERT_TRUE(c.IsObject() && c.HasMember("files") && c["files"].Size() == 1)
      << capture.out << capture.err;
  const std::string id = c["capture_id"].GetString();
  const std::string folder = c["location"].GetString();
  const std::string trace = c["files"][0]["path"].GetString();
  TempDir theirs;  // where the stranger may write: only profd stands in the way
  chown(theirs.path().c_str(), stranger_.uid, stranger_.gid);
  ExpectDenied(ProfctlAs(stranger_, target, {"get", id, "-o", theirs.File("got")}), "get");
  ExpectDenied(ProfctlAs(stranger_, target, {"show", id}), "show");
  for (const std::string& file : {trace, folder + "/manifest.json", folder + "/summary.json"}) {
    EXPECT_EQ(OpenErrnoAs(stranger_, file), EACCES) << file << " is readable by a local user";
    EXPECT_EQ(Octal(ModeOf(file).mode), "0640") << file;
  }
  EXPECT_EQ(Octal(ModeOf(folder).mode), "2750") << folder;
  RunResult report = RunAs(stranger_, {BuildPath("client/profctl"), "report", trace});
  EXPECT_EQ(report.exit_code, 6) << report.out << report.err;
  EXPECT_THAT(report.err, HasSubstr("permission denied: cannot read " + trace)) << report.err;
  EXPECT_THAT(report.err, HasSubstr("sudo profctl")) << report.err;
  for (const char* root : {"captures", "spool", "store"}) {
    FileMode m = ModeOf(work.File(root));
    EXPECT_EQ(Octal(m.mode), "2750") << root;
    EXPECT_EQ(m.uid, 0u) << root;
  }
  // Root itself is not hindered.
  EXPECT_EQ(root_profctl({"get", id, "-o", work.File("got")}).exit_code, 0);
}

// With --access_group, its members may do all root may, through the socket and on disk; the
// same user outside the group may not.
TEST_F(AccessTest, AccessGroupMembersMayUseProfdAndReadTraces) {
  ProfdProcess profd({"--access_group=" + std::to_string(group_)});
  chmod(profd.runtime_dir().c_str(), 0755);
  profd.Start();
  const std::string target = profd.target();
  EXPECT_THAT(profd.log(), HasSubstr(absl::StrCat("root and group ", group_)));

  FileMode socket = ModeOf(profd.runtime_dir() + "/profd.sock");
  EXPECT_EQ(Octal(socket.mode), "0660");
  EXPECT_EQ(socket.uid, 0u);
  EXPECT_EQ(socket.gid, group_);

  auto agent = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(profd, agent->pid()); }, absl::Seconds(5)));
  const std::string pid = std::to_string(agent->pid());

  // The member lists, captures and reads the trace straight from the capture folder.
  RunResult agents = ProfctlAs(member_, target, {"agents"});
  EXPECT_EQ(agents.exit_code, 0) << agents.err;
  EXPECT_THAT(agents.out, HasSubstr(pid));
  RunResult capture =
      ProfctlAs(member_, target, {"--json", "capture", "--pid", pid, "--duration", "300ms"});
  ASSERT_EQ(capture.exit_code, 0) << capture.out << capture.err << profd.log();
  rapidjson::Document c;
  c.Parse(capture.out.c_str());
  ASSERT_TRUE(c.IsObject() && c["files"].Size() == 1) << capture.out;
  const std::string id = c["capture_id"].GetString();
  const std::string folder = c["location"].GetString();
  const std::string trace = c["files"][0]["path"].GetString();
  EXPECT_EQ(OpenErrnoAs(member_, trace), 0);
  RunResult report = RunAs(member_, {BuildPath("client/profctl"), "report", trace});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("profd_test_kernel"));
  for (const std::string& file : {trace, folder + "/manifest.json"}) {
    FileMode m = ModeOf(file);
    EXPECT_EQ(Octal(m.mode), "0640") << file;
    EXPECT_EQ(m.gid, group_) << file;
  }
  FileMode capture_folder = ModeOf(folder);
  EXPECT_EQ(Octal(capture_folder.mode), "2750");
  EXPECT_EQ(capture_folder.gid, group_);

  // From the store, through profd: show and get (checksums verified) into the member's folder.
  ASSERT_TRUE(WaitFor(
      [&] { return ProfctlAs(member_, target, {"list"}).out.find(id) != std::string::npos; },
      absl::Seconds(10)));
  TempDir out;
  chmod(out.path().c_str(), 0755);
  fs::create_directories(out.File("mine"));
  chown(out.File("mine").c_str(), member_.uid, member_.gid);
  RunResult get = ProfctlAs(member_, target, {"get", id, "-o", out.File("mine/got")});
  EXPECT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_TRUE(fs::exists(out.File("mine/got/manifest.json")));
  for (const char* root : {"captures", "spool", "store"}) {
    FileMode m = ModeOf(profd.runtime_dir() + "/" + root);
    EXPECT_EQ(Octal(m.mode), "2750") << root;
    EXPECT_EQ(m.gid, group_) << root;
  }

  // The same user without the group: nothing, and the message names the group to join.
  RunResult denied = ProfctlAs(stranger_, target, {"agents"});
  ExpectDenied(denied, "agents");
  EXPECT_THAT(denied.err, HasSubstr(absl::StrCat("not in that group")));
  ExpectDenied(ProfctlAs(stranger_, target, {"capture", "--pid", pid, "--duration", "300ms"}),
               "capture");
  ExpectDenied(ProfctlAs(stranger_, target, {"get", id, "-o", out.File("mine/x")}), "get");
  EXPECT_EQ(OpenErrnoAs(stranger_, trace), EACCES);
  EXPECT_EQ(OpenErrnoAs(stranger_, folder + "/manifest.json"), EACCES);
}

TEST_F(AccessTest, AccessGroupByName) {
  struct group* nogroup = getgrnam("nogroup");
  if (nogroup == nullptr) GTEST_SKIP() << "no group named nogroup on this host";
  const gid_t gid = nogroup->gr_gid;
  ProfdProcess profd({"--access_group=nogroup"});
  chmod(profd.runtime_dir().c_str(), 0755);
  profd.Start();
  EXPECT_EQ(ModeOf(profd.runtime_dir() + "/profd.sock").gid, gid);
  Identity member = stranger_;
  member.groups = {gid};
  RunResult ok = ProfctlAs(member, profd.target(), {"status"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  ExpectDenied(ProfctlAs(stranger_, profd.target(), {"status"}), "status");
}

// The umask that keeps traces private must not lock agents out: processes of any user still
// reach the agent socket, in a runtime folder profd creates itself.
TEST_F(AccessTest, AgentsOfEveryUserStillConnect) {
  TempDir work;
  chmod(work.path().c_str(), 0755);
  const std::string run = work.File("run");  // missing: profd creates it
  ProfdProcess profd({"--agent_socket=" + run + "/agent.sock"});
  profd.Start();
  EXPECT_EQ(Octal(ModeOf(run).mode), "0755");
  EXPECT_EQ(Octal(ModeOf(run + "/agent.sock").mode), "0666");
  AsUser agent(stranger_,
               {BuildPath("tests/integration/agent_host"), BuildPath("agent/libprofagent.so")},
               {{"PROFD_AGENT_SOCKET", run + "/agent.sock"}});
  EXPECT_TRUE(WaitFor([&] { return Registered(profd, agent.pid()); }, absl::Seconds(5)))
      << profd.Profctl({"agents"}).out << profd.log();
  rapidjson::Document agents = profd.ProfctlJson({"agents"});
  ASSERT_EQ(agents["agents"].Size(), 1u);
  EXPECT_EQ(agents["agents"][0]["uid"].GetUint(), stranger_.uid);
}

// profd does not start when it cannot keep traces to root and the group.
TEST_F(AccessTest, UnknownGroupOrSharedFoldersStopProfd) {
  TempDir work;
  auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {BuildPath("daemon/profd"),
                                     "--runtime_dir=" + work.path(),
                                     "--metrics_address=none",
                                     "--capture_dir=" + work.File("captures"),
                                     "--spool_dir=" + work.File("spool"),
                                     "--store=file://" + work.File("store")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return profd::testing::Run(argv, {}, absl::Seconds(20));
  };
  RunResult unknown = run({"--access_group=profd-no-such-group"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("--access_group=profd-no-such-group: no such group"));

  fs::create_directories(work.File("shared"));
  chmod(work.File("shared").c_str(), 01777);
  RunResult shared = run({"--capture_dir=" + work.File("shared")});
  EXPECT_EQ(shared.exit_code, 1);
  EXPECT_THAT(shared.err, HasSubstr("is a shared folder (mode 1777)"));
  EXPECT_EQ(Octal(ModeOf(work.File("shared")).mode), "1777") << "profd changed a shared folder";

  fs::create_directories(work.File("theirs"));
  chown(work.File("theirs").c_str(), stranger_.uid, stranger_.gid);
  RunResult theirs = run({"--capture_dir=" + work.File("theirs")});
  EXPECT_EQ(theirs.exit_code, 1);
  EXPECT_THAT(theirs.err, HasSubstr(absl::StrCat("belongs to uid ", stranger_.uid)));
}

// What an older profd left readable (0755 folders) is closed at start.
TEST_F(AccessTest, FoldersLeftOpenByAnOlderProfdAreClosed) {
  ProfdProcess profd({"--access_group=" + std::to_string(group_)});
  const std::string captures = profd.runtime_dir() + "/captures";
  fs::create_directories(captures + "/20260101T000000Z-old-00000000");
  chmod(captures.c_str(), 0755);
  chmod((captures + "/20260101T000000Z-old-00000000").c_str(), 0755);
  profd.Start();
  for (const std::string& folder : {captures, captures + "/20260101T000000Z-old-00000000"}) {
    FileMode m = ModeOf(folder);
    EXPECT_EQ(Octal(m.mode), "2750") << folder;
    EXPECT_EQ(m.gid, group_) << folder;
  }
}

}  // namespace
}  // namespace profd::testing

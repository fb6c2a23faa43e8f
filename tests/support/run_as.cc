#include "tests/support/run_as.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"

extern char** environ;

namespace profd::testing {
namespace {

// Forks a child that becomes `who` and runs `body` (async-signal-safe calls only: the test may
// have threads); returns its wait status, or -1 on timeout (the child is killed).
template <typename Body>
pid_t StartAs(const Identity& who, Body body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(who.groups.size(), who.groups.data()) != 0 || setgid(who.gid) != 0 ||
        setuid(who.uid) != 0) {
      _exit(126);
    }
    body();
    _exit(127);
  }
  return pid;
}

template <typename Body>
int ForkAs(const Identity& who, absl::Duration timeout, Body body) {
  const pid_t pid = StartAs(who, body);
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return status;
}

}  // namespace

Identity UnusedIdentity() {
  Identity who;
  for (uid_t uid = 61000; uid < 65000; ++uid) {
    if (getpwuid(uid) == nullptr && getgrgid(uid) == nullptr) {
      who.uid = uid;
      who.gid = uid;
      break;
    }
  }
  return who;
}

gid_t UnusedGroup(gid_t after) {
  for (gid_t gid = after + 1; gid < 65000; ++gid) {
    if (getgrgid(gid) == nullptr) return gid;
  }
  return 0;
}

AsUser::AsUser(const Identity& who, std::vector<std::string> argv,
               std::map<std::string, std::string> env) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv_p, env_p;
  for (std::string& s : argv) argv_p.push_back(s.data());
  argv_p.push_back(nullptr);
  for (std::string& s : env_strings) env_p.push_back(s.data());
  env_p.push_back(nullptr);
  pid_ = StartAs(who, [&] { execve(argv_p[0], argv_p.data(), env_p.data()); });
}

AsUser::~AsUser() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

RunResult RunAs(const Identity& who, std::vector<std::string> argv,
                std::map<std::string, std::string> env, absl::Duration timeout) {
  TempDir dir;
  // The child, no longer root, writes its output here.
  chown(dir.path().c_str(), who.uid, who.gid);
  const std::string out = dir.File("out"), err = dir.File("err");
  std::vector<std::string> env_strings;
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv_p, env_p;
  for (std::string& s : argv) argv_p.push_back(s.data());
  argv_p.push_back(nullptr);
  for (std::string& s : env_strings) env_p.push_back(s.data());
  env_p.push_back(nullptr);

  int status = ForkAs(who, timeout, [&] {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(125);
    dup2(o, 1);
    dup2(e, 2);
    execve(argv_p[0], argv_p.data(), env_p.data());
    const char* why = strerror(errno);
    (void)!write(2, "cannot exec ", 12);
    (void)!write(2, argv_p[0], strlen(argv_p[0]));
    (void)!write(2, ": ", 2);
    (void)!write(2, why, strlen(why));
    _exit(127);
  });
  RunResult result;
  result.out = ReadFileOrEmpty(out);
  result.err = ReadFileOrEmpty(err);
  if (status == -1) {
    result.err += "\n[test: timed out]";
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 126)
      result.err +=
          "\n[test: cannot become uid " + std::to_string(who.uid) + " (is the test root?)]";
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

int OpenErrnoAs(const Identity& who, const std::string& path) {
  const std::string p = path;
  int status = ForkAs(who, absl::Seconds(10), [&] {
    int fd = open(p.c_str(), O_RDONLY);
    _exit(fd >= 0 ? 0 : (errno & 0x7f));
  });
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace profd::testing

#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "absl/time/clock.h"

extern char** environ;

namespace profd::testing {
namespace {

std::vector<std::string> MergedEnv(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

pid_t Spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& extra_env,
            const std::string& out_file, const std::string& err_file) {
  std::vector<std::string> env = MergedEnv(extra_env);
  std::vector<char*> argv_p = Pointers(argv);
  std::vector<char*> env_p = Pointers(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!out_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  if (!err_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv_p[0], &actions, nullptr, argv_p.data(), env_p.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot spawn " + argv[0]);
  return pid;
}

}  // namespace

std::string BuildPath(const std::string& relative) {
  const char* dir = std::getenv("PROFD_BUILD_DIR");
  return std::string(dir ? dir : PROFD_TEST_BUILD_DIR) + "/" + relative;
}

std::string SourcePath(const std::string& relative) {
  const char* dir = std::getenv("PROFD_SOURCE_DIR");
  return std::string(dir ? dir : PROFD_TEST_SOURCE_DIR) + "/" + relative;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/profdtest.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Subprocess::Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env,
                       std::string output_file) {
  pid_ = Spawn(std::move(argv), env, output_file, output_file.empty() ? "" : output_file + ".err");
}

Subprocess::~Subprocess() {
  if (Running()) Kill();
}

bool Subprocess::Running() {
  if (exited_ || pid_ <= 0) return false;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    status_ = status;
    return false;
  }
  return true;
}

void Subprocess::Signal(int sig) {
  if (Running()) kill(pid_, sig);
}

int Subprocess::Wait(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() > deadline) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult Run(std::vector<std::string> argv, std::map<std::string, std::string> env,
              absl::Duration timeout) {
  TempDir dir;
  std::string out = dir.File("out"), err = dir.File("err");
  pid_t pid = Spawn(std::move(argv), env, out, err);
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  RunResult result;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.exit_code = -1;
      result.out = ReadFileOrEmpty(out);
      result.err = ReadFileOrEmpty(err) + "\n[test: timed out]";
      return result;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFileOrEmpty(out);
  result.err = ReadFileOrEmpty(err);
  return result;
}

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const absl::Time checked = absl::Now();
    if (cond()) return true;
    absl::SleepFor(std::max(absl::Milliseconds(20), absl::Now() - checked));
  }
  return cond();
}

double ProcessMemoryMiB(pid_t pid, const char* field) {
  std::istringstream status(ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/status"));
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    return std::strtod(line.c_str() + prefix.size(), nullptr) / 1024;  // "  12345 kB"
  }
  return 0;
}

double ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/stat");
  // Fields after the command (in parentheses, which may hold spaces): state is field 3, utime
  // and stime fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string EnterPrivateMountNamespace() {
  if (unshare(CLONE_NEWNS) != 0) {
    return std::string("no mount namespace of its own: ") + std::strerror(errno);
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("cannot make mounts private: ") + std::strerror(errno);
  }
  return "";
}

}  // namespace profd::testing

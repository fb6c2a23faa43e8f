// Test support: run real binaries (profd, profctl, a process hosting the agent) as child
// processes, with a private environment, and wait for conditions with a deadline.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace profd::testing {

// Path of a built binary or library (the build folder, or $PROFD_BUILD_DIR).
std::string BuildPath(const std::string& relative);
std::string SourcePath(const std::string& relative);

// A fresh folder under /tmp, removed by the destructor. Paths stay short for unix sockets.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class Subprocess {
 public:
  // argv[0] is the program path. env entries are added to (and override) the test's own.
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
             std::string output_file = "");
  ~Subprocess();  // SIGKILLs a child still running

  pid_t pid() const { return pid_; }
  bool Running();
  void Signal(int sig);
  // Waits for exit; returns the exit code, 128+signal when killed, -1 on timeout.
  int Wait(absl::Duration timeout = absl::Seconds(10));
  void Kill() {
    Signal(9);
    Wait();
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool exited_ = false;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs to completion, capturing stdout and stderr.
RunResult Run(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
              absl::Duration timeout = absl::Seconds(60));

// Polls cond until it holds or the timeout passes: every 20 ms, or, when a check takes longer (one
// that runs profctl), after as long again as it took, so that waiting costs at most half a core
// of the machine the tests share.
bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout);

std::string ReadFileOrEmpty(const std::string& path);

// A process's VmRSS or VmHWM (field) from /proc/<pid>/status, in MiB; 0 once it is gone.
double ProcessMemoryMiB(pid_t pid, const char* field);
// Its CPU time so far (utime + stime from /proc/<pid>/stat), in seconds; 0 once it is gone.
double ProcessCpuSeconds(pid_t pid);

// Moves this process into a mount namespace of its own whose mounts do not propagate back, so a
// test may mount as a kubelet does. Call it before any thread starts (unshare refuses a
// multi-threaded process). "" when done, else why not (a reason for GTEST_SKIP).
std::string EnterPrivateMountNamespace();

}  // namespace profd::testing

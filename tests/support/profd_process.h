// Test support: a real profd in a child process, in a private runtime folder, and the real
// profctl pointed at it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rapidjson/document.h"
#include "tests/support/subprocess.h"

namespace profd::testing {

class ProfdProcess {
 public:
  // extra_flags are appended to profd's command line.
  explicit ProfdProcess(std::vector<std::string> extra_flags = {});
  ~ProfdProcess();

  // Runs profd through a launcher, e.g. {"/usr/bin/prlimit", "--nofile=256:256", "--"}: the
  // launcher must exec profd, so that pid() stays profd's. Set before Start().
  void set_launcher(std::vector<std::string> launcher) { launcher_ = std::move(launcher); }
  // More flags, for those that name runtime_dir() (set before Start()).
  void AddFlags(const std::vector<std::string>& flags) {
    extra_flags_.insert(extra_flags_.end(), flags.begin(), flags.end());
  }
  // Starts profd and waits until `profctl status` answers. Can be called again after Stop().
  void Start();
  void Stop();  // SIGTERM, then wait
  void Kill();  // SIGKILL

  const std::string& runtime_dir() const { return dir_.path(); }
  std::string agent_socket() const { return dir_.File("agent.sock"); }
  std::string target() const { return "unix:" + dir_.File("profd.sock"); }
  std::string log() const { return ReadFileOrEmpty(dir_.File("profd.log.err")); }
  pid_t pid() const { return process_ ? process_->pid() : -1; }

  // Runs profctl --target <this profd> args...
  RunResult Profctl(std::vector<std::string> args) const;
  // Runs profctl --json ... and parses stdout; fails the test if it is not JSON.
  rapidjson::Document ProfctlJson(std::vector<std::string> args) const;

 private:
  TempDir dir_;
  std::vector<std::string> extra_flags_;
  std::vector<std::string> launcher_;
  std::unique_ptr<Subprocess> process_;
};

// The real agent (tests/integration/replay_agent: libprofagent.so with the batches recorded on an
// H200 in place of CUPTI) connected to agent_socket; `extra` is one more replay_agent flag.
std::unique_ptr<Subprocess> StartReplayAgent(const std::string& agent_socket,
                                             const std::string& extra = "");

// Whether `profctl agents` lists pid.
bool Registered(const ProfdProcess& profd, pid_t pid);

// A child process that loads libprofagent.so the way the CUDA driver does (dlopen, then
// InitializeInjection) and idles until killed. No GPU needed.
std::unique_ptr<Subprocess> StartAgentHost(const std::string& agent_socket,
                                           std::vector<std::string> extra_args = {},
                                           std::map<std::string, std::string> env = {});

}  // namespace profd::testing

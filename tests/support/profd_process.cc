#include "tests/support/profd_process.h"

#include <signal.h>

#include <algorithm>
#include <stdexcept>

namespace profd::testing {

ProfdProcess::ProfdProcess(std::vector<std::string> extra_flags)
    : extra_flags_(std::move(extra_flags)) {}

ProfdProcess::~ProfdProcess() { Kill(); }

void ProfdProcess::Start() {
  // Everything profd writes stays in the test's folder, never in /var/lib/profd (extra_flags
  // override: the last value of a flag wins).
  std::vector<std::string> argv = {
      BuildPath("daemon/profd"), "--runtime_dir=" + dir_.path(), "--grpc_address=none",
      // a free port: tests run side by side
      "--metrics_address=127.0.0.1:0", "--capture_dir=" + dir_.File("captures"),
      "--spool_dir=" + dir_.File("spool"), "--store=file://" + dir_.File("store")};
  argv.insert(argv.end(), extra_flags_.begin(), extra_flags_.end());
  argv.insert(argv.begin(), launcher_.begin(), launcher_.end());
  process_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                          dir_.File("profd.log"));
  bool up = WaitFor([&] { return Profctl({"status"}).exit_code == 0 || !process_->Running(); },
                    absl::Seconds(15));
  if (!up || !process_->Running()) {
    throw std::runtime_error("profd did not start:\n" + log());
  }
}

void ProfdProcess::Stop() {
  if (!process_) return;
  process_->Signal(SIGTERM);
  process_->Wait(absl::Seconds(10));
  process_.reset();
}

void ProfdProcess::Kill() {
  if (!process_) return;
  process_->Kill();
  process_.reset();
}

RunResult ProfdProcess::Profctl(std::vector<std::string> args) const {
  // Tests check what profd answers, not how fast: a loaded CI machine gets a minute, not the 10 s
  // default, unless the test gives its own --timeout.
  std::vector<std::string> argv = {BuildPath("client/profctl"), "--target", target()};
  if (std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return a.rfind("--timeout", 0) == 0; })) {
    argv.insert(argv.end(), {"--timeout", "60s"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

rapidjson::Document ProfdProcess::ProfctlJson(std::vector<std::string> args) const {
  args.insert(args.begin(), "--json");
  RunResult r = Profctl(args);
  rapidjson::Document doc;
  doc.Parse(r.out.c_str());
  if (doc.HasParseError()) {
    // With what profd said, and whether it is still there: a failure in CI is read from this alone.
    throw std::runtime_error("profctl output is not JSON (exit " + std::to_string(r.exit_code) +
                             "):\n" + r.out + r.err + "profd is " +
                             (process_ && process_->Running() ? "running" : "not running") +
                             "; its log:\n" + log());
  }
  return doc;
}

std::unique_ptr<Subprocess> StartAgentHost(const std::string& agent_socket,
                                           std::vector<std::string> extra_args,
                                           std::map<std::string, std::string> env) {
  std::vector<std::string> argv = {BuildPath("tests/integration/agent_host"),
                                   BuildPath("agent/libprofagent.so")};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  env["PROFD_AGENT_SOCKET"] = agent_socket;
  return std::make_unique<Subprocess>(argv, env);
}

std::unique_ptr<Subprocess> StartReplayAgent(const std::string& agent_socket,
                                             const std::string& extra) {
  std::vector<std::string> argv = {BuildPath("tests/integration/replay_agent"),
                                   SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")};
  if (!extra.empty()) argv.push_back(extra);
  return std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", agent_socket}});
}

bool Registered(const ProfdProcess& profd, pid_t pid) {
  rapidjson::Document d = profd.ProfctlJson({"agents"});
  if (!d.HasMember("agents") || !d["agents"].IsArray()) return false;
  for (const auto& a : d["agents"].GetArray()) {
    if (a["pid"].GetInt() == pid) return true;
  }
  return false;
}

}  // namespace profd::testing

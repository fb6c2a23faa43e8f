#include "daemon/capture/capture_targets.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/agents/process_identity.h"

namespace profd {
namespace {

std::string Describe(const std::vector<CaptureTarget>& all) {
  if (all.empty()) return "no process has an agent connected or polls profd's Kineto socket";
  std::vector<std::string> parts;
  for (const CaptureTarget& t : all) {
    parts.push_back(absl::StrCat(t.info.pid(), " (", t.info.comm(), ")"));
  }
  return "processes profd can capture: " + absl::StrJoin(parts, ", ");
}

const char* PathName(v1::CapturePath path) {
  return path == v1::CAPTURE_PATH_KINETO ? "Kineto" : "the agent (CUPTI)";
}

}  // namespace

v1::KinetoInfo KinetoInfoOf(const kineto::KinetoClient& client) {
  v1::KinetoInfo out;
  out.set_polling(true);
  out.set_poll_period_ms(absl::ToInt64Milliseconds(client.poll_period));
  out.set_busy(client.busy);
  out.set_pid_in_namespace(client.ns_pid);
  out.set_last_poll_unix_ns(absl::ToUnixNanos(client.last_poll));
  return out;
}

CaptureTargets::CaptureTargets(const AgentRegistry* registry, const kineto::KinetoIpcServer* kineto,
                               std::string hostname, std::string agent_socket)
    : registry_(registry),
      kineto_(kineto),
      hostname_(std::move(hostname)),
      agent_socket_(std::move(agent_socket)) {}

std::vector<CaptureTarget> CaptureTargets::List() const {
  std::vector<CaptureTarget> out;
  std::map<uint32_t, size_t> by_pid;
  for (auto& [connection, info] : registry_->ListWithConnections()) {
    CaptureTarget t;
    t.connection = connection;
    t.info = std::move(info);
    t.info.set_has_agent(true);
    by_pid[t.info.pid()] = out.size();
    out.push_back(std::move(t));
  }
  if (kineto_ == nullptr) return out;
  for (const kineto::KinetoClient& client : kineto_->Clients()) {
    auto it = by_pid.find(client.pid);
    if (it != by_pid.end()) {
      *out[it->second].info.mutable_kineto() = KinetoInfoOf(client);
      continue;
    }
    // Known only from Kineto's polls: who it is comes from /proc, as for agents.
    absl::StatusOr<ProcessIdentity> identity = ReadProcessIdentity(
        static_cast<pid_t>(client.pid), [&client] { return !client.process->Exited(); });
    if (!identity.ok()) continue;
    CaptureTarget t;
    t.info.set_pid(client.pid);
    t.info.set_uid(client.uid);
    t.info.set_exe(identity->exe);
    t.info.set_command_line(identity->command_line);
    t.info.set_comm(identity->comm);
    t.info.set_container_id(identity->container_id);
    t.info.set_pod_uid(identity->pod_uid);
    // No hello, so no claim: the pod is the verified one, or none.
    ResolvePod(registry_->pod_directory(), &t.info);
    t.info.set_connected_since_unix_ns(absl::ToUnixNanos(client.first_poll));
    *t.info.mutable_kineto() = KinetoInfoOf(client);
    t.path = v1::CAPTURE_PATH_KINETO;
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<v1::AgentInfo> CaptureTargets::ListInfo() const {
  std::vector<v1::AgentInfo> out;
  for (CaptureTarget& t : List()) out.push_back(std::move(t.info));
  return out;
}

// Picks the path for one process: Kineto (CPU operators and kernels) when it polls and the
// request allows, else the agent.
absl::Status CaptureTargets::Choose(const v1::CaptureRequest& request,
                                    CaptureTarget* target) const {
  const bool has_kineto = target->info.kineto().polling();
  const bool has_agent = target->connection != 0;
  const uint32_t pid = target->info.pid();
  switch (request.path()) {
    case v1::CAPTURE_PATH_KINETO:
      if (!has_kineto) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", pid, " does not poll profd's Kineto socket",
            kineto_ ? absl::StrCat(" (", kineto_->socket_path(), ")")
                    : " (it is off: profd "
                      "--kineto_socket_dir)",
            ": start its PyTorch with KINETO_USE_DAEMON=1 KINETO_IPC_SOCKET_DIR=<that folder>, "
            "or capture it with --via cupti"));
      }
      target->path = v1::CAPTURE_PATH_KINETO;
      break;
    case v1::CAPTURE_PATH_CUPTI:
      if (!has_agent) {
        return absl::FailedPreconditionError(absl::StrCat(
            "pid ", pid,
            " has no profd agent (it is known from Kineto's polls only): start it with "
            "CUDA_INJECTION64_PATH=<path>/libprofagent.so, or capture it with --via kineto"));
      }
      target->path = v1::CAPTURE_PATH_CUPTI;
      break;
    default:
      target->path = has_kineto ? v1::CAPTURE_PATH_KINETO : v1::CAPTURE_PATH_CUPTI;
  }
  // Kineto's own handover from a synchronous torch.profiler session to an on-demand trace has
  // crashed a process on the GPU host (docs/KINETO.md): never start one while the agent sees a
  // session tracing.
  if (target->path == v1::CAPTURE_PATH_KINETO && target->info.cupti_sharing().other_tracing()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, ": ", target->info.cupti_sharing().other_tracer(),
        " is tracing in this process right now, and profd does not start Kineto's on-demand "
        "trace over a torch.profiler session: capture again when it ends"));
  }
  if (target->path == v1::CAPTURE_PATH_KINETO && target->info.kineto().busy()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid,
        ": Kineto is collecting a trace in this process right now (a torch.profiler session), "
        "and profd does not take another profiler's session: capture again when it ends"));
  }
  if (target->path == v1::CAPTURE_PATH_CUPTI &&
      (request.record_shapes() || request.with_stack() || request.profile_memory())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pid ", pid, " is captured through ", PathName(target->path),
        ", which records no CPU operators: --record-shapes, --with-stack and --profile-memory "
        "need a process that polls profd's Kineto socket (KINETO_USE_DAEMON=1)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CaptureTarget>> CaptureTargets::Resolve(
    const v1::CaptureRequest& request,
    const std::function<std::string(uint32_t pid)>& running_capture_of) const {
  // One look at who is there: asking again per pid could find another process that got the pid
  // meanwhile.
  const std::vector<CaptureTarget> all = List();
  std::vector<CaptureTarget> chosen;
  auto add = [&](const CaptureTarget& candidate) -> absl::Status {
    for (const CaptureTarget& t : chosen) {
      if (t.info.pid() == candidate.info.pid()) return absl::OkStatus();
    }
    if (std::string busy = running_capture_of(candidate.info.pid()); !busy.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("pid ", candidate.info.pid(), " is ", busy));
    }
    CaptureTarget t = candidate;
    if (absl::Status s = Choose(request, &t); !s.ok()) return s;
    chosen.push_back(std::move(t));
    return absl::OkStatus();
  };
  if (request.all()) {
    if (all.empty()) {
      return absl::FailedPreconditionError(
          "no agents are connected to this profd: start the process with "
          "CUDA_INJECTION64_PATH=<path>/libprofagent.so (or, for PyTorch, KINETO_USE_DAEMON=1 "
          "KINETO_IPC_SOCKET_DIR=<profd's Kineto folder>)");
    }
    for (const CaptureTarget& t : all) {
      if (absl::Status s = add(t); !s.ok()) return s;
    }
  }
  for (uint32_t pid : request.pids()) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const CaptureTarget& t) { return t.info.pid() == pid; });
    if (it == all.end()) {
      if (access(absl::StrCat("/proc/", pid).c_str(), F_OK) == 0) {
        return absl::NotFoundError(absl::StrCat(
            "process ", pid,
            " is running but has no profd agent: start it with "
            "CUDA_INJECTION64_PATH=<path>/libprofagent.so (and PROFD_AGENT_SOCKET=",
            agent_socket_, " if profd is not at the default)",
            kineto_
                ? absl::StrCat(", or its PyTorch with KINETO_USE_DAEMON=1 "
                               "KINETO_IPC_SOCKET_DIR=",
                               kineto_->socket_path().substr(0, kineto_->socket_path().rfind('/')))
                : "",
            "; ", Describe(all)));
      }
      return absl::NotFoundError(
          absl::StrCat("no process ", pid, " on ", hostname_, "; ", Describe(all)));
    }
    if (absl::Status s = add(*it); !s.ok()) return s;
  }
  if (!request.pod_name().empty()) {
    size_t before = chosen.size();
    for (const CaptureTarget& t : all) {
      if (t.info.pod_name() == request.pod_name() &&
          (request.pod_namespace().empty() || t.info.pod_namespace() == request.pod_namespace())) {
        if (absl::Status s = add(t); !s.ok()) return s;
      }
    }
    if (chosen.size() == before) {
      return absl::NotFoundError(absl::StrCat(
          "no agent in pod ", request.pod_namespace().empty() ? "" : request.pod_namespace() + "/",
          request.pod_name(), " on ", hostname_,
          " (agents read POD_NAME/POD_NAMESPACE from the downward API); ", Describe(all)));
    }
  }
  if (request.pods_size() > 0) {
    // A workload's pods on this node (a fleet capture): those with agents are captured, and the
    // capture's processes say which were found; none at all is an error, as for --pod.
    const size_t before = chosen.size();
    for (const std::string& pod : request.pods()) {
      const size_t slash = pod.find('/');
      const std::string ns = slash == std::string::npos ? "" : pod.substr(0, slash);
      const std::string name = slash == std::string::npos ? pod : pod.substr(slash + 1);
      for (const CaptureTarget& t : all) {
        if (t.info.pod_name() == name && (ns.empty() || t.info.pod_namespace() == ns)) {
          if (absl::Status s = add(t); !s.ok()) return s;
        }
      }
    }
    if (chosen.size() == before) {
      return absl::NotFoundError(absl::StrCat(
          "no agent in any of the pods ", absl::StrJoin(request.pods(), ", "), " on ", hostname_,
          " (agents read POD_NAME/POD_NAMESPACE from the downward API); ", Describe(all)));
    }
  }
  if (chosen.empty()) {
    return absl::InvalidArgumentError("say which processes to capture: --pid, --pod or --all");
  }
  return chosen;
}

}  // namespace profd

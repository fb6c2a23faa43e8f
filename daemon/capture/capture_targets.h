// Which processes this profd can capture, and how: the agents on the agent channel (CUPTI in the
// process) and the PyTorch processes polling the Kineto socket (KINETO_USE_DAEMON=1), merged by
// pid into the one list `profctl agents` prints, and a capture request (--pid, --pod, --all,
// --via) resolved against it with the message a user needs when it cannot be.
//
// Any thread: it reads the registry and the Kineto server, each under its own lock, and /proc for
// the processes known only from Kineto.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/kineto/kineto_ipc_server.h"
#include "profd/v1/profd.pb.h"

namespace profd {

struct CaptureTarget {
  ConnectionId connection = 0;  // the agent's connection; 0 for a process without an agent
  v1::AgentInfo info;           // who it is; info.kineto set when it polls the Kineto socket
  v1::CapturePath path = v1::CAPTURE_PATH_CUPTI;  // how this capture reaches it
};

class CaptureTargets {
 public:
  // kineto may be null (--kineto_socket_dir=none).
  CaptureTargets(const AgentRegistry* registry, const kineto::KinetoIpcServer* kineto,
                 std::string hostname, std::string agent_socket);

  // Every process that can be captured, agents first, by pid.
  std::vector<CaptureTarget> List() const;
  std::vector<v1::AgentInfo> ListInfo() const;

  // The processes a request names, each with its path. `running_capture_of(pid)` answers the id
  // of a capture already running in that process ("" if none).
  absl::StatusOr<std::vector<CaptureTarget>> Resolve(
      const v1::CaptureRequest& request,
      const std::function<std::string(uint32_t pid)>& running_capture_of) const;

  const kineto::KinetoIpcServer* kineto() const { return kineto_; }

 private:
  absl::Status Choose(const v1::CaptureRequest& request, CaptureTarget* target) const;

  const AgentRegistry* const registry_;
  const kineto::KinetoIpcServer* const kineto_;
  const std::string hostname_;
  const std::string agent_socket_;
};

// KinetoInfo of a client, as profctl shows it.
v1::KinetoInfo KinetoInfoOf(const kineto::KinetoClient& client);

}  // namespace profd

// Which processes on this node have a connected agent. Written by the agent channel's I/O thread
// (register, heartbeat, unregister), read by gRPC handlers, the capture orchestrator and the
// metrics collector from their own threads; one mutex guards it and no call does I/O under it
// (a pidfd poll is not I/O).
//
// Each entry is bound to the process that connected (PeerProcess, a pidfd): lookups never return
// an agent whose process has exited, even before the I/O thread has closed its connection, so a
// process that later gets the same pid is never matched to the old connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/agents/peer_process.h"
#include "daemon/agents/pod_directory.h"
#include "daemon/log.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/profd.pb.h"

namespace profd {

// One connection of the agent channel; ids are never reused within a profd run.
using ConnectionId = uint64_t;

class AgentRegistry {
 public:
  struct Registered {
    // The connection this same process registered before, if it is still here: one live agent
    // per process, so the caller closes that one.
    std::optional<ConnectionId> replaces;
    std::string comm;  // from /proc, for the log
    // Where the pod it claims differs from the one profd verified: says both, for the log.
    std::string pod_conflict;
  };
  // Main thread, before the agent channel starts: which pod a process is in is then verified
  // (pod_directory.h), for agents and for what CaptureTargets lists. Null: the claims are used.
  void set_pod_directory(PodDirectory* directory) { pods_ = directory; }
  PodDirectory* pod_directory() const { return pods_; }
  // The pod directory's thread, after each new pod list: entries not yet verified are resolved
  // again, and disagreements found now are logged.
  void ResolvePendingPods();
  // Agent I/O thread. The hello has passed CheckHello. Reads who the process is from /proc while
  // it is alive; fails when it has exited.
  absl::StatusOr<Registered> Register(ConnectionId connection,
                                      std::shared_ptr<const PeerProcess> process,
                                      const v1::Hello& hello, absl::Time now);
  // For tests and benchmarks without a real process: the entry is bound to nothing and never
  // counts as exited.
  void Register(ConnectionId connection, uint32_t pid, uint32_t uid, const v1::Hello& hello,
                absl::Time now);
  void Heartbeat(ConnectionId connection, const v1::Heartbeat& heartbeat, absl::Time now);
  void Unregister(ConnectionId connection);

  // Capture orchestrator (any thread): which capture the connection is a target of ("" none).
  void SetCapturing(ConnectionId connection, const std::string& capture_id);
  // Agent I/O thread: whether the connection may send capture-sized frames now.
  bool IsCapturing(ConnectionId connection) const;

  // Any thread. Agents whose process has exited are left out of every answer.
  std::vector<v1::AgentInfo> List() const;
  std::vector<std::pair<ConnectionId, v1::AgentInfo>> ListWithConnections() const;
  std::optional<v1::AgentInfo> FindByPid(uint32_t pid) const;
  std::optional<ConnectionId> ConnectionOfPid(uint32_t pid) const;
  size_t size() const;

 private:
  struct Entry {
    v1::AgentInfo info;
    std::shared_ptr<const PeerProcess> process;  // null only for the test overload
    bool Live() const { return process == nullptr || !process->Exited(); }
  };

  PodDirectory* pods_ = nullptr;
  mutable absl::Mutex mutex_;
  std::map<ConnectionId, Entry> agents_ ABSL_GUARDED_BY(mutex_);
  // Processes choose their claims, and can reconnect: disagreements found on a refresh are
  // logged within a budget (those at registration go in the channel's own registration line).
  absl::Mutex log_mutex_;
  LogBudget pod_log_ ABSL_GUARDED_BY(log_mutex_){"pods", "pod claims that disagree with the cgroup",
                                                 Severity::kWarning, 10};
};

}  // namespace profd

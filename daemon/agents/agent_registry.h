// Which processes on this node have a connected agent. Written by the agent channel's I/O thread
// (register, heartbeat, unregister), read by gRPC handlers, the capture orchestrator and the
// metrics collector from their own threads; one mutex guards it and no call does I/O under it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/profd.pb.h"

namespace profd {

// One connection of the agent channel; ids are never reused within a profd run.
using ConnectionId = uint64_t;

class AgentRegistry {
 public:
  // Agent I/O thread. pid and uid come from SO_PEERCRED.
  void Register(ConnectionId connection, uint32_t pid, uint32_t uid, const v1::Hello& hello,
                absl::Time now);
  void Heartbeat(ConnectionId connection, const v1::Heartbeat& heartbeat, absl::Time now);
  void Unregister(ConnectionId connection);
  void SetCapturing(ConnectionId connection, const std::string& capture_id);

  // Any thread.
  std::vector<v1::AgentInfo> List() const;
  std::optional<v1::AgentInfo> FindByPid(uint32_t pid) const;
  std::optional<ConnectionId> ConnectionOfPid(uint32_t pid) const;
  size_t size() const;

 private:
  mutable absl::Mutex mutex_;
  std::map<ConnectionId, v1::AgentInfo> agents_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace profd

#include "daemon/agents/agent_registry.h"

#include "daemon/agents/process_identity.h"

namespace profd {

void AgentRegistry::Register(ConnectionId connection, uint32_t pid, uint32_t uid,
                             const v1::Hello& hello, absl::Time now) {
  // /proc is read before the lock is taken: it is I/O.
  ProcessIdentity identity = ReadProcessIdentity(static_cast<pid_t>(pid));
  v1::AgentInfo info;
  info.set_pid(pid);
  info.set_uid(uid);
  info.set_exe(identity.exe);
  info.set_command_line(identity.command_line);
  info.set_comm(identity.comm);
  info.set_container_id(identity.container_id);
  info.set_pod_uid(identity.pod_uid);
  info.set_pod_name(hello.pod_name());
  info.set_pod_namespace(hello.pod_namespace());
  info.set_container_name(hello.container_name());
  *info.mutable_devices() = hello.devices();
  info.set_cupti_version(hello.cupti_version());
  info.set_cuda_driver_version(hello.cuda_driver_version());
  info.set_agent_version(hello.agent_version());
  info.set_injected(hello.injected());
  info.set_connected_since_unix_ns(absl::ToUnixNanos(now));
  info.set_last_heartbeat_unix_ns(absl::ToUnixNanos(now));
  absl::MutexLock lock(&mutex_);
  agents_[connection] = std::move(info);
}

void AgentRegistry::Heartbeat(ConnectionId connection, const v1::Heartbeat& heartbeat,
                              absl::Time now) {
  absl::MutexLock lock(&mutex_);
  auto it = agents_.find(connection);
  if (it == agents_.end()) return;
  it->second.set_last_heartbeat_unix_ns(absl::ToUnixNanos(now));
  if (heartbeat.device_infos_size() > 0) *it->second.mutable_devices() = heartbeat.device_infos();
  *it->second.mutable_counters() = heartbeat.devices();
  it->second.set_launch_sample_every(heartbeat.launch_sample_every());
  if (heartbeat.has_cupti_sharing())
    *it->second.mutable_cupti_sharing() = heartbeat.cupti_sharing();
}

void AgentRegistry::Unregister(ConnectionId connection) {
  absl::MutexLock lock(&mutex_);
  agents_.erase(connection);
}

void AgentRegistry::SetCapturing(ConnectionId connection, const std::string& capture_id) {
  absl::MutexLock lock(&mutex_);
  auto it = agents_.find(connection);
  if (it != agents_.end()) it->second.set_capturing(capture_id);
}

std::vector<v1::AgentInfo> AgentRegistry::List() const {
  absl::MutexLock lock(&mutex_);
  std::vector<v1::AgentInfo> out;
  out.reserve(agents_.size());
  for (const auto& [id, info] : agents_) out.push_back(info);
  return out;
}

std::optional<v1::AgentInfo> AgentRegistry::FindByPid(uint32_t pid) const {
  absl::MutexLock lock(&mutex_);
  for (const auto& [id, info] : agents_) {
    if (info.pid() == pid) return info;
  }
  return std::nullopt;
}

std::optional<ConnectionId> AgentRegistry::ConnectionOfPid(uint32_t pid) const {
  absl::MutexLock lock(&mutex_);
  for (const auto& [id, info] : agents_) {
    if (info.pid() == pid) return id;
  }
  return std::nullopt;
}

size_t AgentRegistry::size() const {
  absl::MutexLock lock(&mutex_);
  return agents_.size();
}

}  // namespace profd

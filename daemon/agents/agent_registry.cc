#include "daemon/agents/agent_registry.h"

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "daemon/agents/process_identity.h"

namespace profd {
namespace {

v1::AgentInfo InfoOf(uint32_t pid, uint32_t uid, const ProcessIdentity& identity,
                     const v1::Hello& hello, absl::Time now) {
  v1::AgentInfo info;
  info.set_pid(pid);
  info.set_uid(uid);
  info.set_exe(identity.exe);
  info.set_command_line(identity.command_line);
  info.set_comm(identity.comm);
  info.set_container_id(identity.container_id);
  info.set_pod_uid(identity.pod_uid);
  info.set_claimed_pod_name(hello.pod_name());
  if (hello.distributed() && hello.rank() < hello.world_size()) {
    info.set_distributed(true);
    info.set_rank(hello.rank());
    info.set_world_size(hello.world_size());
    info.set_local_rank(hello.local_rank());
  }
  info.set_claimed_pod_namespace(hello.pod_namespace());
  info.set_container_name(hello.container_name());
  *info.mutable_devices() = hello.devices();
  info.set_cupti_version(hello.cupti_version());
  info.set_cuda_driver_version(hello.cuda_driver_version());
  info.set_agent_version(hello.agent_version());
  info.set_injected(hello.injected());
  info.set_connected_since_unix_ns(absl::ToUnixNanos(now));
  info.set_last_heartbeat_unix_ns(absl::ToUnixNanos(now));
  return info;
}

std::string PodConflict(const v1::AgentInfo& info) {
  return absl::StrCat(
      "pod ",
      info.pod_namespace().empty() && info.pod_name().empty()
          ? "none (its cgroup names no pod)"
          : absl::StrCat(info.pod_namespace(), "/", info.pod_name(), " (uid ", info.pod_uid(), ")"),
      ", verified; it claims ", info.claimed_pod_namespace(), "/", info.claimed_pod_name(),
      " (POD_NAMESPACE/POD_NAME), which is not used");
}

}  // namespace

absl::StatusOr<AgentRegistry::Registered> AgentRegistry::Register(
    ConnectionId connection, std::shared_ptr<const PeerProcess> process, const v1::Hello& hello,
    absl::Time now) {
  // /proc is read before the lock is taken: it is I/O.
  absl::StatusOr<ProcessIdentity> identity =
      ReadProcessIdentity(process->pid(), [&process] { return !process->Exited(); });
  if (!identity.ok()) return identity.status();
  v1::AgentInfo info =
      InfoOf(static_cast<uint32_t>(process->pid()), process->uid(), *identity, hello, now);
  Registered registered;
  if (ResolvePod(pods_, &info)) registered.pod_conflict = PodConflict(info);
  MutexLock lock(&mutex_);
  // Two live entries with one pid are one process: a pid names one live process at a time.
  registered.comm = identity->comm;
  for (const auto& [id, entry] : agents_) {
    if (id != connection && entry.info.pid() == info.pid() && entry.Live()) {
      registered.replaces = id;
    }
  }
  agents_[connection] = Entry{std::move(info), std::move(process)};
  return registered;
}

void AgentRegistry::Register(ConnectionId connection, uint32_t pid, uint32_t uid,
                             const v1::Hello& hello, absl::Time now) {
  ProcessIdentity identity =
      ReadProcessIdentity(static_cast<pid_t>(pid)).value_or(ProcessIdentity{});
  v1::AgentInfo info = InfoOf(pid, uid, identity, hello, now);
  ResolvePod(pods_, &info);
  MutexLock lock(&mutex_);
  agents_[connection] = Entry{std::move(info), nullptr};
}

void AgentRegistry::ResolvePendingPods() {
  std::vector<std::string> conflicts;
  {
    MutexLock lock(&mutex_);
    for (auto& [id, entry] : agents_) {
      if (entry.info.pod_identity() != v1::POD_IDENTITY_UNVERIFIED) continue;
      if (ResolvePod(pods_, &entry.info)) {
        conflicts.push_back(absl::StrCat("pid ", entry.info.pid(), " (", entry.info.comm(),
                                         "): ", PodConflict(entry.info)));
      }
    }
  }
  if (conflicts.empty()) return;
  absl::MutexLock lock(&log_mutex_);
  for (const std::string& line : conflicts) pod_log_.Log(line);
}

void AgentRegistry::Heartbeat(ConnectionId connection, const v1::Heartbeat& heartbeat,
                              absl::Time now) {
  MutexLock lock(&mutex_);
  auto it = agents_.find(connection);
  if (it == agents_.end()) return;
  v1::AgentInfo& info = it->second.info;
  info.set_last_heartbeat_unix_ns(absl::ToUnixNanos(now));
  if (heartbeat.device_infos_size() > 0) *info.mutable_devices() = heartbeat.device_infos();
  *info.mutable_counters() = heartbeat.devices();
  info.set_launch_sample_every(heartbeat.launch_sample_every());
  info.set_launch_counting(heartbeat.launch_counting());
  info.set_counters_paused(heartbeat.counters_paused());
  *info.mutable_recorder() = heartbeat.recorder();
  if (heartbeat.has_cupti_sharing()) *info.mutable_cupti_sharing() = heartbeat.cupti_sharing();
}

void AgentRegistry::Unregister(ConnectionId connection) {
  MutexLock lock(&mutex_);
  agents_.erase(connection);
}

void AgentRegistry::SetCapturing(ConnectionId connection, const std::string& capture_id) {
  MutexLock lock(&mutex_);
  auto it = agents_.find(connection);
  if (it != agents_.end()) it->second.info.set_capturing(capture_id);
}

bool AgentRegistry::IsCapturing(ConnectionId connection) const {
  MutexLock lock(&mutex_);
  auto it = agents_.find(connection);
  return it != agents_.end() && !it->second.info.capturing().empty();
}

std::vector<v1::AgentInfo> AgentRegistry::List() const {
  MutexLock lock(&mutex_);
  std::vector<v1::AgentInfo> out;
  out.reserve(agents_.size());
  for (const auto& [id, entry] : agents_) {
    if (entry.Live()) out.push_back(entry.info);
  }
  return out;
}

std::vector<std::pair<ConnectionId, v1::AgentInfo>> AgentRegistry::ListWithConnections() const {
  MutexLock lock(&mutex_);
  std::vector<std::pair<ConnectionId, v1::AgentInfo>> out;
  out.reserve(agents_.size());
  for (const auto& [id, entry] : agents_) {
    if (entry.Live()) out.emplace_back(id, entry.info);
  }
  return out;
}

std::optional<v1::AgentInfo> AgentRegistry::FindByPid(uint32_t pid) const {
  MutexLock lock(&mutex_);
  for (const auto& [id, entry] : agents_) {
    if (entry.info.pid() == pid && entry.Live()) return entry.info;
  }
  return std::nullopt;
}

std::optional<ConnectionId> AgentRegistry::ConnectionOfPid(uint32_t pid) const {
  MutexLock lock(&mutex_);
  for (const auto& [id, entry] : agents_) {
    if (entry.info.pid() == pid && entry.Live()) return id;
  }
  return std::nullopt;
}

size_t AgentRegistry::size() const {
  MutexLock lock(&mutex_);
  size_t live = 0;
  for (const auto& [id, entry] : agents_) live += entry.Live() ? 1 : 0;
  return live;
}

}  // namespace profd

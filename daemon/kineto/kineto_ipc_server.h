// profd's end of Kineto's daemon protocol: a unix datagram socket at <socket_dir>/dynolog that
// PyTorch processes started with KINETO_USE_DAEMON=1 and KINETO_IPC_SOCKET_DIR=<socket_dir> poll
// for on-demand trace configs (what dynolog serves). A filesystem socket, not Kineto's default
// abstract one, so that pods in their own network namespaces reach it through a shared folder.
//
// Who polls is taken from the kernel (SCM_CREDENTIALS on every datagram), never from the pids
// Kineto writes into its request: those are the process's own view (its pid namespace), kept only
// to name the trace file Kineto will write. A config offered for a pid goes out with that
// process's next poll that asks for one; a poll with type 0 says Kineto is busy collecting a
// trace (a torch.profiler session is running in the process).
//
// A reply goes to the sender's own socket and nowhere else. The folder is world-writable, so the
// name a datagram came from is only a name: by the time profd answers, the sender may have put a
// symbolic link there (to another user's socket, or outside the folder), and profd, as root,
// would deliver where the sender itself could not. So the folder is opened once at Start and a
// reply goes to the name inside it, opened without following links (O_PATH | O_NOFOLLOW): a
// socket, owned by the uid the kernel gave for the sender (SCM_CREDENTIALS), reached through that
// descriptor (/proc/self/fd/N) so that nothing can be swapped in between. (SO_PEERCRED says
// nothing about a datagram peer: measured on Linux 6.18, it gives pid 0, uid -1.)
//
// One thread owns the socket and the client table; Offer/Find/Clients are called from any thread
// and take mutex_ briefly. Datagrams are checked (kineto_wire.h) before anything is believed;
// a malformed one is counted and dropped, a flood from one process is ignored past a rate, and
// what is refused is logged within a budget (LogBudget), whatever the number of senders.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/agents/peer_process.h"
#include "daemon/log.h"

namespace profd::kineto {

struct KinetoClient {
  uint32_t pid = 0;  // in profd's pid namespace (SCM_CREDENTIALS)
  // Pinned at its first poll (a pidfd): once it exits, a process that reuses the pid is a new
  // client, never this one.
  std::shared_ptr<const PeerProcess> process;
  uint32_t uid = 0;
  int32_t ns_pid = 0;  // the pid the process sees itself as: Kineto names its trace file after it
  int64_t job_id = 0;
  std::string endpoint;  // the client's socket path: <socket_dir>/<name>, one name, no folders
  absl::Time first_poll;
  absl::Time last_poll;
  absl::Duration poll_period = absl::ZeroDuration();  // between its last two polls
  uint64_t polls = 0;
  bool busy = false;  // its last poll said a trace is being collected
};

struct KinetoIpcOptions {
  std::string socket_dir;  // KINETO_IPC_SOCKET_DIR of the processes, exactly as they spell it
  // A process that has not polled for this long is forgotten (Kineto polls every 5 s by default,
  // every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS with a KINETO_CONFIG file).
  absl::Duration client_timeout = absl::Seconds(30);
  size_t max_clients = 4096;
  // Polls per second one process may send; more are dropped and counted (Kineto sends one per
  // poll period).
  int max_polls_per_second = 20;
};

class KinetoIpcServer {
 public:
  explicit KinetoIpcServer(KinetoIpcOptions options);
  ~KinetoIpcServer();

  // Creates the folder (1777: clients bind their own sockets in it), binds the socket, starts the
  // thread.
  absl::Status Start();
  void Stop();

  struct Offer {
    // The KEY=VALUE lines (kineto_config.h), made when they go out: the start time is set from
    // the moment of the reply.
    std::function<std::string(absl::Time delivered)> config;
    absl::Time expires;  // not delivered by then: dropped, on_expired is called
    // Called on the server thread when the config went out with a poll, or expired.
    std::function<void(const KinetoClient& client, absl::Time delivered)> on_delivered;
    std::function<void()> on_expired;
  };
  // Any thread. Replaces an earlier offer for the same pid. NotFound when pid has not polled.
  absl::Status Make(uint32_t pid, Offer offer);
  // Any thread. Drops the offer for pid, if it has not gone out yet; true if one was dropped.
  bool Withdraw(uint32_t pid);

  // Processes that have polled within client_timeout and are still running.
  std::optional<KinetoClient> Find(uint32_t pid) const;
  std::vector<KinetoClient> Clients() const;
  uint64_t protocol_errors() const { return protocol_errors_.load(); }
  const std::string& socket_path() const { return socket_path_; }

 private:
  void Run();
  void OnDatagram(std::string_view bytes, uint32_t pid, uint32_t uid, const std::string& endpoint,
                  absl::Time now);
  // The sender's socket <socket_dir>/<name> as an O_PATH descriptor, or why it is not one to
  // answer: not a socket (a link planted there), or not the sender's uid's.
  absl::StatusOr<int> OpenEndpoint(const std::string& name, uint32_t uid) const;
  // Sends config to the socket open as endpoint_fd (O_PATH), then closes it.
  void Reply(int endpoint_fd, const std::string& endpoint, const std::string& config);
  void Expire(absl::Time now);

  const KinetoIpcOptions options_;
  std::string socket_path_;
  int fd_ = -1;
  int dir_fd_ = -1;  // socket_dir, opened once at Start (O_PATH, no link followed)
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> protocol_errors_{0};

  struct Rate {
    absl::Time window_start;
    int count = 0;
  };

  mutable absl::Mutex mutex_;
  std::map<uint32_t, KinetoClient> clients_ ABSL_GUARDED_BY(mutex_);
  std::map<uint32_t, Offer> offers_ ABSL_GUARDED_BY(mutex_);
  std::map<uint32_t, Rate> rates_ ABSL_GUARDED_BY(mutex_);

  // Server thread only.
  LogBudget refused_log_{"kineto-ipc", "Kineto datagrams refused", Severity::kWarning, 10};
  // Many more: a node where 64 PyTorch processes start at once still logs each.
  LogBudget clients_log_{"kineto-ipc", "PyTorch processes that started polling", Severity::kInfo,
                         200};
};

}  // namespace profd::kineto

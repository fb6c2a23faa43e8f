// The process at the other end of an agent connection, pinned by a pidfd. Its pid and uid come
// from the kernel (SO_PEERCRED); the pidfd makes them mean this one process for as long as the
// object lives: Exited() turns true the moment it exits, so the connection can be closed even
// when a child still holds the socket, and a later process that reuses the pid is never taken
// for it (issue 12: the pid-reuse hijack).
//
// Binding: SO_PEERPIDFD (Linux 6.5 and later) gives the pidfd of the process that called
// connect(), with no race. On older kernels profd falls back to pidfd_open() on the SO_PEERCRED
// pid and checks that the process it got started no later than the connection was accepted (the
// start time from /proc/<pid>/stat, read while the pidfd shows the process alive, so the time is
// the pidfd's process's). The race that remains there: the process that connected exits while
// its connection waits in the listen backlog, and its pid goes to a new process started before
// the accept (or within the same 10 ms clock tick). That process would be taken for the peer.
// profd accepts as soon as the listener is readable, so the window is the time a connection
// waits in the backlog; narrow, not impossible (a local user can cycle through a 32768-pid space
// in about a second). Kernels with SO_PEERPIDFD do not have it.
//
// Thread-safe: immutable after construction; Exited() is a poll(2) of the pidfd.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace profd {

class PeerProcess {
 public:
  // The peer of a connected unix socket. use_peer_pidfd=false forces the fallback for older
  // kernels (tests). Fails when the peer's credentials cannot be read (a pid from another pid
  // namespace reads as 0) or the process has already exited.
  static absl::StatusOr<std::shared_ptr<const PeerProcess>> OfSocket(int socket_fd,
                                                                     bool use_peer_pidfd = true);
  // The process with this pid now, which must have started no later than `not_after_ticks`
  // (clock ticks since boot, as in /proc/<pid>/stat; BootTicksNow() for "now").
  static absl::StatusOr<std::shared_ptr<const PeerProcess>> OfPid(pid_t pid, uid_t uid,
                                                                  uint64_t not_after_ticks);
  static uint64_t BootTicksNow();

  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess();

  pid_t pid() const { return pid_; }
  uid_t uid() const { return uid_; }
  int pidfd() const { return pidfd_; }  // readable once the process has exited (epoll)
  uint64_t start_ticks() const { return start_ticks_; }
  bool bound_by_peer_pidfd() const { return by_peer_pidfd_; }
  // Any thread.
  bool Exited() const;

 private:
  PeerProcess(pid_t pid, uid_t uid, int pidfd, uint64_t start_ticks, bool by_peer_pidfd)
      : pid_(pid),
        uid_(uid),
        pidfd_(pidfd),
        start_ticks_(start_ticks),
        by_peer_pidfd_(by_peer_pidfd) {}

  const pid_t pid_;
  const uid_t uid_;
  const int pidfd_;
  const uint64_t start_ticks_;
  const bool by_peer_pidfd_;
};

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. Exposed for
// tests. `stat_text` is the whole file; the command name in it may hold spaces and parentheses.
absl::StatusOr<uint64_t> ParseStartTicks(const std::string& stat_text);

}  // namespace profd

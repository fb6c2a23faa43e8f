#include "daemon/agents/peer_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace profd {
namespace {

// Linux 6.5; glibc 2.36's headers do not have it yet.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool PidfdExited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

absl::StatusOr<uint64_t> ReadStartTicks(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/stat");
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  char buf[4096];  // the command name is at most 64 bytes: the whole line fits
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return ParseStartTicks(std::string(buf, static_cast<size_t>(n)));
}

}  // namespace

absl::StatusOr<uint64_t> ParseStartTicks(const std::string& stat_text) {
  // "pid (comm) state ppid ...": comm may hold ')' itself, so fields count from the last one.
  size_t close_paren = stat_text.rfind(')');
  if (close_paren == std::string::npos) {
    return absl::InvalidArgumentError("/proc/<pid>/stat without a command name");
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat_text).substr(close_paren + 1), ' ', absl::SkipEmpty());
  constexpr size_t kStartTime = 22 - 3;  // field 22; the first after ')' is field 3 (state)
  uint64_t ticks = 0;
  if (fields.size() <= kStartTime || !absl::SimpleAtoi(fields[kStartTime], &ticks)) {
    return absl::InvalidArgumentError("/proc/<pid>/stat has no start time (field 22)");
  }
  return ticks;
}

uint64_t PeerProcess::BootTicksNow() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  const uint64_t hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(ts.tv_sec) * hz +
         static_cast<uint64_t>(ts.tv_nsec) * hz / 1'000'000'000ull;
}

absl::StatusOr<std::shared_ptr<const PeerProcess>> PeerProcess::OfSocket(int socket_fd,
                                                                         bool use_peer_pidfd) {
  // Taken first: the peer connected before accept() returned, so before this.
  const uint64_t accepted_ticks = BootTicksNow();
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) {
    return absl::PermissionDeniedError(
        "the peer's credentials cannot be read (a process in another pid namespace?)");
  }
  if (use_peer_pidfd) {
    int pidfd = -1;
    socklen_t pidfd_len = sizeof(pidfd);
    if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfd_len) == 0) {
      fcntl(pidfd, F_SETFD, FD_CLOEXEC);
      // The start time is informational here (the pidfd is the binding); read it while alive.
      absl::StatusOr<uint64_t> start = ReadStartTicks(cred.pid);
      if (!start.ok() || PidfdExited(pidfd)) {
        close(pidfd);
        return absl::NotFoundError(
            absl::StrCat("process ", cred.pid, " exited before its connection was accepted"));
      }
      return std::shared_ptr<const PeerProcess>(
          new PeerProcess(cred.pid, cred.uid, pidfd, *start, /*by_peer_pidfd=*/true));
    }
    if (errno != ENOPROTOOPT) {
      // The kernel knows the option but has no live process for the peer: it has exited (and
      // its pid may already be someone else's, so no fallback by pid).
      return absl::NotFoundError(absl::StrCat("process ", cred.pid,
                                              " exited before its connection was accepted (",
                                              std::strerror(errno), ")"));
    }
  }
  return OfPid(cred.pid, cred.uid, accepted_ticks);
}

absl::StatusOr<std::shared_ptr<const PeerProcess>> PeerProcess::OfPid(pid_t pid, uid_t uid,
                                                                      uint64_t not_after_ticks) {
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) {
    return absl::NotFoundError(absl::StrCat("pidfd_open(", pid, "): ", std::strerror(errno)));
  }
  absl::StatusOr<uint64_t> start = ReadStartTicks(pid);
  // Alive after the read: the pid was not reused between pidfd_open and the read, so the start
  // time is the pidfd's process's.
  if (!start.ok() || PidfdExited(pidfd)) {
    close(pidfd);
    return absl::NotFoundError(absl::StrCat("process ", pid, " has exited"));
  }
  if (*start > not_after_ticks) {
    close(pidfd);
    return absl::PermissionDeniedError(absl::StrCat(
        "pid ", pid, " belongs to a process that started after the connection was accepted (",
        *start, " > ", not_after_ticks,
        " ticks since boot): the process that connected has exited and its pid was reused"));
  }
  return std::shared_ptr<const PeerProcess>(
      new PeerProcess(pid, uid, pidfd, *start, /*by_peer_pidfd=*/false));
}

PeerProcess::~PeerProcess() {
  if (pidfd_ >= 0) close(pidfd_);
}

bool PeerProcess::Exited() const { return PidfdExited(pidfd_); }

}  // namespace profd

#include "daemon/kineto/kineto_trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace profd::kineto {
namespace {

// openat2 resolving `path` as if `root_fd` were "/", following no link of any kind.
int OpenInRoot(int root_fd, const std::string& path, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof(how)));
}

}  // namespace

absl::StatusOr<KinetoTraceFile> KinetoTraceFile::Open(pid_t pid, uid_t owner,
                                                      const std::string& path_in_process,
                                                      uint64_t max_bytes, std::string proc) {
  const size_t slash = path_in_process.rfind('/');
  if (path_in_process.empty() || path_in_process[0] != '/' || slash == std::string::npos ||
      slash + 1 == path_in_process.size()) {
    return absl::InvalidArgumentError(absl::StrCat("not an absolute file path: ", path_in_process));
  }
  const std::string root = absl::StrCat(proc, "/", pid, "/root");
  int root_fd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", root, " (process gone?): ", std::strerror(errno)));
  }
  const std::string dir = slash == 0 ? "/" : path_in_process.substr(0, slash);
  int dir_fd = OpenInRoot(root_fd, dir, O_PATH | O_DIRECTORY);
  const int dir_errno = errno;
  close(root_fd);
  if (dir_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", dir, " inside pid ", pid,
                     " without following links: ", std::strerror(dir_errno)));
  }
  const std::string name = path_in_process.substr(slash + 1);
  // O_NONBLOCK: a FIFO planted at the name must not hang profd before it is refused below.
  int fd = OpenInRoot(dir_fd, name, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    close(dir_fd);
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path_in_process, " is not in pid ", pid, " yet"));
    }
    return absl::FailedPreconditionError(absl::StrCat("refusing ", path_in_process, " of pid ", pid,
                                                      ": ", std::strerror(err),
                                                      err == ELOOP ? " (a symbolic link)" : ""));
  }
  struct stat st;
  std::string refused;
  if (fstat(fd, &st) != 0) {
    refused = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    refused = "not a regular file";
  } else if (st.st_uid != owner) {
    refused = absl::StrCat("owned by uid ", st.st_uid, ", not by the process's uid ", owner);
  } else if (st.st_nlink != 1) {
    refused = absl::StrCat("has ", st.st_nlink, " links");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    refused = absl::StrCat("is ", st.st_size, " bytes, over the ", max_bytes, "-byte limit");
  }
  if (!refused.empty()) {
    close(fd);
    close(dir_fd);
    return absl::FailedPreconditionError(
        absl::StrCat("refusing ", path_in_process, " of pid ", pid, ": ", refused));
  }
  return KinetoTraceFile(dir_fd, fd, name, static_cast<uint64_t>(st.st_size));
}

KinetoTraceFile::KinetoTraceFile(KinetoTraceFile&& other) noexcept
    : dir_fd_(other.dir_fd_), fd_(other.fd_), name_(std::move(other.name_)), size_(other.size_) {
  other.dir_fd_ = other.fd_ = -1;
}

KinetoTraceFile::~KinetoTraceFile() {
  if (fd_ >= 0) close(fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
}

absl::Status KinetoTraceFile::Remove() {
  if (unlinkat(dir_fd_, name_.c_str(), 0) != 0) {
    return absl::InternalError(absl::StrCat("cannot remove ", name_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace profd::kineto

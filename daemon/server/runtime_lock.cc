#include "daemon/server/runtime_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace profd {

absl::StatusOr<int> LockRuntimeDir(const std::string& runtime_dir) {
  std::error_code ec;
  std::filesystem::create_directories(runtime_dir, ec);
  const std::string path = runtime_dir + "/profd.lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno), " (check --runtime_dir)"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    std::string holder = n > 0 ? std::string(absl::StripAsciiWhitespace(buf)) : "unknown";
    return absl::FailedPreconditionError(
        absl::StrCat("another profd (pid ", holder, ") is running with --runtime_dir=", runtime_dir,
                     ": stop it first, or give this one its own --runtime_dir (and sockets)"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds either way; only the pid in the message would be missing.
  }
  return fd;
}

}  // namespace profd

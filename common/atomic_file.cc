#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace profd {

absl::Status FileWriteError(const std::string& path, int error) {
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) {
    const char* name = error == ENOSPC ? "ENOSPC" : error == EDQUOT ? "EDQUOT" : "EFBIG";
    return absl::ResourceExhaustedError(
        absl::StrCat("disk full (", name, ": ", std::strerror(error), ") writing ", path));
  }
  return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 const AtomicWriteOptions& options) {
  const std::string temp = options.temp_path.empty() ? path + ".tmp" : options.temp_path;
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return FileWriteError(temp, errno);
  int error = 0;
  for (size_t done = 0; done < content.size() && error == 0;) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno != EINTR) error = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    unlink(temp.c_str());
    return FileWriteError(temp, error);
  }
  return CommitFile(temp, path, options);
}

absl::Status CommitFile(const std::string& temp, const std::string& path,
                        const AtomicWriteOptions& options) {
  if (options.mode) chmod(temp.c_str(), *options.mode);
  if (options.sync) {
    int fd = open(temp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      fsync(fd);
      close(fd);
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ", path, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace profd

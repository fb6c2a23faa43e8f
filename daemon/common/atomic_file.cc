#include "daemon/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace profd {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 const AtomicWriteOptions& options) {
  const std::string temp = options.temp_path.empty() ? path + ".tmp" : options.temp_path;
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) {
      const std::string error = std::strerror(errno);
      unlink(temp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", temp, ": ", error));
    }
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

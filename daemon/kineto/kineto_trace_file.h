// The trace file Kineto wrote inside a profiled process, read by profd (root) through
// /proc/<pid>/root so that it works for processes in their own mount namespace (pods).
//
// The process is untrusted and chose nothing but the file's content: profd names the path, and
// opens it resolving every component inside the process's root without following any symbolic
// link (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS), and accepts only a regular file with one
// link owned by the process's own uid, below a size cap. So a process cannot make profd read
// (and hand to the trace store) a file the process could not read itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace profd::kineto {

class KinetoTraceFile {
 public:
  // NotFound while the file is not there (yet); FailedPrecondition for a file profd refuses.
  static absl::StatusOr<KinetoTraceFile> Open(pid_t pid, uid_t owner,
                                              const std::string& path_in_process,
                                              uint64_t max_bytes, std::string proc = "/proc");
  KinetoTraceFile(KinetoTraceFile&& other) noexcept;
  KinetoTraceFile& operator=(KinetoTraceFile&&) = delete;
  ~KinetoTraceFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // Removes the file from the process's /tmp (the same checked resolution as Open).
  absl::Status Remove();

 private:
  KinetoTraceFile(int dir_fd, int fd, std::string name, uint64_t size)
      : dir_fd_(dir_fd), fd_(fd), name_(std::move(name)), size_(size) {}
  int dir_fd_ = -1;  // the folder holding the file, inside the process's root
  int fd_ = -1;
  std::string name_;
  uint64_t size_ = 0;
};

}  // namespace profd::kineto

// Files a reader sees whole or not at all: written under a temporary name beside the target,
// then renamed over it. The one implementation of temp + rename in profd.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace profd {

struct AtomicWriteOptions {
  // fsync the file before the rename, so that it survives a crash (the trace store).
  bool sync = false;
  // Permissions of the new file (e.g. 0644 for a config every process must read); unset: the
  // process's umask decides.
  std::optional<mode_t> mode;
  // The temporary name; empty: <path>.tmp. Writers that may race on one target pass a unique one.
  std::string temp_path;
};

// The error of a failed write of path, errno `error`: a full disk (ENOSPC, EDQUOT, EFBIG) says
// "disk full" and is RESOURCE_EXHAUSTED, so that users and callers tell it from other failures.
absl::Status FileWriteError(const std::string& path, int error);

// Writes content to path through a temporary file and a rename; the temporary file is removed
// when anything fails.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 const AtomicWriteOptions& options = {});

// Moves a finished temporary file over path (fsync first when options.sync); the temporary is
// removed when the rename fails. options.temp_path is ignored: temp is the file.
absl::Status CommitFile(const std::string& temp, const std::string& path,
                        const AtomicWriteOptions& options = {});

}  // namespace profd

// One profd per runtime folder: a second profd started with the same --runtime_dir would take
// over its sockets and remove them when it exits, leaving the first running and unreachable.
// profd holds an exclusive lock on <runtime_dir>/profd.lock (which says its pid) for its life.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace profd {

// Creates the folder if needed and takes the lock; returns the lock file's descriptor (kept open
// until profd exits, when the kernel lets the lock go). FAILED_PRECONDITION with the holder's pid
// when another profd holds it.
absl::StatusOr<int> LockRuntimeDir(const std::string& runtime_dir);

}  // namespace profd

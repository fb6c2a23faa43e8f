// Turns an existing trace file (profd's own, or a PyTorch profiler / Kineto Chrome-trace JSON,
// plain or gzip) into a capture folder: trace-<pid>.json.gz, summary.json and manifest.json, as
// docs/TRACE_FORMAT.md describes. The trace is read once, streaming, by the analysis library
// (analysis), whose report is the summary.json every capture carries.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "profd/v1/store.pb.h"

namespace profd::store {

struct ImportRequest {
  std::string input_path;     // the uploaded bytes
  std::string original_name;  // kept in the manifest
  std::string label;
  std::string hostname;  // this profd's host
  std::string capture_id;
  std::string folder;  // empty capture folder to fill (from Spool::Reserve)
};

struct ImportResult {
  uint64_t events = 0;
  uint64_t kernels = 0;
  std::string trace_file;  // name inside the folder
  // The store's row for the imported capture, its files listed with their digests (for
  // Spool::Submit: the manifest is not read back).
  v1::StoredTrace described;
};

// INVALID_ARGUMENT when the input is not a Chrome-trace JSON with a traceEvents array.
absl::StatusOr<ImportResult> BuildImportedCapture(const ImportRequest& request);

}  // namespace profd::store

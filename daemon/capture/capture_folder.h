// One capture's folder: a trace per process (trace-<pid>.json.gz or .pftrace.gz), summary.json and
// manifest.json (docs/TRACE_FORMAT.md). It is the one place that names the files, writes the JSON
// ones atomically and says each file's size and SHA-256 for the manifest. The digest of a trace
// profd writes is taken from the compressed bytes as the writer writes them: the file is never read
// back.
//
// Threads: owned and called by one capture's pipeline thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/report.h"
#include "common/sha256.h"
#include "daemon/trace/trace_writer.h"
#include "profd/v1/profd.pb.h"

namespace profd {

class CaptureFolder {
 public:
  explicit CaptureFolder(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  std::string PathOf(const std::string& name) const { return path_ + "/" + name; }

  // Creates the folder and the process's trace file in it (TraceFileName); the file's size and
  // digest follow the writer's bytes.
  absl::StatusOr<std::unique_ptr<TraceWriter>> CreateTrace(const TraceProcess& process,
                                                           TraceFormat format, int gzip_level);

  // The manifest's entry for a finished file: a trace from CreateTrace (its writer finished), or
  // a file someone else put here whole (Kineto's trace), which is read once for its digest.
  v1::TraceFile Describe(const std::string& name, std::string_view format, uint32_t pid);

  // summary.json: the bottleneck report, or (no report) the capture's summary as proto JSON.
  absl::Status WriteSummary(const analysis::Report& report) const;
  absl::Status WriteSummary(const v1::CaptureSummary& summary) const;
  absl::Status WriteManifest(const v1::CaptureInfo& info) const;

  // unfinished.json: the capture as requested, written when it starts and removed once its
  // manifest is written. A folder without a manifest is a capture a profd never finished
  // (killed, crashed, power lost): the next profd repairs it (CaptureOrchestrator::
  // RecoverUnfinished) from what this file and the traces hold.
  static constexpr char kUnfinished[] = "unfinished.json";
  static constexpr char kManifest[] = "manifest.json";
  absl::Status MarkUnfinished(const v1::CaptureInfo& info) const;
  void ClearUnfinished() const;
  // The folder and all in it (a capture whose files could not be written whole).
  absl::Status Remove() const;
  // The folder, when nothing but the unfinished mark is in it (no process sent an event).
  void RemoveIfEmpty() const;

 private:
  struct Written {
    Sha256 sha256;
    uint64_t bytes = 0;
  };

  const std::string path_;
  std::map<std::string, std::unique_ptr<Written>> written_;  // by file name; stable addresses
};

}  // namespace profd

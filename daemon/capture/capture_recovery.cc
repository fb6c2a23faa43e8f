// Recovery: the capture folders a killed or crashed profd left without a manifest, repaired and
// closed as finished ones are when profd starts again (docs/RELIABILITY.md).
#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/proto_json.h"
#include "daemon/capture/capture_close.h"
#include "daemon/capture/capture_folder.h"
#include "daemon/capture/capture_orchestrator.h"
#include "daemon/capture/capture_session.h"
#include "daemon/log.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/trace_format.h"
#include "daemon/trace/trace_repair.h"

namespace profd {
namespace {

constexpr char kComponent[] = "capture";
constexpr char kKilledMessage[] =
    "profd stopped before the capture was finished (killed or crashed?); repaired when profd "
    "started again: the trace keeps the events written until then";

// What a killed capture's unfinished.json recorded of its request (the CaptureInfo the capture
// began with); empty when there is none or it was cut.
std::string ReadRequestRecord(const CaptureFolder& folder) {
  std::ifstream in(folder.PathOf(CaptureFolder::kUnfinished), std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct LeftTrace {
  std::string name;
  uint32_t pid;
  TraceFormat format;
  bool operator<(const LeftTrace& o) const { return name < o.name; }
};

// The traces the folder holds (trace-<pid><suffix>), by name; the writes the kill cut short
// (.tmp, .repair) are removed.
std::vector<LeftTrace> ListLeftTraces(const std::string& path) {
  std::vector<LeftTrace> traces;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, ".tmp") || absl::EndsWith(name, ".repair")) {
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    uint32_t pid = 0;
    TraceFormat format;
    if (ParseTraceFileName(name, &pid, &format)) traces.push_back({name, pid, format});
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

v1::ProcessCapture* ProcessOf(v1::CaptureInfo* info, uint32_t pid) {
  for (v1::ProcessCapture& p : *info->mutable_processes()) {
    if (p.pid() == pid) return &p;
  }
  v1::ProcessCapture* p = info->add_processes();
  p->set_pid(pid);
  return p;
}

// Each left trace made readable by its format's repair and listed in info's files; what could
// not be kept is removed and said in *lost. Kineto's copies are not profd's format to close:
// kept when whole.
void RepairLeftTraces(CaptureFolder& folder, const std::vector<LeftTrace>& traces, int gzip_level,
                      v1::CaptureInfo* info, std::vector<std::string>* lost) {
  std::error_code ec;
  for (const auto& [name, pid, format] : traces) {
    v1::ProcessCapture* p = ProcessOf(info, pid);
    if (p->path() == v1::CAPTURE_PATH_KINETO) {
      if (GzipIsWhole(folder.PathOf(name))) {
        *info->add_files() = folder.Describe(name, kKinetoTraceManifestFormat, pid);
      } else {
        std::filesystem::remove(folder.PathOf(name), ec);
        lost->push_back(
            absl::StrCat("pid ", pid, ": Kineto's trace was cut while profd copied it"));
      }
      continue;
    }
    TraceProcess process;
    process.pid = pid;
    process.comm = p->comm();
    process.hostname = info->hostname();
    process.capture_id = info->capture_id();
    absl::StatusOr<TraceRepair> repaired =
        TraceFormatOf(format).repair(folder.PathOf(name), process, kKilledMessage, gzip_level);
    if (!repaired.ok()) {
      // Nothing of it reads: no file that looks like a trace stays.
      std::filesystem::remove(folder.PathOf(name), ec);
      lost->push_back(absl::StrCat("pid ", pid, ": ", repaired.status().message()));
      continue;
    }
    *info->add_files() = folder.Describe(name, TraceFormatOf(format).manifest_format, pid);
  }
}

}  // namespace

// One folder a previous profd left without a manifest: its traces repaired, then summary.json
// and manifest.json as a finished capture has them (CloseCaptureFolder), saying what happened.
absl::StatusOr<v1::CaptureInfo> CaptureOrchestrator::RecoverFolder(const std::string& path) {
  CaptureFolder folder(path);
  v1::CaptureInfo info;
  const std::string request = ReadRequestRecord(folder);
  if (request.empty() || !ProtoFromJson(request, &info)) {
    info.Clear();  // no record of the request (or a cut one): what the folder itself says
    info.set_capture_id(std::filesystem::path(path).filename().string());
    info.set_hostname(options_.hostname);
  }
  const std::vector<LeftTrace> traces = ListLeftTraces(path);
  if (request.empty() && traces.empty()) {
    return absl::NotFoundError(absl::StrCat(path, " holds no capture profd knows"));
  }
  std::vector<std::string> lost;
  RepairLeftTraces(folder, traces, options_.gzip_level, &info, &lost);
  for (v1::ProcessCapture& p : *info.mutable_processes()) {
    if (CaptureSession::Terminal(p.state())) continue;
    p.set_state(v1::CAPTURE_STATE_FAILED);
    p.set_message(kKilledMessage);
    p.set_truncated(true);
  }
  info.set_phase(v1::CAPTURE_PHASE_FAILED);
  info.set_message(lost.empty() ? kKilledMessage
                                : absl::StrCat(kKilledMessage, "; ", absl::StrJoin(lost, "; ")));
  info.set_finished_unix_ns(absl::ToUnixNanos(Now()));
  if (info.files_size() == 0) {
    // Killed before any event was written: nothing to keep but the record (`profctl captures`).
    if (absl::Status s = folder.Remove(); !s.ok()) return s;
    return info;
  }
  info.set_location(path);
  // The report of what the repaired traces hold, each read back by its format's reader, in the
  // bounded memory of a capture's own analysis (a killed capture may be as large as any).
  std::vector<std::pair<std::string, TraceFormat>> written;
  for (const v1::TraceFile& f : info.files()) {
    const TraceFormatInfo* format = TraceFormatOfManifest(f.format());
    written.emplace_back(f.path(), format ? format->format : TraceFormatOfFile(f.path()).format);
  }
  absl::StatusOr<analysis::Report> report = AnalyzeWrittenTraces(written);
  if (!report.ok()) {
    LogWarning(kComponent, "capture %s: no report of its repaired traces: %s", info.capture_id(),
               report.status().message());
  }
  if (absl::Status s = CloseCaptureFolder(report, 0, options_, folder, &info); !s.ok()) return s;
  return info;
}

std::vector<std::string> CaptureOrchestrator::RecoverUnfinished() {
  std::vector<std::string> folders;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.capture_dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    if (std::filesystem::exists(entry.path() / CaptureFolder::kManifest, ec)) continue;
    folders.push_back(entry.path().string());
  }
  // Capture ids start with their UTC time: oldest first, as List keeps them.
  std::sort(folders.begin(), folders.end());
  std::vector<std::string> ids;
  for (const std::string& path : folders) {
    absl::StatusOr<v1::CaptureInfo> info = RecoverFolder(path);
    if (!info.ok()) {
      if (!absl::IsNotFound(info.status())) {
        LogError(kComponent, "unfinished capture %s: %s", path, info.status().message());
      }
      continue;
    }
    LogWarning(kComponent, "capture %s was left unfinished by the previous profd: %s",
               info->capture_id(),
               info->files_size() > 0 ? "its trace was repaired (truncated)" : "it had no events");
    if (options_.on_finished) options_.on_finished(*info);
    ids.push_back(info->capture_id());
    MutexLock lock(&mutex_);
    ++failed_;
    recovered_.push_back(*std::move(info));
    if (recovered_.size() > kKeepFinished) recovered_.erase(recovered_.begin());
  }
  // The analyses of the repaired traces are gone: so are their pages (ReleaseWorkingState).
  if (!folders.empty()) malloc_trim(0);
  return ids;
}

}  // namespace profd

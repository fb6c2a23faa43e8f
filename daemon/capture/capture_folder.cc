#include "daemon/capture/capture_folder.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "common/atomic_file.h"
#include "common/proto_json.h"

namespace profd {

absl::StatusOr<std::unique_ptr<TraceWriter>> CaptureFolder::CreateTrace(const TraceProcess& process,
                                                                        TraceFormat format,
                                                                        int gzip_level) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  const std::string name = TraceFileName(process.pid, format);
  auto written = std::make_unique<Written>();
  Written* digest = written.get();
  absl::StatusOr<std::unique_ptr<TraceWriter>> writer = TraceWriter::Create(
      format, PathOf(name), process, gzip_level, [digest](std::string_view bytes) {
        digest->sha256.Update(absl::string_view(bytes.data(), bytes.size()));
        digest->bytes += bytes.size();
      });
  if (writer.ok()) written_[name] = std::move(written);
  return writer;
}

v1::TraceFile CaptureFolder::Describe(const std::string& name, std::string_view format,
                                      uint32_t pid) {
  v1::TraceFile file;
  file.set_name(name);
  file.set_path(PathOf(name));
  file.set_format(std::string(format));
  file.set_pid(pid);
  if (auto it = written_.find(name); it != written_.end()) {
    file.set_bytes(it->second->bytes);
    file.set_sha256(it->second->sha256.HexDigest());
  } else {
    std::error_code ec;
    file.set_bytes(std::filesystem::file_size(file.path(), ec));
    file.set_sha256(Sha256OfFile(file.path()).value_or(""));
  }
  return file;
}

absl::Status CaptureFolder::WriteSummary(const analysis::Report& report) const {
  return analysis::WriteReportJson(report, PathOf("summary.json"));
}

absl::Status CaptureFolder::WriteSummary(const v1::CaptureSummary& summary) const {
  return WriteFileAtomically(PathOf("summary.json"), ProtoToJson(summary));
}

absl::Status CaptureFolder::WriteManifest(const v1::CaptureInfo& info) const {
  return WriteFileAtomically(PathOf(kManifest), ProtoToJson(info));
}

absl::Status CaptureFolder::MarkUnfinished(const v1::CaptureInfo& info) const {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", path_, ": ", ec.message()));
  return WriteFileAtomically(PathOf(kUnfinished), ProtoToJson(info));
}

void CaptureFolder::ClearUnfinished() const {
  std::error_code ec;
  std::filesystem::remove(PathOf(kUnfinished), ec);
}

absl::Status CaptureFolder::Remove() const {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", path_, ": ", ec.message()));
  return absl::OkStatus();
}

void CaptureFolder::RemoveIfEmpty() const {
  ClearUnfinished();
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // fails, as it should, when anything else is there
}

}  // namespace profd

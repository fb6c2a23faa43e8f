#include "daemon/trace/trace_format.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "analysis/trace_reader.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "daemon/trace/perfetto_trace_reader.h"
#include "daemon/trace/perfetto_trace_writer.h"
#include "daemon/trace/trace_repair.h"

namespace profd {
namespace {

template <typename Writer>
absl::StatusOr<std::unique_ptr<TraceWriter>> CreateWriter(const std::string& path,
                                                          const TraceProcess& process,
                                                          int gzip_level,
                                                          TraceFile::BytesObserver on_bytes) {
  absl::StatusOr<std::unique_ptr<Writer>> w =
      Writer::Create(path, process, gzip_level, std::move(on_bytes));
  if (!w.ok()) return w.status();
  return std::unique_ptr<TraceWriter>(std::move(*w));
}

absl::Status StreamJson(const std::string& path, analysis::Trace* tables,
                        analysis::TraceEventSink* sink) {
  return analysis::StreamTraceFile(path, tables, sink);
}

// Perfetto's packets carry no closing block: the packets that decompress whole are the trace.
absl::StatusOr<TraceRepair> RepairPerfetto(const std::string& path, const TraceProcess&,
                                           const std::string&, int gzip_level) {
  return RepairPerfettoTrace(path, gzip_level);
}

constexpr std::string_view kJsonSuffixes[] = {".json.gz", ".json"};
constexpr std::string_view kPerfettoSuffixes[] = {".pftrace.gz", ".perfetto-trace", ".pftrace"};

const TraceFormatInfo kFormats[] = {
    {TraceFormat::kChromeJson, "json", "Chrome JSON", ".json.gz", kJsonSuffixes, "chrome-json-gz",
     &CreateWriter<ChromeTraceWriter>, &StreamJson, &RepairTrace},
    {TraceFormat::kPerfetto, "perfetto", "Perfetto protobuf", ".pftrace.gz", kPerfettoSuffixes,
     "perfetto-pb-gz", &CreateWriter<PerfettoTraceWriter>, &StreamPerfettoTrace, &RepairPerfetto},
};

}  // namespace

std::span<const TraceFormatInfo> TraceFormats() { return kFormats; }

const TraceFormatInfo& TraceFormatOf(TraceFormat format) {
  for (const TraceFormatInfo& f : kFormats) {
    if (f.format == format) return f;
  }
  return kFormats[0];
}

const TraceFormatInfo* TraceFormatNamed(std::string_view name) {
  for (const TraceFormatInfo& f : kFormats) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string TraceFormatChoices() {
  std::string out;
  for (size_t i = 0; i < std::size(kFormats); ++i) {
    out += i == 0 ? "" : i + 1 == std::size(kFormats) ? " or " : ", ";
    out += kFormats[i].name;
  }
  return out;
}

const TraceFormatInfo* TraceFormatOfManifest(std::string_view manifest_format) {
  if (manifest_format == kKinetoTraceManifestFormat)
    return &TraceFormatOf(TraceFormat::kChromeJson);
  for (const TraceFormatInfo& f : kFormats) {
    if (f.manifest_format == manifest_format) return &f;
  }
  return nullptr;
}

const TraceFormatInfo* TraceFormatOfName(std::string_view file_name) {
  for (const TraceFormatInfo& f : kFormats) {
    for (std::string_view suffix : f.suffixes) {
      if (file_name.ends_with(suffix)) return &f;
    }
  }
  return nullptr;
}

const TraceFormatInfo& TraceFormatOfFile(const std::string& path) {
  return TraceFormatOf(IsPerfettoTraceFile(path) ? TraceFormat::kPerfetto
                                                 : TraceFormat::kChromeJson);
}

std::string TraceFileName(uint32_t pid, TraceFormat format) {
  return absl::StrCat("trace-", pid) + std::string(TraceFormatOf(format).capture_suffix);
}

bool ParseTraceFileName(std::string_view name, uint32_t* pid, TraceFormat* format) {
  constexpr std::string_view kPrefix = "trace-";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  for (const TraceFormatInfo& f : kFormats) {
    if (!name.ends_with(f.capture_suffix)) continue;
    const std::string_view digits = name.substr(0, name.size() - f.capture_suffix.size());
    const char* end = digits.data() + digits.size();
    auto [stop, error] = std::from_chars(digits.data(), end, *pid);
    if (!digits.empty() && error == std::errc() && stop == end) {
      *format = f.format;
      return true;
    }
  }
  return false;
}

}  // namespace profd

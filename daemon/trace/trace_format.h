// Every trace format profd writes and reads, each described once: its names (the flag's word, the
// suffixes of its files, the manifest's format), how a capture writes a process's events in it,
// how the analysis streams a written file back, and how recovery closes a file a kill cut short.
// The capture pipeline, recovery, `profctl report` (of a file, a folder or a capture id),
// `profctl capture --output` and `profctl import` all go through this table, so a third format
// is one more entry here (with its writer, reader and repair beside it) and no path reads only
// JSON by accident.
//
// Threads: the table is constant; each function touches only the files it is given.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/trace/trace_file.h"

namespace profd {
namespace analysis {
struct Trace;
class TraceEventSink;
}  // namespace analysis

class TraceWriter;
struct TraceProcess;
struct TraceRepair;

enum class TraceFormat {
  kChromeJson,  // trace-<pid>.json.gz: Chrome Trace Event JSON in Kineto's conventions
  kPerfetto,    // trace-<pid>.pftrace.gz: Perfetto TracePackets
};

struct TraceFormatInfo {
  TraceFormat format;
  std::string_view name;  // profd --trace_format, profctl capture --format: "json", "perfetto"
  std::string_view description;  // for messages: "Chrome JSON", "Perfetto protobuf"
  // The suffix of the file a capture writes per process (trace-<pid><suffix>), then every suffix a
  // file of this format is known by (the first one included), longest first.
  std::string_view capture_suffix;
  std::span<const std::string_view> suffixes;
  std::string_view manifest_format;  // TraceFile.format in manifest.json
  // Writes a process's events into path (created or truncated); gzip_level is GzipStream's.
  absl::StatusOr<std::unique_ptr<TraceWriter>> (*create_writer)(const std::string& path,
                                                                const TraceProcess& process,
                                                                int gzip_level,
                                                                TraceFile::BytesObserver on_bytes);
  // Streams a file of this format into the analysis's tables and sink.
  absl::Status (*stream)(const std::string& path, analysis::Trace* tables,
                         analysis::TraceEventSink* sink);
  // Makes a file this format's writer never finished readable again; why goes into it where the
  // format has a place for it.
  absl::StatusOr<TraceRepair> (*repair)(const std::string& path, const TraceProcess& process,
                                        const std::string& why, int gzip_level);
};

// Both formats, JSON first (the default).
std::span<const TraceFormatInfo> TraceFormats();
const TraceFormatInfo& TraceFormatOf(TraceFormat format);
// By the flag's word; nullptr for anything else.
const TraceFormatInfo* TraceFormatNamed(std::string_view name);
// The words TraceFormatNamed knows, for messages: "json or perfetto".
std::string TraceFormatChoices();
// By a manifest's TraceFile.format. Kineto's own trace ("kineto-json-gz", copied as Kineto wrote
// it) reads as JSON. nullptr for a format profd does not know.
const TraceFormatInfo* TraceFormatOfManifest(std::string_view manifest_format);
// By a file name's suffix; nullptr when it has none of them.
const TraceFormatInfo* TraceFormatOfName(std::string_view file_name);
// By what the file holds (IsPerfettoTraceFile: its name, else its first decompressed bytes), so a
// copy renamed by hand is still read by the right reader. JSON when it is nothing else.
const TraceFormatInfo& TraceFormatOfFile(const std::string& path);

// trace-<pid><suffix>, the name of a process's trace in a capture folder, and its parse.
std::string TraceFileName(uint32_t pid, TraceFormat format);
bool ParseTraceFileName(std::string_view name, uint32_t* pid, TraceFormat* format);

// The format a manifest names for Kineto's own trace, copied as Kineto wrote it.
inline constexpr std::string_view kKinetoTraceManifestFormat = "kineto-json-gz";

}  // namespace profd

#include "daemon/store/trace_import.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "analysis/analysis.h"
#include "analysis/trace_reader.h"
#include "common/atomic_file.h"
#include "common/sha256.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd::store {

namespace fs = std::filesystem;

namespace {

bool IsGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {};
  in.read(reinterpret_cast<char*>(magic), 2);
  return in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

absl::Status Gzip(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  gzFile out = gzopen(to.c_str(), "wb6");
  if (!in || out == nullptr) {
    if (out) gzclose(out);
    return absl::InternalError(absl::StrCat("cannot compress ", from, " into ", to));
  }
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize n = in.gcount();
    if (n > 0 && gzwrite(out, buffer.data(), static_cast<unsigned>(n)) != n) {
      gzclose(out);
      return absl::InternalError(absl::StrCat("cannot write ", to));
    }
  }
  if (gzclose(out) != Z_OK) return absl::InternalError(absl::StrCat("cannot write ", to));
  return absl::OkStatus();
}

// Reads the upload into `trace`; a file that is no trace is refused under the name the user gave.
absl::Status ReadImportedTrace(const ImportRequest& request, analysis::Trace* trace) {
  absl::Status read = analysis::ReadTraceFile(request.input_path, trace);
  if (read.ok()) return read;
  // The reader names the file it read: the upload's copy in the spool, which means nothing to
  // the user, who knows the file by the name they gave.
  absl::string_view why = read.message();
  absl::ConsumePrefix(&why, request.input_path);
  absl::ConsumePrefix(&why, ": ");
  return absl::InvalidArgumentError(
      absl::StrCat(request.original_name, " is not a Chrome trace JSON (plain or .gz): ", why,
                   why.empty() || why.back() == '.' ? "" : ".",
                   " profctl import takes profd traces and PyTorch profiler / Kineto traces"));
}

// The trace as the capture's folder keeps it: gzipped.
absl::Status StoreTraceFile(const std::string& input_path, const std::string& trace_path) {
  if (IsGzip(input_path)) {
    std::error_code ec;
    fs::copy_file(input_path, trace_path, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("cannot write ", trace_path, ": ", ec.message()));
    return absl::OkStatus();
  }
  return Gzip(input_path, trace_path);
}

// manifest.json, as a capture's, and the folder's files in result->described.
absl::Status WriteManifest(const ImportRequest& request, int64_t host_pid, int64_t now_ns,
                           int64_t started_ns, ImportResult* result) {
  rapidjson::StringBuffer text;
  rapidjson::Writer<rapidjson::StringBuffer> w(text);
  w.StartObject();
  w.Key("capture_id");
  w.String(request.capture_id.c_str());
  w.Key("hostname");
  w.String(request.hostname.c_str());
  w.Key("label");
  w.String(request.label.c_str());
  w.Key("source");
  w.String("import");
  w.Key("imported_from");
  w.String(request.original_name.c_str());
  w.Key("requested_unix_ns");
  w.Int64(now_ns);
  w.Key("started_unix_ns");
  w.Int64(started_ns);
  w.Key("events");
  w.Uint64(result->events);
  w.Key("processes");
  w.StartArray();
  if (host_pid >= 0) {
    w.StartObject();
    w.Key("pid");
    w.Int64(host_pid);
    w.EndObject();
  }
  w.EndArray();
  w.Key("files");
  w.StartArray();
  for (const std::string& name : {result->trace_file, std::string("summary.json")}) {
    std::string path = absl::StrCat(request.folder, "/", name);
    absl::StatusOr<std::string> sha = Sha256OfFile(path);
    if (!sha.ok()) return sha.status();
    std::error_code ec;
    v1::StoredFile* file = result->described.add_files();
    file->set_name(name);
    file->set_bytes(fs::file_size(path, ec));
    file->set_sha256(*sha);
    w.StartObject();
    w.Key("name");
    w.String(name.c_str());
    w.Key("bytes");
    w.Uint64(file->bytes());
    w.Key("sha256");
    w.String(sha->c_str());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return WriteFileAtomically(absl::StrCat(request.folder, "/manifest.json"), text.GetString());
}

}  // namespace

absl::StatusOr<ImportResult> BuildImportedCapture(const ImportRequest& request) {
  // One streaming read both checks the input and gives the bottleneck report, the same
  // summary.json a capture gets.
  analysis::Trace trace;
  if (absl::Status read = ReadImportedTrace(request, &trace); !read.ok()) return read;
  const analysis::Report report = analysis::Analyze(trace);
  const int64_t host_pid = trace.files.empty() ? -1 : trace.files[0].host_pid;

  ImportResult result;
  result.events = trace.files.empty() ? 0 : trace.files[0].events;
  result.kernels = report.kernel_count;
  result.trace_file = absl::StrCat("trace-", std::max<int64_t>(host_pid, 0), ".json.gz");
  const std::string trace_path = absl::StrCat(request.folder, "/", result.trace_file);
  if (absl::Status s = StoreTraceFile(request.input_path, trace_path); !s.ok()) return s;
  if (absl::Status s = analysis::WriteReportJson(report, request.folder + "/summary.json");
      !s.ok()) {
    return s;
  }

  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  const int64_t started_ns =
      trace.has_base_time && trace.base_time_ns > 0 ? trace.base_time_ns : now_ns;
  v1::StoredTrace& described = result.described;
  described.set_capture_id(request.capture_id);
  described.set_hostname(request.hostname);
  described.set_label(request.label);
  described.set_source("import");
  described.set_started_unix_ns(started_ns);
  if (absl::Status s = WriteManifest(request, host_pid, now_ns, started_ns, &result); !s.ok()) {
    return s;
  }
  return result;
}

}  // namespace profd::store

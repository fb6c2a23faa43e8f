// profctl list, show, get, import, spool: the captures in profd's trace store (local folder or
// S3) and in its spool, through the profd.v1.TraceStore service.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "analysis/format.h"
#include "analysis/text_table.h"
#include "client/commands.h"
#include "client/output_folder.h"
#include "common/file_name.h"
#include "common/printable.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "profd/v1/store.grpc.pb.h"
#include "rapidjson/document.h"

namespace profctl {

namespace analysis = profd::analysis;
namespace {

namespace fs = std::filesystem;

struct ListOptions {
  std::string hostname, pod, alert, since, fleet;
  uint32_t limit = 50;
};

struct GetOptions {
  std::string id;
  std::string out_dir;
};

struct ImportOptions {
  std::string file;
  std::string label;
};

// Streams can take long (big traces, a slow store): an hour, not --timeout.
grpc::ClientContext* WithStreamDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  return ctx;
}

std::string State(const profd::v1::StoredTrace& t) {
  switch (t.state()) {
    case profd::v1::TRACE_STATE_SPOOLED:
      return "spooled";
    case profd::v1::TRACE_STATE_WAITING_FOR_ROOM:
      return "not spooled";
    default:
      return "stored";
  }
}

bool ParseSince(const std::string& text, int64_t* unix_ns) {
  if (text.empty()) return true;
  absl::Duration ago;
  if (absl::ParseDuration(text, &ago)) {
    *unix_ns = absl::ToUnixNanos(absl::Now() - ago);
    return true;
  }
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    *unix_ns = absl::ToUnixNanos(t);
    return true;
  }
  return false;
}

int RunList(const GlobalOptions& g, const ListOptions& o) {
  profd::v1::ListTracesRequest request;
  request.set_hostname(o.hostname);
  request.set_pod(o.pod);
  request.set_alert(o.alert);
  request.set_fleet_id(o.fleet);
  request.set_limit(o.limit);
  int64_t since = 0;
  if (!ParseSince(o.since, &since)) {
    std::cerr << "profctl: --since " << o.since
              << ": expected a duration (30m, 1h, 48h) or an RFC 3339 time "
                 "(2026-11-29T16:00:00Z)\n";
    return kExitUsage;
  }
  request.set_since_unix_ns(since);
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::ListTracesResponse response;
  grpc::Status status = StoreStub(client)->ListTraces(WithDeadline(&ctx, g), request, &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  if (!response.store_error().empty()) {
    std::cerr << "profctl: the store " << profd::Printable(response.store_uri())
              << " could not be read, showing only traces waiting in profd's spool: "
              << profd::Printable(response.store_error()) << "\n";
  }
  if (response.traces().empty()) {
    std::cout << "No traces in " << profd::Printable(response.store_uri())
              << (o.hostname.empty() && o.pod.empty() && o.alert.empty() && o.since.empty() &&
                          o.fleet.empty()
                      ? ""
                      : " matching the filters")
              << ". Take one with `profctl capture`, or add one with `profctl import FILE`.\n";
    return kExitOk;
  }
  // The ALERT column only where an alert started one of the captures shown.
  const bool alerts = std::any_of(response.traces().begin(), response.traces().end(),
                                  [](const auto& t) { return !t.alert().empty(); });
  std::vector<std::string> header = {"CAPTURE", "HOST",  "PODS", "STARTED",
                                     "SIZE>",   "STATE", "LABEL"};
  if (alerts) header.push_back("ALERT");
  analysis::TextTable table(header);
  for (const auto& t : response.traces()) {
    std::vector<std::string> row = {t.capture_id(),
                                    t.hostname(),
                                    t.pods().empty() ? "-" : absl::StrJoin(t.pods(), ","),
                                    Ago(t.started_unix_ns()),
                                    analysis::FormatBytes(t.bytes()),
                                    State(t),
                                    t.label().empty() ? "-" : t.label()};
    if (alerts) row.push_back(t.alert().empty() ? "-" : t.alert());
    table.AddRow(row);
  }
  std::cout << table.Render("");
  return kExitOk;
}

// `profctl show`: the manifest and summary as fields and tables, in the units `profctl report`
// uses (analysis/format.h: 1.50 s, 12.4 µs, 3.2 MiB, 45.1%, 1,234) and times in UTC. The JSON
// stays available, whole, with --json.

// A member of a JSON object as a number: proto3 JSON writes 64-bit integers as strings, the
// report writes numbers; 0 when absent.
double Number(const rapidjson::Value& v, const char* name) {
  if (!v.IsObject()) return 0;
  auto it = v.FindMember(name);
  if (it == v.MemberEnd()) return 0;
  if (it->value.IsNumber()) return it->value.GetDouble();
  if (it->value.IsString()) return std::atof(it->value.GetString());
  return 0;
}

std::string Text(const rapidjson::Value& v, const char* name) {
  if (!v.IsObject()) return "";
  auto it = v.FindMember(name);
  return it != v.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

std::string Duration(double ns) { return analysis::FormatDuration(ns); }

// "2026-11-30 21:50:01 UTC (3m ago)"; "-" for 0.
std::string When(int64_t unix_ns) {
  if (unix_ns == 0) return "-";
  return absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", absl::FromUnixNanos(unix_ns),
                                       absl::UTCTimeZone()),
                      " (", Ago(unix_ns), ")");
}

// CAPTURE_PHASE_DONE -> done, CAPTURE_STATE_FAILED -> failed.
std::string EnumWord(std::string value, const std::string& prefix) {
  if (absl::StartsWith(value, prefix)) value = value.substr(prefix.size());
  return absl::AsciiStrToLower(value);
}

void PrintField(const std::string& name, const std::string& value) {
  if (value.empty()) return;
  std::cout << absl::StrFormat("%-10s %s\n", name, profd::Printable(value));
}

// The alert that started the capture (CaptureInfo.alert), if one did.
void PrintAlert(const rapidjson::Value& m) {
  auto it = m.FindMember("alert");
  if (it == m.MemberEnd() || !it->value.IsObject()) return;
  const rapidjson::Value& alert = it->value;
  const double starts = Number(alert, "starts_at_unix_ns");
  PrintField("alert", absl::StrCat(Text(alert, "name"), starts > 0 ? ", firing since " : "",
                                   starts > 0 ? When(static_cast<int64_t>(starts)) : ""));
  std::vector<std::string> labels;
  if (auto l = alert.FindMember("labels"); l != alert.MemberEnd() && l->value.IsObject()) {
    for (const auto& label : l->value.GetObject()) {
      if (label.value.IsString()) {
        labels.push_back(absl::StrCat(label.name.GetString(), "=", label.value.GetString()));
      }
    }
  }
  std::sort(labels.begin(), labels.end());
  PrintField("  labels", absl::StrJoin(labels, ", "));
  PrintField("  group", Text(alert, "group_key"));
  PrintField("  from", Text(alert, "generator_url"));
}

// The manifest: the capture's request, window and processes (captures: a CaptureInfo; imports:
// the fields trace_import.cc writes).
void PrintManifest(const rapidjson::Value& m) {
  const std::string phase = EnumWord(Text(m, "phase"), "CAPTURE_PHASE_");
  PrintField("phase", phase == "unspecified" ? "" : phase);
  PrintField("message", Text(m, "message"));
  PrintAlert(m);
  PrintField("requested", Number(m, "requested_unix_ns") > 0
                              ? When(static_cast<int64_t>(Number(m, "requested_unix_ns")))
                              : "");
  if (double ms = Number(m, "duration_ms"); ms > 0) PrintField("duration", Duration(ms * 1e6));
  const double started = Number(m, "started_unix_ns"), finished = Number(m, "finished_unix_ns");
  if (started > 0 && finished > started) {
    PrintField("ran", absl::StrCat(Duration(finished - started), ", until ",
                                   When(static_cast<int64_t>(finished))));
  }
  if (auto kinds = m.FindMember("kinds"); kinds != m.MemberEnd() && kinds->value.IsArray()) {
    std::vector<std::string> words;
    for (const auto& k : kinds->value.GetArray()) {
      if (k.IsString()) words.push_back(EnumWord(k.GetString(), "ACTIVITY_KIND_"));
    }
    PrintField("activities", absl::StrJoin(words, ", "));
  }
  if (m.HasMember("events")) {  // an import counts its events here
    const double events = Number(m, "events");
    PrintField("events", analysis::FormatCount(static_cast<uint64_t>(events)));
  }
  auto procs = m.FindMember("processes");
  if (procs == m.MemberEnd() || !procs->value.IsArray() || procs->value.Empty()) return;
  analysis::TextTable table({"PID>", "COMMAND", "POD", "EVENTS>", "DROPPED>", "STATE", "NOTE"});
  for (const auto& p : procs->value.GetArray()) {
    std::string state = EnumWord(Text(p, "state"), "CAPTURE_STATE_");
    if (state == "unspecified") state.clear();
    std::string note = Text(p, "message");
    if (p.IsObject() && p.HasMember("truncated") && p["truncated"].IsBool() &&
        p["truncated"].GetBool()) {
      note = note.empty() ? "cut at the event cap" : "cut at the event cap; " + note;
    }
    table.AddRow({absl::StrCat(static_cast<int64_t>(Number(p, "pid"))),
                  Text(p, "comm").empty() ? "-" : Text(p, "comm"),
                  Text(p, "pod_name").empty() ? "-" : Text(p, "pod_name"),
                  p.HasMember("events")
                      ? analysis::FormatCount(static_cast<uint64_t>(Number(p, "events")))
                      : "-",
                  analysis::FormatCount(static_cast<uint64_t>(Number(p, "dropped_records"))),
                  state.empty() ? "-" : state, note.empty() ? "-" : note});
  }
  std::cout << "\nPROCESSES\n" << table.Render();
}

// summary.json is the bottleneck report (analysis/report_json.cc), for captures and
// imports alike: its window, GPUs, top kernels and findings.
void PrintSummary(const rapidjson::Value& doc) {
  std::cout << "\nSUMMARY (profctl report ID for the whole report)\n"
            << "  " << analysis::FormatCount(static_cast<uint64_t>(Number(doc, "events")))
            << " events over " << Duration(Number(doc, "window_ns")) << ", "
            << analysis::FormatCount(static_cast<uint64_t>(Number(doc, "kernel_count")))
            << " kernels, kernel time " << Duration(Number(doc, "kernel_time_ns")) << "\n";
  if (auto gpus = doc.FindMember("gpus"); gpus != doc.MemberEnd() && gpus->value.IsArray()) {
    analysis::TextTable table({"PID>", "GPU>", "BUSY>", "KERNELS>"});
    for (const auto& gpu : gpus->value.GetArray()) {
      table.AddRow({absl::StrCat(static_cast<int64_t>(Number(gpu, "pid"))),
                    absl::StrCat(static_cast<int64_t>(Number(gpu, "device"))),
                    analysis::FormatPercent(Number(gpu, "busy_ratio")),
                    analysis::FormatCount(static_cast<uint64_t>(Number(gpu, "kernels")))});
    }
    if (!table.empty()) std::cout << "\nGPUS\n" << table.Render();
  }
  if (auto top = doc.FindMember("top_kernels"); top != doc.MemberEnd() && top->value.IsArray()) {
    analysis::TextTable table({"TOTAL>", "COUNT>", "AVG>", "MIN>", "MAX>", "KERNEL"});
    for (const auto& k : top->value.GetArray()) {
      table.AddRow({Duration(Number(k, "total_ns")),
                    analysis::FormatCount(static_cast<uint64_t>(Number(k, "instances"))),
                    Duration(Number(k, "avg_ns")), Duration(Number(k, "min_ns")),
                    Duration(Number(k, "max_ns")),
                    Text(k, "name").empty() ? "?" : Text(k, "name")});
    }
    if (!table.empty()) std::cout << "\nTOP KERNELS BY TOTAL TIME\n" << table.Render();
  }
  if (auto findings = doc.FindMember("findings");
      findings != doc.MemberEnd() && findings->value.IsArray() && !findings->value.Empty()) {
    std::cout << "\nFINDINGS\n";
    for (const auto& f : findings->value.GetArray()) {
      std::cout << "  [" << absl::AsciiStrToUpper(Text(f, "severity")) << "] "
                << profd::Printable(Text(f, "title")) << "\n";
    }
  }
}

int RunShow(const GlobalOptions& g, const std::string& id) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::ShowTraceRequest request;
  request.set_capture_id(id);
  profd::v1::ShowTraceResponse response;
  grpc::Status status = StoreStub(client)->ShowTrace(WithDeadline(&ctx, g), request, &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    // The manifest and summary as JSON objects, not strings (as stored: line separators escaped
    // here, whichever writer made them).
    std::cout << profd::EscapeJsonLineSeparators(absl::StrCat(
        "{\n\"trace\": ", profd::ProtoToJson(response.trace()),
        ",\n\"manifest\": ", response.manifest_json().empty() ? "null" : response.manifest_json(),
        ",\n\"summary\": ", response.summary_json().empty() ? "null" : response.summary_json(),
        "\n}\n"));
    return kExitOk;
  }
  const auto& t = response.trace();
  rapidjson::Document manifest;
  manifest.Parse(response.manifest_json().c_str());
  const bool have_manifest = !manifest.HasParseError() && manifest.IsObject();
  PrintField("capture", t.capture_id());
  PrintField("host", t.hostname());
  std::string source = t.source();
  if (have_manifest && !Text(manifest, "imported_from").empty()) {
    source = absl::StrCat(source, " of ", Text(manifest, "imported_from"));
  }
  PrintField("source", source);
  PrintField("label", t.label());
  if (!t.fleet_id().empty()) PrintField("fleet", t.fleet_id());
  PrintField("started", When(t.started_unix_ns()));
  PrintField("pods", absl::StrJoin(t.pods(), ", "));
  PrintField("state", State(t) + (t.upload_error().empty() ? ""
                                  : t.state() == profd::v1::TRACE_STATE_WAITING_FOR_ROOM
                                      ? " (the spool could not take it: " + t.upload_error() + ")"
                                      : " (last upload attempt: " + t.upload_error() + ")"));
  PrintField("location", t.location());
  if (have_manifest) {
    PrintManifest(manifest);
  } else if (!response.manifest_json().empty()) {
    std::cout << "(manifest.json is not JSON; profctl show --json or profctl get shows it)\n";
  }
  analysis::TextTable files({"FILE", "SIZE>", "SHA256"}, 70);
  for (const auto& f : t.files()) {
    files.AddRow({f.name(), analysis::FormatBytes(static_cast<double>(f.bytes())), f.sha256()});
  }
  std::cout << "\nFILES (" << analysis::FormatBytes(static_cast<double>(t.bytes())) << ")\n"
            << files.Render();
  if (!response.summary_json().empty()) {
    rapidjson::Document summary;
    summary.Parse(response.summary_json().c_str());
    if (!summary.HasParseError() && summary.IsObject()) PrintSummary(summary);
  }
  return kExitOk;
}

// sha256 per file name from the manifest's files[] (docs/TRACE_FORMAT.md).
std::map<std::string, std::string> ManifestChecksums(const std::string& text) {
  std::map<std::string, std::string> out;
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  if (doc.HasParseError() || !doc.IsObject()) return out;
  auto files = doc.FindMember("files");
  if (files == doc.MemberEnd() || !files->value.IsArray()) return out;
  for (const auto& f : files->value.GetArray()) {
    if (!f.IsObject()) continue;
    auto name = f.FindMember("name");
    auto sha = f.FindMember("sha256");
    if (name != f.MemberEnd() && sha != f.MemberEnd() && name->value.IsString() &&
        sha->value.IsString()) {
      out[name->value.GetString()] = sha->value.GetString();
    }
  }
  return out;
}

// A file name profd sent (read from a store anyone with its credentials can write) that is not
// one plain file name: said with the capture and the name, and nothing is written for it.
int RefuseName(const std::string& id, const absl::Status& why, const std::string& dir) {
  std::cerr << "profctl: capture " << id << ": the store names a file " << why.message()
            << ". Refusing it: a capture's files are plain names in one folder, so this entry was "
               "written by hand or the store was tampered with. Nothing was written outside "
            << dir << ".\n";
  return kExitError;
}

// A file of the capture as it arrived: its entry, and the SHA-256 and size of what was written.
struct ReceivedFile {
  profd::v1::StoredFile info;
  std::string sha256;
  uint64_t bytes = 0;
};

// `profctl get`'s download: GetTrace's chunks written into the output folder, each file under a
// temporary name until it is whole, hashed as it comes. On the caller's thread.
class TraceDownload {
 public:
  TraceDownload(const std::string& id, const std::string& dir, grpc::ClientContext* ctx)
      : id_(id), dir_(dir), ctx_(ctx) {}
  ~TraceDownload() {
    if (out_ >= 0) close(out_);  // a stream that ended inside a file
  }
  TraceDownload(const TraceDownload&) = delete;
  TraceDownload& operator=(const TraceDownload&) = delete;

  // kExitOk to read on; else the exit code, said and the download abandoned.
  int Take(const profd::v1::TraceChunk& chunk) {
    if (chunk.has_trace()) {
      trace_ = chunk.trace();
      // Every name is checked before anything is written.
      for (const profd::v1::StoredFile& f : trace_.files()) {
        if (absl::Status s = profd::ValidatePlainFileName(f.name()); !s.ok()) {
          return Abandon(RefuseName(id_, s, dir_));
        }
      }
    }
    if (chunk.has_file()) {
      if (int rc = StartFile(chunk.file()); rc != kExitOk) return rc;
    }
    if (received_.empty() || !hash_) return kExitOk;
    return WriteData(chunk);
  }

  // On any way out before the end: nothing half-written stays looking like a download.
  int Abandon(int rc) {
    ctx_->TryCancel();
    if (out_ >= 0) close(out_);
    out_ = -1;
    if (folder_ && !received_.empty() && hash_) folder_->RemovePart(received_.back().info.name());
    return rc;
  }

  const profd::v1::StoredTrace& trace() const { return trace_; }
  const std::vector<ReceivedFile>& received() const { return received_; }
  // nullptr until the first file arrived.
  OutputFolder* folder() { return folder_ ? &*folder_ : nullptr; }

 private:
  int StartFile(const profd::v1::StoredFile& file) {
    const std::string& name = file.name();
    if (absl::Status s = profd::ValidatePlainFileName(name); !s.ok()) {
      return Abandon(RefuseName(id_, s, dir_));
    }
    if (std::none_of(trace_.files().begin(), trace_.files().end(),
                     [&](const profd::v1::StoredFile& f) { return f.name() == name; })) {
      std::cerr << "profctl: capture " << id_ << ": profd sent " << name
                << ", a file the capture does not list; refusing it\n";
      return Abandon(kExitError);
    }
    if (!folder_) {
      absl::StatusOr<OutputFolder> opened = OutputFolder::Open(dir_, /*create=*/true);
      if (!opened.ok()) {
        std::cerr << "profctl: " << opened.status().message() << "\n";
        return Abandon(kExitError);
      }
      folder_ = *std::move(opened);
    }
    if (out_ >= 0) close(out_);
    absl::StatusOr<int> fd = folder_->CreatePart(name);
    if (!fd.ok()) {
      std::cerr << "profctl: " << fd.status().message() << "\n";
      out_ = -1;
      return Abandon(kExitError);
    }
    out_ = *fd;
    received_.push_back({file, "", 0});
    hash_ = std::make_unique<profd::Sha256>();
    return kExitOk;
  }

  int WriteData(const profd::v1::TraceChunk& chunk) {
    if (absl::Status w =
            WriteAll(out_, chunk.data(), folder_->PathOf(received_.back().info.name()));
        !w.ok()) {
      std::cerr << "profctl: " << w.message() << "\n";
      return Abandon(kExitError);
    }
    hash_->Update(chunk.data());
    received_.back().bytes += chunk.data().size();
    return chunk.end_of_file() ? FinishFile() : kExitOk;
  }

  int FinishFile() {
    const std::string& name = received_.back().info.name();
    if (close(out_) != 0) {
      out_ = -1;
      std::cerr << "profctl: cannot write " << folder_->PathOf(name) << ": " << std::strerror(errno)
                << "\n";
      return Abandon(kExitError);
    }
    out_ = -1;
    received_.back().sha256 = hash_->HexDigest();
    hash_.reset();
    if (absl::Status c = folder_->Commit(name); !c.ok()) {
      std::cerr << "profctl: " << c.message() << "\n";
      return Abandon(kExitError);
    }
    return kExitOk;
  }

  const std::string id_;
  const std::string dir_;
  grpc::ClientContext* const ctx_;
  // Opened when the first file arrives, not before: a capture that is not there leaves nothing.
  // Every file is then created in it by name (OutputFolder): no name leaves it, no link in it is
  // followed.
  std::optional<OutputFolder> folder_;
  profd::v1::StoredTrace trace_;
  std::vector<ReceivedFile> received_;
  int out_ = -1;                         // the file being written
  std::unique_ptr<profd::Sha256> hash_;  // of the file being written; null between files
};

// Each file must match the manifest's checksum and the one the store recorded; one that does not
// is said and removed. Returns how many did not.
int RemoveMismatchedFiles(const std::string& id, const std::string& dir,
                          const std::map<std::string, std::string>& manifest,
                          const std::vector<ReceivedFile>& received, OutputFolder* folder) {
  int bad = 0;
  for (const ReceivedFile& r : received) {
    std::vector<std::string> expected;
    if (auto it = manifest.find(r.info.name()); it != manifest.end())
      expected.push_back(it->second);
    if (!r.info.sha256().empty()) expected.push_back(r.info.sha256());
    for (const std::string& want : expected) {
      if (want != r.sha256) {
        std::cerr << "profctl: checksum mismatch for " << r.info.name() << ": expected sha256 "
                  << want << ", got " << r.sha256 << " (" << r.bytes
                  << " bytes). The copy in the store may be damaged; retry, or compare with "
                     "`profctl show "
                  << id << "`. It was removed from " << dir << ".\n";
        // No file that failed its check stays in the output folder to be mistaken for the trace.
        folder->Remove(r.info.name());
        ++bad;
        break;
      }
    }
  }
  return bad;
}

void PrintDownloaded(const std::string& id, const std::string& dir,
                     const std::vector<ReceivedFile>& received, bool against_manifest) {
  uint64_t total = 0;
  for (const ReceivedFile& r : received) total += r.bytes;
  std::cout << "capture " << id << ": " << received.size() << " files, "
            << analysis::FormatBytes(total) << " in " << dir << " (checksums verified"
            << (against_manifest ? " against the manifest" : " against the store's record")
            << ")\n";
  for (const ReceivedFile& r : received) {
    std::cout << "  " << (fs::path(dir) / r.info.name()).string() << "\n";
  }
}

int RunGet(const GlobalOptions& g, const GetOptions& o) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::GetTraceRequest request;
  request.set_capture_id(o.id);
  const std::string dir = o.out_dir.empty() ? o.id : o.out_dir;
  TraceDownload download(o.id, dir, &ctx);
  auto reader = StoreStub(client)->GetTrace(WithStreamDeadline(&ctx), request);
  profd::v1::TraceChunk chunk;
  while (reader->Read(&chunk)) {
    if (int rc = download.Take(chunk); rc != kExitOk) return rc;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    // A file cut off mid-stream is not left behind looking like a download.
    download.Abandon(kExitError);
    return Fail(client, status);
  }

  OutputFolder* folder = download.folder();
  const std::map<std::string, std::string> manifest =
      folder ? ManifestChecksums(folder->ReadSmall("manifest.json"))
             : std::map<std::string, std::string>{};
  if (RemoveMismatchedFiles(o.id, dir, manifest, download.received(), folder) > 0) {
    return kExitError;
  }
  if (g.json) {
    PrintJson(download.trace());
    return kExitOk;
  }
  PrintDownloaded(o.id, dir, download.received(), !manifest.empty());
  return kExitOk;
}

int RunImport(const GlobalOptions& g, const ImportOptions& o) {
  std::error_code exists_error;
  if (!fs::exists(o.file, exists_error)) {
    std::cerr << "profctl: no trace file " << o.file << "\n";
    return kExitNotFound;  // as `profctl report` says it
  }
  if (!fs::is_regular_file(o.file, exists_error)) {
    std::cerr << "profctl: " << o.file
              << " is not a trace file (a folder or a device): give a .json or .json.gz file\n";
    return kExitUsage;
  }
  std::ifstream in(o.file, std::ios::binary);
  if (!in) {
    std::cerr << "profctl: cannot read " << o.file << ": " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  uint64_t size = fs::file_size(o.file, ec);
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::ImportTraceResponse response;
  auto writer = StoreStub(client)->ImportTrace(WithStreamDeadline(&ctx), &response);
  profd::v1::ImportTraceChunk chunk;
  chunk.mutable_header()->set_file_name(fs::path(o.file).filename().string());
  chunk.mutable_header()->set_label(o.label);
  chunk.mutable_header()->set_bytes(size);
  bool open = writer->Write(chunk);
  std::string buffer(1 << 20, '\0');
  while (open && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() <= 0) break;
    chunk.set_data(buffer.data(), static_cast<size_t>(in.gcount()));
    open = writer->Write(chunk);
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    // Said about the file the user gave (profd only knows its base name).
    std::cerr << "profctl: cannot import " << o.file << ": " << client.Explain(status) << "\n";
    return client.ExitCode(status);
  }
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  const auto& t = response.trace();
  std::cout << "imported " << o.file << " as capture " << t.capture_id() << " ("
            << analysis::FormatCount(response.events()) << " events, "
            << analysis::FormatCount(response.kernels()) << " kernels)\n"
            << "  location: " << t.location()
            << (t.state() == profd::v1::TRACE_STATE_SPOOLED ? " (uploading in the background)" : "")
            << "\n";
  return kExitOk;
}

int RunSpool(const GlobalOptions& g) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::SpoolStatus response;
  grpc::Status status = StoreStub(client)->GetSpoolStatus(
      WithDeadline(&ctx, g), profd::v1::GetSpoolStatusRequest(), &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  std::cout << "spool    " << response.spool_dir() << ": "
            << analysis::FormatBytes(response.bytes()) << " of "
            << analysis::FormatBytes(response.capacity_bytes()) << "\n"
            << "store    " << response.store_uri() << "\n"
            << "pending  " << response.pending() << " waiting for upload, " << response.reserved()
            << " captures being written\n"
            << "uploaded " << response.uploaded_total() << ", failed attempts "
            << response.upload_failures_total() << ", captures refused (spool full) "
            << response.refused_total() << "\n";
  if (!response.last_error().empty()) {
    std::cout << "last upload error: " << response.last_error() << "\n";
  }
  if (response.waiting_for_room() > 0 || response.write_failures_total() > 0) {
    std::cout << "not spooled " << response.waiting_for_room()
              << " finished captures the spool could not take yet (kept in their capture "
                 "folder, retried), failed attempts "
              << response.write_failures_total() << "\n";
  }
  for (const profd::v1::StoredTrace& t : response.waiting()) {
    std::cout << "  " << t.capture_id() << " in " << t.location() << ": " << t.upload_error()
              << "\n";
  }
  if (!response.last_write_error().empty() && response.waiting().empty()) {
    std::cout << "last spool write error: " << response.last_write_error() << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddStoreCommands(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto list_options = std::make_shared<ListOptions>();
  CLI::App* list = app.add_subcommand("list", "List stored traces, newest first");
  list->add_option("--hostname", list_options->hostname, "Only traces of this node");
  list->add_option("--pod", list_options->pod, "Only traces of this pod (name or namespace/pod)");
  list->add_option("--alert", list_options->alert,
                   "Only captures this alert started (its alertname, e.g. "
                   "ProfdKernelLaunchRateCollapsed)");
  list->add_option("--fleet", list_options->fleet,
                   "Only the nodes' captures of this fleet capture (profctl capture -l/"
                   "--deployment/--job)");
  list->add_option("--since", list_options->since,
                   "Only traces newer than this: a duration back (1h, 30m) or an RFC 3339 time");
  list->add_option("--limit", list_options->limit, "At most this many (default 50)");
  list->callback([&g, rc, list_options] { *rc = RunList(g, *list_options); });

  auto show_id = std::make_shared<std::string>();
  CLI::App* show = app.add_subcommand("show", "Show a stored trace's manifest and summary");
  show->add_option("id", *show_id, "Capture id (from profctl list)")->required();
  show->callback([&g, rc, show_id] { *rc = RunShow(g, *show_id); });

  auto get_options = std::make_shared<GetOptions>();
  CLI::App* get = app.add_subcommand("get", "Download a stored trace and verify its checksums");
  get->add_option("id", get_options->id, "Capture id (from profctl list)")->required();
  get->add_option("-o,--output", get_options->out_dir, "Folder to write into (default ./<id>)");
  get->callback([&g, rc, get_options] { *rc = RunGet(g, *get_options); });

  auto import_options = std::make_shared<ImportOptions>();
  CLI::App* import = app.add_subcommand(
      "import", "Store a trace file (profd's, or PyTorch profiler/Kineto JSON, plain or .gz)");
  import->add_option("file", import_options->file, "Trace file")->required();
  import->add_option("--label", import_options->label, "Free text kept in the manifest");
  import->callback([&g, rc, import_options] { *rc = RunImport(g, *import_options);
});

app.add_subcommand("spool", "Show what waits in profd's spool for upload, and why")
    ->callback([&g, rc] { *rc = RunSpool(g); });
}  // namespace profctl

}  // namespace profctl

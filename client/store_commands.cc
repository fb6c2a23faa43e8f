// profctl list, show, get, import, spool: the captures in profd's trace store (local folder or
// S3) and in its spool, through the profd.v1.TraceStore service.
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "daemon/analysis/format.h"
#include "daemon/analysis/text_table.h"
#include "daemon/common/proto_json.h"
#include "daemon/common/sha256.h"
#include "profd/v1/store.grpc.pb.h"
#include "rapidjson/document.h"

namespace profctl {

namespace analysis = profd::analysis;
namespace {

namespace fs = std::filesystem;

struct ListOptions {
  std::string hostname, pod, since;
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
  return t.state() == profd::v1::TRACE_STATE_SPOOLED ? "spooled" : "stored";
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
    std::cerr << "profctl: the store " << response.store_uri()
              << " could not be read, showing only traces waiting in profd's spool: "
              << response.store_error() << "\n";
  }
  if (response.traces().empty()) {
    std::cout << "No traces in " << response.store_uri()
              << (o.hostname.empty() && o.pod.empty() && o.since.empty() ? ""
                                                                         : " matching the filters")
              << ". Take one with `profctl capture`, or add one with `profctl import FILE`.\n";
    return kExitOk;
  }
  analysis::TextTable table({"CAPTURE", "HOST", "PODS", "STARTED", "SIZE>", "STATE", "LABEL"});
  for (const auto& t : response.traces()) {
    table.AddRow({t.capture_id(), t.hostname(),
                  t.pods().empty() ? "-" : absl::StrJoin(t.pods(), ","), Ago(t.started_unix_ns()),
                  analysis::FormatBytes(t.bytes()), State(t), t.label().empty() ? "-" : t.label()});
  }
  std::cout << table.Render("");
  return kExitOk;
}

// summary.json is the bottleneck report (daemon/analysis/report_json.cc), for captures and
// imports alike: its header, GPUs, top kernels and findings.
void PrintSummary(const std::string& summary_json) {
  rapidjson::Document doc;
  doc.Parse(summary_json.c_str());
  if (doc.HasParseError() || !doc.IsObject()) {
    std::cout << summary_json << "\n";
    return;
  }
  auto u64 = [](const rapidjson::Value& v, const char* name) -> double {
    auto it = v.FindMember(name);
    if (it == v.MemberEnd()) return 0;
    if (it->value.IsNumber()) return it->value.GetDouble();
    if (it->value.IsString()) return std::atof(it->value.GetString());  // proto3 JSON int64
    return 0;
  };
  std::cout << "summary: " << static_cast<uint64_t>(u64(doc, "events")) << " events over "
            << absl::FormatDuration(absl::Nanoseconds(u64(doc, "window_ns"))) << "\n";
  if (auto gpus = doc.FindMember("gpus"); gpus != doc.MemberEnd() && gpus->value.IsArray()) {
    analysis::TextTable table({"GPU>", "BUSY>", "KERNELS>"});
    for (const auto& gpu : gpus->value.GetArray()) {
      table.AddRow({absl::StrCat(static_cast<int>(u64(gpu, "device"))),
                    absl::StrFormat("%.1f%%", 100 * u64(gpu, "busy_ratio")),
                    absl::StrCat(static_cast<uint64_t>(u64(gpu, "kernels")))});
    }
    if (!table.empty()) std::cout << table.Render("");
  }
  if (auto top = doc.FindMember("top_kernels"); top != doc.MemberEnd() && top->value.IsArray()) {
    analysis::TextTable table({"KERNEL", "COUNT>", "TOTAL>", "AVG>", "MIN>", "MAX>"});
    auto dur = [](double ns) { return absl::FormatDuration(absl::Nanoseconds(ns)); };
    for (const auto& k : top->value.GetArray()) {
      auto name = k.FindMember("name");
      table.AddRow({name != k.MemberEnd() && name->value.IsString() ? name->value.GetString() : "?",
                    absl::StrCat(static_cast<uint64_t>(u64(k, "instances"))),
                    dur(u64(k, "total_ns")), dur(u64(k, "avg_ns")), dur(u64(k, "min_ns")),
                    dur(u64(k, "max_ns"))});
    }
    if (!table.empty()) std::cout << "top kernels by total time:\n" << table.Render("");
  }
  if (auto findings = doc.FindMember("findings");
      findings != doc.MemberEnd() && findings->value.IsArray()) {
    for (const auto& f : findings->value.GetArray()) {
      auto title = f.FindMember("title");
      if (title != f.MemberEnd() && title->value.IsString()) {
        std::cout << "finding: " << title->value.GetString() << "\n";
      }
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
    // The manifest and summary as JSON objects, not strings.
    std::cout << "{\n\"trace\": " << profd::ProtoToJson(response.trace()) << ",\n\"manifest\": "
              << (response.manifest_json().empty() ? "null" : response.manifest_json())
              << ",\n\"summary\": "
              << (response.summary_json().empty() ? "null" : response.summary_json()) << "\n}\n";
    return kExitOk;
  }
  const auto& t = response.trace();
  std::cout << "capture  " << t.capture_id() << "\n"
            << "host     " << t.hostname() << "\n"
            << "started  " << absl::FormatTime(absl::FromUnixNanos(t.started_unix_ns())) << " ("
            << Ago(t.started_unix_ns()) << ")\n"
            << "source   " << t.source() << (t.label().empty() ? "" : ", label " + t.label())
            << "\n";
  if (!t.pods().empty()) std::cout << "pods     " << absl::StrJoin(t.pods(), ", ") << "\n";
  std::cout << "state    " << State(t);
  if (!t.upload_error().empty()) std::cout << " (last upload attempt: " << t.upload_error() << ")";
  std::cout << "\nlocation " << t.location() << "\n";
  analysis::TextTable files({"FILE", "SIZE>", "SHA256"}, 70);
  for (const auto& f : t.files())
    files.AddRow({f.name(), analysis::FormatBytes(f.bytes()), f.sha256()});
  std::cout << files.Render("") << "manifest:\n" << response.manifest_json() << "\n";
  if (!response.summary_json().empty()) PrintSummary(response.summary_json());
  return kExitOk;
}

// sha256 per file name from the manifest's files[] (docs/TRACE_FORMAT.md).
std::map<std::string, std::string> ManifestChecksums(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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

int RunGet(const GlobalOptions& g, const GetOptions& o) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::GetTraceRequest request;
  request.set_capture_id(o.id);
  const std::string dir = o.out_dir.empty() ? o.id : o.out_dir;
  // Made when the first file arrives, not before: a capture that is not there leaves nothing.
  bool have_dir = false;
  auto make_dir = [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) std::cerr << "profctl: cannot create " << dir << ": " << ec.message() << "\n";
    have_dir = !ec;
    return have_dir;
  };
  auto reader = StoreStub(client)->GetTrace(WithStreamDeadline(&ctx), request);
  profd::v1::TraceChunk chunk;
  profd::v1::StoredTrace trace;
  struct Received {
    profd::v1::StoredFile info;
    std::string sha256;
    uint64_t bytes = 0;
  };
  std::vector<Received> received;
  std::ofstream out;
  std::unique_ptr<profd::Sha256> hash;
  std::string part_path;
  while (reader->Read(&chunk)) {
    if (chunk.has_trace()) trace = chunk.trace();
    if (chunk.has_file()) {
      if (!have_dir && !make_dir()) {
        ctx.TryCancel();
        return kExitError;
      }
      received.push_back({chunk.file(), "", 0});
      part_path = (fs::path(dir) / ("." + chunk.file().name() + ".part")).string();
      out = std::ofstream(part_path, std::ios::binary | std::ios::trunc);
      hash = std::make_unique<profd::Sha256>();
    }
    if (received.empty() || !hash) continue;
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    hash->Update(chunk.data());
    received.back().bytes += chunk.data().size();
    if (chunk.end_of_file()) {
      out.close();
      if (!out) {
        std::cerr << "profctl: cannot write " << part_path << "\n";
        return kExitError;
      }
      received.back().sha256 = hash->HexDigest();
      hash.reset();
      std::error_code ec;
      fs::rename(part_path, fs::path(dir) / received.back().info.name(), ec);
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    // A file cut off mid-stream is not left behind looking like a download.
    std::error_code ec;
    if (!part_path.empty()) fs::remove(part_path, ec);
    return Fail(client, status);
  }

  // Each file must match the manifest's checksum and the one the store recorded.
  std::map<std::string, std::string> manifest =
      ManifestChecksums((fs::path(dir) / "manifest.json").string());
  int bad = 0;
  uint64_t total = 0;
  for (const Received& r : received) {
    total += r.bytes;
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
                  << o.id << "`. It was removed from " << dir << ".\n";
        // No file that failed its check stays in the output folder to be mistaken for the trace.
        std::error_code ec;
        fs::remove(fs::path(dir) / r.info.name(), ec);
        ++bad;
        break;
      }
    }
  }
  if (bad > 0) return kExitError;
  if (g.json) {
    PrintJson(trace);
    return kExitOk;
  }
  std::cout << "capture " << o.id << ": " << received.size() << " files, "
            << analysis::FormatBytes(total) << " in " << dir << " (checksums verified"
            << (manifest.empty() ? " against the store's record" : " against the manifest")
            << ")\n";
  for (const Received& r : received) {
    std::cout << "  " << (fs::path(dir) / r.info.name()).string() << "\n";
  }
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
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  const auto& t = response.trace();
  std::cout << "imported " << o.file << " as capture " << t.capture_id() << " ("
            << response.events() << " events, " << response.kernels() << " kernels)\n"
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
  return kExitOk;
}

}  // namespace

void AddStoreCommands(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto list_options = std::make_shared<ListOptions>();
  CLI::App* list = app.add_subcommand("list", "List stored traces, newest first");
  list->add_option("--hostname", list_options->hostname, "Only traces of this node");
  list->add_option("--pod", list_options->pod, "Only traces of this pod (name or namespace/pod)");
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

// profctl report, profctl diff: the bottleneck analysis of a trace, on this machine, with no
// profd needed for a file or a capture folder. A capture id is resolved through profd: a recent
// capture's traces are read where profd wrote them when they are on this machine; any other
// capture its store holds (profctl list) is downloaded to a temporary folder and checked.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/analysis.h"
#include "analysis/cross_rank.h"
#include "analysis/format.h"
#include "analysis/render.h"
#include "analysis/report_diff.h"
#include "analysis/text_table.h"
#include "client/commands.h"
#include "client/output_folder.h"
#include "common/capture_id.h"
#include "common/file_name.h"
#include "common/printable.h"
#include "common/sha256.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/trace_format.h"
#include "profd/v1/store.grpc.pb.h"
#include "rapidjson/document.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"

namespace profctl {
namespace {

namespace analysis = profd::analysis;
namespace fs = std::filesystem;
using profd::EscapeJsonLineSeparators;
using profd::Printable;

// A fleet capture has one capture per node: its report reads at most this many.
constexpr uint32_t kMaxFleetCaptures = 10000;

// The two files of a capture folder that are not traces (docs/TRACE_FORMAT.md).
constexpr char kManifestName[] = "manifest.json";
constexpr char kSummaryName[] = "summary.json";

struct ReportFlags {
  std::vector<std::string> inputs;
  bool json = false;
  std::string html;
  int top = 20;
};

struct DiffFlags {
  std::string a, b;
  bool json = false;
  int rows = 25;
};

// The file is there but this user may not read it (or get to its folder): profd keeps traces
// for root and --access_group only.
bool ReadDenied(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno == EACCES;
  return access(path.c_str(), R_OK) != 0 && errno == EACCES;
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsFolder(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Capture ids look like 20260101T120000Z-host-1a2b3c4d: no slash, no trace file suffix.
bool LooksLikeCaptureId(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && !absl::EndsWith(s, ".gz") &&
         profd::TraceFormatOfName(s) == nullptr;
}

// A process's trace in a capture folder (docs/TRACE_FORMAT.md): trace-<pid>.json.gz or
// trace-<pid>.pftrace.gz, or a trace file another tool left there (rank0.json,
// *.pt.trace.json.gz). Not manifest.json or summary.json, which are no traces.
bool IsTraceName(const std::string& name) {
  if (name == kManifestName || name == kSummaryName || absl::StartsWith(name, ".")) return false;
  return profd::TraceFormatOfName(name) != nullptr;
}

// Folders profctl made for traces it fetched from the store; removed when the report is done.
class FetchedTraces {
 public:
  FetchedTraces() = default;
  FetchedTraces(const FetchedTraces&) = delete;
  FetchedTraces& operator=(const FetchedTraces&) = delete;
  ~FetchedTraces() {
    for (const std::string& dir : dirs_) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
  // A new private folder under $TMPDIR (else /tmp); "" with *error set when none can be made.
  std::string NewFolder(std::string* error) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/profctl-report-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      *error = absl::StrCat("cannot make a folder for the traces in ", pattern, ": ",
                            std::strerror(errno), " (set TMPDIR to a writable folder)");
      return "";
    }
    dirs_.push_back(pattern);
    return pattern;
  }
  // How a fetched file is named in the report: <capture id>/<file>, not its temporary copy.
  void Name(const std::string& path, std::string shown) { shown_[path] = std::move(shown); }
  std::string Shown(const std::string& path) const {
    auto it = shown_.find(path);
    return it == shown_.end() ? path : it->second;
  }
  // Whose a fetched trace is, as the rows across ranks name it: namespace/pod@host.
  void SetWho(const std::string& path, std::string who) { who_[path] = std::move(who); }
  std::string Who(const std::string& path) const {
    auto it = who_.find(path);
    return it == who_.end() ? "" : it->second;
  }

 private:
  std::vector<std::string> dirs_;
  std::map<std::string, std::string> shown_;
  std::map<std::string, std::string> who_;
};

// The trace files of a capture folder, sorted; kExitNotFound and why when it holds none.
int FolderTraces(const std::string& folder, std::vector<std::string>* out) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    if (IsTraceName(entry.path().filename().string())) found.push_back(entry.path().string());
  }
  if (ec) {
    std::cerr << "profctl: cannot read the folder " << folder << ": " << ec.message() << "\n";
    return kExitError;
  }
  if (found.empty()) {
    std::cerr << "profctl: the folder " << folder
              << " holds no trace (.json, .json.gz or .pftrace.gz besides manifest.json and "
                 "summary.json). Give a capture folder (a trace-<pid>.json.gz or "
                 "trace-<pid>.pftrace.gz per process) or trace files.\n";
    return kExitNotFound;
  }
  std::sort(found.begin(), found.end());
  out->insert(out->end(), found.begin(), found.end());
  return kExitOk;
}

// Each trace file of a stored capture by the pod it is of, from its manifest (a CaptureInfo:
// files name their pid, processes their pod): "namespace/pod@host"; a process outside a pod has
// none (its trace's name says it).
std::map<std::string, std::string> TraceOwners(const profd::v1::ShowTraceResponse& shown) {
  std::map<std::string, std::string> out;
  rapidjson::Document manifest;
  manifest.Parse(shown.manifest_json().c_str());
  if (manifest.HasParseError() || !manifest.IsObject()) return out;
  auto str = [](const rapidjson::Value& v, const char* name) -> std::string {
    auto it = v.FindMember(name);
    return it != v.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
  };
  auto pid_of = [](const rapidjson::Value& v) -> int64_t {
    auto it = v.FindMember("pid");
    return it != v.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64() : -1;
  };
  std::map<int64_t, std::string> pods;
  if (auto p = manifest.FindMember("processes"); p != manifest.MemberEnd() && p->value.IsArray()) {
    for (const auto& proc : p->value.GetArray()) {
      if (!proc.IsObject() || str(proc, "pod_name").empty()) continue;
      const std::string ns = str(proc, "pod_namespace");
      pods[pid_of(proc)] = ns.empty() ? str(proc, "pod_name") : ns + "/" + str(proc, "pod_name");
    }
  }
  const std::string host = shown.trace().hostname();
  if (auto f = manifest.FindMember("files"); f != manifest.MemberEnd() && f->value.IsArray()) {
    for (const auto& file : f->value.GetArray()) {
      if (!file.IsObject()) continue;
      auto pod = pods.find(pid_of(file));
      if (pod != pods.end()) out[str(file, "name")] = absl::StrCat(pod->second, "@", host);
    }
  }
  return out;
}

int FetchStoredTraces(const GlobalOptions& g, ProfdClient& client, const std::string& id,
                      FetchedTraces* fetched, std::vector<std::string>* out);

// The traces of every node's capture of a fleet capture (profctl capture -l / --deployment /
// --job), from the shared store. On failure prints why and returns the exit code.
int FetchFleetTraces(const GlobalOptions& g, ProfdClient& client, const std::string& fleet_id,
                     absl::Time at, FetchedTraces* fetched, std::vector<std::string>* out) {
  profd::v1::ListTracesRequest request;
  request.set_fleet_id(fleet_id);
  // Every node's capture started after the fleet id was made, by clocks within a minute of it.
  request.set_since_unix_ns(absl::ToUnixNanos(at - absl::Minutes(1)));
  request.set_limit(kMaxFleetCaptures);
  profd::v1::ListTracesResponse list;
  grpc::ClientContext ctx;
  grpc::Status status = StoreStub(client)->ListTraces(WithDeadline(&ctx, g), request, &list);
  if (!status.ok()) return Fail(client, status);
  if (list.traces_size() == 0) {
    std::cerr << "profctl: no capture of fleet capture " << fleet_id << " in the store "
              << Printable(list.store_uri())
              << (list.store_error().empty() ? "" : " (" + Printable(list.store_error()) + ")")
              << ": the nodes' captures reach it once uploaded (`profctl spool` on a node says "
                 "what waits), and only a store the nodes share holds them all\n";
    return kExitNotFound;
  }
  std::vector<profd::v1::StoredTrace> traces(list.traces().begin(), list.traces().end());
  std::sort(traces.begin(), traces.end(),
            [](const auto& a, const auto& b) { return a.hostname() < b.hostname(); });
  // One node's capture that cannot be read (damaged, removed meanwhile) leaves that node out,
  // said as such; the report goes on with the others.
  int failed_rc = kExitOk;
  size_t fetched_captures = 0;
  for (const profd::v1::StoredTrace& t : traces) {
    if (int rc = FetchStoredTraces(g, client, t.capture_id(), fetched, out); rc != kExitOk) {
      std::cerr << "profctl: node " << Printable(t.hostname()) << " (capture " << t.capture_id()
                << ") is left out of the report of " << fleet_id << "\n";
      failed_rc = rc;
      continue;
    }
    ++fetched_captures;
  }
  return fetched_captures > 0 ? kExitOk : failed_rc;
}

// What `profctl show` says of the capture, for the report to fetch its traces. kExitOk, or the
// exit code after saying why.
int ShowStoredCapture(const GlobalOptions& g, const ProfdClient& client,
                      profd::v1::TraceStore::Stub* store, const std::string& id,
                      profd::v1::ShowTraceResponse* shown) {
  profd::v1::ShowTraceRequest show_request;
  show_request.set_capture_id(id);
  grpc::ClientContext show_ctx;
  grpc::Status status = store->ShowTrace(WithDeadline(&show_ctx, g), show_request, shown);
  if (status.ok()) return kExitOk;
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    std::cerr << "profctl: " << id
              << " is neither a trace file here, nor a capture profd has in memory or in its "
                 "store ("
              << status.error_message() << ")\n";
    return kExitNotFound;
  }
  return Fail(client, status);
}

// The capture's trace files (not its manifest or summary), asked for in *request in the store's
// order, each with the SHA-256 the store recorded in *want. kExitOk, or the exit code after
// saying why.
int ListTraceFiles(const std::string& id, const profd::v1::ShowTraceResponse& shown,
                   profd::v1::GetTraceRequest* request, std::map<std::string, std::string>* want) {
  for (const profd::v1::StoredFile& f : shown.trace().files()) {
    // Names come from a store anyone with its credentials can write: one plain name each, or
    // nothing of the capture is fetched.
    if (absl::Status s = profd::ValidatePlainFileName(f.name()); !s.ok()) {
      std::cerr << "profctl: capture " << id << ": the store names a file " << s.message()
                << ". Refusing it: a capture's files are plain names in one folder, so this "
                   "entry was written by hand or the store was tampered with. Nothing was "
                   "fetched.\n";
      return kExitError;
    }
    if (!IsTraceName(f.name())) continue;
    request->add_files(f.name());
    (*want)[f.name()] = f.sha256();
  }
  if (want->empty()) {
    std::cerr << "profctl: capture " << id << " in " << Printable(shown.trace().location())
              << " has no trace file to report on (profctl show " << id << " lists its files)\n";
    return kExitNotFound;
  }
  return kExitOk;
}

// A stored capture's trace files on their way into a folder of FetchedTraces.
struct TraceFetch {
  std::string id;
  std::string dir;
  std::map<std::string, std::string> want;  // name -> sha256 the store recorded
  std::map<std::string, std::string> who;   // name -> whose trace it is (TraceOwners)
};

// Writes the files GetTrace sends into `folder`, each checked against the SHA-256 the store
// recorded; *written gets their paths in the order they came. kExitOk, or the exit code after
// saying why (the call cancelled).
int ReceiveTraceFiles(grpc::ClientReaderInterface<profd::v1::TraceChunk>* reader,
                      grpc::ClientContext* ctx, const TraceFetch& fetch, OutputFolder* folder,
                      FetchedTraces* fetched, std::vector<std::string>* written) {
  profd::v1::TraceChunk chunk;
  struct CloseFile {
    int fd = -1;
    ~CloseFile() {
      if (fd >= 0) close(fd);
    }
  } file;
  std::unique_ptr<profd::Sha256> hash;
  std::string name;
  while (reader->Read(&chunk)) {
    if (chunk.has_file()) {
      name = chunk.file().name();
      // The name comes from profd: only a file asked for, by a plain name.
      if (fetch.want.count(name) == 0) {
        ctx->TryCancel();
        std::cerr << "profctl: the store sent a file that was not asked for: " << Printable(name)
                  << "\n";
        return kExitError;
      }
      if (file.fd >= 0) close(file.fd);
      absl::StatusOr<int> fd = folder->Create(name, /*replace_stale=*/false);
      file.fd = fd.ok() ? *fd : -1;
      if (!fd.ok()) {
        ctx->TryCancel();
        std::cerr << "profctl: capture " << fetch.id << ": " << fd.status().message() << "\n";
        return kExitError;
      }
      written->push_back(folder->PathOf(name));
      fetched->Name(written->back(), absl::StrCat(fetch.id, "/", name));
      if (auto owner = fetch.who.find(name); owner != fetch.who.end()) {
        fetched->SetWho(written->back(), owner->second);
      }
      hash = std::make_unique<profd::Sha256>();
    }
    if (!hash) continue;
    absl::Status w = WriteAll(file.fd, chunk.data(), written->back());
    hash->Update(chunk.data());
    if (w.ok() && chunk.end_of_file()) {
      const int fd = file.fd;
      file.fd = -1;
      if (close(fd) != 0) w = absl::InternalError(std::strerror(errno));
    }
    if (!w.ok()) {
      ctx->TryCancel();
      std::cerr << "profctl: cannot write " << written->back() << " (" << w.message() << "; is "
                << fetch.dir << "'s disk full? set TMPDIR elsewhere)\n";
      return kExitError;
    }
    if (chunk.end_of_file()) {
      if (const std::string& sha = fetch.want.at(name); !sha.empty() && sha != hash->HexDigest()) {
        ctx->TryCancel();
        std::cerr << "profctl: checksum mismatch for " << name << " of capture " << fetch.id
                  << ": the store recorded sha256 " << sha << ", the copy received is "
                  << hash->HexDigest() << ". Retry; if it persists the stored copy is damaged.\n";
        return kExitError;
      }
      hash.reset();
    }
  }
  return kExitOk;
}

// Downloads the traces of a stored capture (any profctl list shows: imports, captures from
// before a restart, other nodes', spooled ones) into a folder of `fetched`, each checked against
// the SHA-256 the store recorded. On failure prints why and returns the exit code.
int FetchStoredTraces(const GlobalOptions& g, ProfdClient& client, const std::string& id,
                      FetchedTraces* fetched, std::vector<std::string>* out) {
  auto store = StoreStub(client);
  profd::v1::ShowTraceResponse shown;
  if (int rc = ShowStoredCapture(g, client, store.get(), id, &shown); rc != kExitOk) return rc;
  TraceFetch fetch;
  fetch.id = id;
  fetch.who = TraceOwners(shown);
  profd::v1::GetTraceRequest request;
  request.set_capture_id(id);
  if (int rc = ListTraceFiles(id, shown, &request, &fetch.want); rc != kExitOk) return rc;
  std::string error;
  fetch.dir = fetched->NewFolder(&error);
  if (fetch.dir.empty()) {
    std::cerr << "profctl: " << error << "\n";
    return kExitError;
  }
  // Every file is created in the folder by name: none can leave it, no link in it is followed.
  absl::StatusOr<OutputFolder> folder = OutputFolder::Open(fetch.dir, /*create=*/false);
  if (!folder.ok()) {
    std::cerr << "profctl: " << folder.status().message() << "\n";
    return kExitError;
  }
  grpc::ClientContext ctx;
  // Big traces from a slow store: an hour, not --timeout, as `profctl get`.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  auto reader = store->GetTrace(&ctx, request);
  std::vector<std::string> written;
  if (int rc = ReceiveTraceFiles(reader.get(), &ctx, fetch, &*folder, fetched, &written);
      rc != kExitOk) {
    return rc;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail(client, status);
  if (written.size() != fetch.want.size()) {
    std::cerr << "profctl: the store sent " << written.size() << " of the " << fetch.want.size()
              << " traces of capture " << id << "; retry\n";
    return kExitError;
  }
  out->insert(out->end(), written.begin(), written.end());
  return kExitOk;
}

// The trace files an argument names: the file itself, the traces of a capture folder, or those
// of a capture profd knows (its recent captures, read in place when they are on this machine) or
// keeps in its store (downloaded). On failure prints why and returns the exit code.
int ResolveInputs(const GlobalOptions& g, const std::string& arg, FetchedTraces* fetched,
                  std::vector<std::string>* out) {
  if (ReadDenied(arg)) {
    std::cerr << "profctl: permission denied: cannot read " << arg
              << ". profd keeps traces readable by root and its --access_group only: run "
                 "profctl as root (sudo profctl ...), or be a member of that group\n";
    return kExitPermissionDenied;
  }
  if (IsFile(arg)) {
    out->push_back(arg);
    return kExitOk;
  }
  if (IsFolder(arg)) return FolderTraces(arg, out);
  if (!LooksLikeCaptureId(arg)) {
    std::cerr << "profctl: no trace file " << arg
              << ". Give a trace file (profd's .json.gz or .pftrace.gz, torch.profiler's "
                 "export_chrome_trace .json), a capture folder, or a capture id from `profctl "
                 "list`.\n";
    return kExitNotFound;
  }
  ProfdClient client(ResolveTarget(g.target), g.tls);
  if (absl::Time at; profd::IsFleetId(arg, &at)) {
    return FetchFleetTraces(g, client, arg, at, fetched, out);
  }
  grpc::ClientContext ctx;
  profd::v1::GetCaptureRequest request;
  request.set_capture_id(arg);
  profd::v1::CaptureInfo info;
  grpc::Status status = client.stub().GetCapture(WithDeadline(&ctx, g), request, &info);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::cerr << "profctl: " << arg << " is neither a trace file here nor a capture profd knows ("
              << client.Explain(status) << ")\n";
    return ProfdClient::ExitCodeFor(status);
  }
  if (status.ok() && !CaptureIsOver(info)) {
    std::cerr << "profctl: capture " << arg
              << " is still running; report it when it is done (profctl captures)\n";
    return kExitError;
  }
  if (status.ok() && info.files_size() == 0) {
    std::cerr << "profctl: capture " << arg << " has no trace"
              << (info.message().empty() ? "" : ": " + Printable(info.message())) << "\n";
    return kExitNotFound;
  }
  // A recent capture whose traces are on this machine is read where profd wrote them.
  std::vector<std::string> local;
  bool all_local = status.ok();
  for (const profd::v1::TraceFile& f : info.files()) {
    if (!IsTraceName(f.name())) continue;
    if (IsFile(f.path()) && !ReadDenied(f.path())) {
      local.push_back(f.path());
    } else {
      all_local = false;
    }
  }
  if (all_local && !local.empty()) {
    out->insert(out->end(), local.begin(), local.end());
    return kExitOk;
  }
  if (!status.ok() && status.error_code() != grpc::StatusCode::NOT_FOUND) {
    return Fail(client, status);
  }
  // Not in profd's memory (older, imported, another node's), or its files are elsewhere.
  return FetchStoredTraces(g, client, arg, fetched, out);
}

// One row per trace file of a multi-process input, each from its own analysis.
struct ProcessReport {
  std::string path;
  std::string who;  // namespace/pod@host of a trace fetched from the store; "" otherwise
  analysis::Report report;
};

int Analyze(const GlobalOptions& g, const std::vector<std::string>& args,
            const analysis::AnalysisOptions& options, analysis::Report* report,
            std::vector<ProcessReport>* per_process = nullptr) {
  FetchedTraces fetched;
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    int rc = ResolveInputs(g, arg, &fetched, &paths);
    if (rc != kExitOk) return rc;
  }
  auto analyze = [](const std::vector<std::string>& files,
                    const analysis::AnalysisOptions& o) -> absl::StatusOr<analysis::Report> {
    absl::StatusOr<analysis::Report> r = profd::AnalyzeTraceFilesOfAnyFormat(files, o);
    if (!r.ok()) std::cerr << "profctl: " << Printable(std::string(r.status().message())) << "\n";
    return r;
  };
  auto exit_code = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kNotFound ? kExitNotFound : kExitError;
  };
  absl::StatusOr<analysis::Report> r = analyze(paths, options);
  if (!r.ok()) return exit_code(r.status());
  *report = std::move(*r);
  if (per_process != nullptr && paths.size() > 1) {
    // Each process alone too: its own window, busy time and findings (the files are read again;
    // the analysis keeps no per-file state to split the joint report by).
    // Every kernel row, so that each rank's collective time is whole (AnalyzeRanks); trimmed
    // to the asked-for rows afterwards.
    analysis::AnalysisOptions every_kernel = options;
    every_kernel.top_kernels = std::max(options.top_kernels, 1 << 20);
    for (const std::string& path : paths) {
      absl::StatusOr<analysis::Report> one = analyze({path}, every_kernel);
      if (!one.ok()) return exit_code(one.status());
      per_process->push_back({path, fetched.Who(path), *std::move(one)});
    }
  }
  // Reports name their inputs: a fetched trace by the capture it came from, not its temp copy.
  for (analysis::InputSummary& in : report->inputs) in.path = fetched.Shown(in.path);
  if (per_process != nullptr) {
    for (ProcessReport& p : *per_process) {
      p.path = fetched.Shown(p.path);
      for (analysis::InputSummary& in : p.report.inputs) in.path = fetched.Shown(in.path);
    }
  }
  return kExitOk;
}

// Per process, side by side: each trace's own window, busy GPUs, kernels and findings. Each row
// is named by its trace's file name (trace-<pid>.json.gz), which a long folder path would push
// out of the column; the folder is said once above when they share one.
std::string RenderPerProcess(const std::vector<ProcessReport>& processes) {
  // Traces of a fleet capture also say whose they are: namespace/pod@node.
  const bool with_pods = std::any_of(processes.begin(), processes.end(),
                                     [](const ProcessReport& p) { return !p.who.empty(); });
  std::vector<std::string> columns = {"TRACE",    "PID>",       "WINDOW>",
                                      "EVENTS>",  "KERNELS>",   "KERNEL TIME>",
                                      "GPU BUSY", "TOP KERNEL", "FINDINGS"};
  if (with_pods) columns.insert(columns.begin(), "POD");
  analysis::TextTable table(columns, 48);
  std::set<std::string> folders, names;
  for (const ProcessReport& p : processes) {
    folders.insert(fs::path(p.path).parent_path().string());
    names.insert(fs::path(p.path).filename().string());
  }
  const bool by_name = names.size() == processes.size();
  for (const ProcessReport& p : processes) {
    const analysis::Report& r = p.report;
    std::vector<std::string> pids, busy, findings;
    for (const analysis::ProcessRow& row : r.processes) pids.push_back(absl::StrCat(row.pid));
    for (const analysis::GpuRow& gpu : r.gpus) {
      busy.push_back(
          absl::StrCat("GPU ", gpu.device, " ", analysis::FormatPercent(gpu.busy_ratio)));
    }
    for (const analysis::Finding& f : r.findings) findings.push_back(f.id);
    // TextTable makes its cells printable.
    std::vector<std::string> row;
    if (with_pods) row.push_back(p.who.empty() ? "-" : p.who);
    row.insert(row.end(), {by_name ? fs::path(p.path).filename().string() : p.path,
                           pids.empty() ? "-" : absl::StrJoin(pids, ","),
                           analysis::FormatDuration(static_cast<double>(r.window_ns)),
                           analysis::FormatCount(r.events), analysis::FormatCount(r.kernel_count),
                           analysis::FormatDuration(static_cast<double>(r.kernel_time_ns)),
                           busy.empty() ? "-" : absl::StrJoin(busy, ", "),
                           r.top_kernels.empty() ? "-" : r.top_kernels[0].name,
                           findings.empty() ? "-" : absl::StrJoin(findings, ", ")});
    table.AddRow(row);
  }
  std::string where;
  if (by_name && folders.size() == 1 && !folders.begin()->empty()) {
    where = absl::StrCat(", traces in ", Printable(*folders.begin()));
  }
  return absl::StrCat("PER PROCESS (each trace analysed alone", where, ")\n", table.Render(), "\n");
}

// The joint report's JSON with "per_process": [{"trace", "report"}] added, one per trace.
std::string ReportJsonWithProcesses(const analysis::Report& report,
                                    const std::vector<ProcessReport>& processes,
                                    const std::string& across_ranks) {
  const std::string overall = analysis::ReportToJson(report);
  if (processes.empty()) return overall;
  rapidjson::Document doc;
  doc.Parse(overall.c_str());
  auto& alloc = doc.GetAllocator();
  rapidjson::Value list(rapidjson::kArrayType);
  for (const ProcessReport& p : processes) {
    rapidjson::Document one(&alloc);
    one.Parse(analysis::ReportToJson(p.report, /*pretty=*/false).c_str());
    rapidjson::Value entry(rapidjson::kObjectType);
    entry.AddMember("trace", rapidjson::Value(p.path.c_str(), alloc), alloc);
    if (!p.who.empty()) entry.AddMember("who", rapidjson::Value(p.who.c_str(), alloc), alloc);
    entry.AddMember("report", rapidjson::Value(one, alloc), alloc);
    list.PushBack(entry, alloc);
  }
  doc.AddMember("per_process", list, alloc);
  if (!across_ranks.empty()) {
    rapidjson::Document ranks(&alloc);
    ranks.Parse(across_ranks.c_str());
    doc.AddMember("across_ranks", rapidjson::Value(ranks, alloc), alloc);
  }
  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buffer);
  w.SetIndent(' ', 1);
  doc.Accept(w);
  return EscapeJsonLineSeparators(std::string(buffer.GetString(), buffer.GetSize()) + "\n");
}

int RunReport(const GlobalOptions& g, const ReportFlags& f) {
  analysis::AnalysisOptions options;
  options.top_kernels = f.top;
  options.top_apis = f.top;
  options.top_operators = f.top;
  analysis::Report report;
  std::vector<ProcessReport> per_process;
  int rc = Analyze(g, f.inputs, options, &report, &per_process);
  if (rc != kExitOk) return rc;
  if (report.events == 0) {
    std::cerr << "profctl: " << absl::StrJoin(f.inputs, ", ")
              << " holds no trace events: nothing to report (was the capture empty, or the "
                 "trace cut before its first event?)\n";
    return kExitError;
  }
  if (!f.html.empty()) {
    std::ofstream out(f.html, std::ios::binary | std::ios::trunc);
    out << analysis::RenderHtml(report, absl::StrJoin(f.inputs, ", "));
    out.close();
    if (!out) {
      std::cerr << "profctl: cannot write " << f.html << ": " << std::strerror(errno) << "\n";
      return kExitError;
    }
  }
  // Side by side: who is slow while the others wait.
  std::vector<analysis::RankInput> ranks;
  for (const ProcessReport& p : per_process) {
    ranks.push_back({p.who.empty() ? fs::path(p.path).filename().string() : p.who, &p.report});
  }
  const analysis::CrossRankReport across = analysis::AnalyzeRanks(ranks);
  for (ProcessReport& p : per_process) {
    if (p.report.top_kernels.size() > static_cast<size_t>(f.top)) {
      p.report.top_kernels.resize(static_cast<size_t>(f.top));
    }
  }
  if (g.json || f.json) {
    std::cout << ReportJsonWithProcesses(report, per_process,
                                         ranks.empty() ? "" : analysis::RanksToJson(across));
  } else {
    if (!per_process.empty()) {
      std::cout << RenderPerProcess(per_process) << analysis::RenderRanks(across) << "ALL "
                << per_process.size() << " PROCESSES TOGETHER\n";
    }
    std::cout << analysis::RenderText(report);
    if (!f.html.empty()) std::cout << "\nHTML report: " << f.html << "\n";
  }
  return kExitOk;
}

int RunDiff(const GlobalOptions& g, const DiffFlags& f) {
  analysis::AnalysisOptions options;
  options.top_kernels = 1 << 30;  // every kernel, so none is missing from one side
  options.top_apis = 1 << 30;
  options.top_operators = 1 << 30;
  options.operator_kernels = 0;  // the diff compares operator totals, not their kernels
  analysis::Report a, b;
  int rc = Analyze(g, {f.a}, options, &a);
  if (rc == kExitOk) rc = Analyze(g, {f.b}, options, &b);
  if (rc != kExitOk) return rc;
  analysis::ReportDiff diff = analysis::DiffReports(a, b);
  if (g.json || f.json) {
    std::cout << analysis::DiffToJson(diff, f.a, f.b);
  } else {
    std::cout << analysis::RenderDiffText(diff, f.a, f.b, static_cast<size_t>(f.rows));
  }
  return kExitOk;
}

}  // namespace

void AddReportCommands(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto rf = std::make_shared<ReportFlags>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Bottleneck report of a trace: GPU busy/idle, operators (torch.profiler's key_averages), "
      "top kernels, CUDA API, copies, syncs, findings with advice. Reads profd's traces "
      "(.json.gz, .pftrace.gz) and PyTorch profiler traces (.json or .json.gz); "
      "no profd needed for a file or folder");
  report
      ->add_option("trace", rf->inputs,
                   "Trace file(s), a capture folder (one trace per process: reported per "
                   "process and together), or a capture id from profctl captures / list "
                   "(fetched from profd's store)")
      ->required();
  report->add_flag("--json", rf->json, "Print the report as JSON");
  report->add_option("--html", rf->html, "Also write a self-contained HTML report here");
  report->add_option("--top", rf->top, "Rows in the operator, kernel and API tables (default 20)")
      ->check(CLI::Range(1, 1 << 20));
  report->callback([&g, rc, rf] { *rc = RunReport(g, *rf); });

  auto df = std::make_shared<DiffFlags>();
  CLI::App* diff = app.add_subcommand(
      "diff",
      "Compare two traces (before/after an optimisation): the change per operator, kernel, "
      "API and copy kind");
  diff->add_option("before", df->a, "Trace file or capture id (A)")->required();
  diff->add_option("after", df->b, "Trace file or capture id (B)")->required();
  diff->add_flag("--json", df->json, "Print the comparison as JSON");
  diff->add_option("--rows", df->rows, "Rows per table (default 25)");
  diff->callback([&g, rc, df] { *rc = RunDiff(g, *df); });
}

}  // namespace profctl

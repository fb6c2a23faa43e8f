// profctl report, profctl diff: the bottleneck analysis of a trace, on this machine, with no
// profd needed for a file. A capture id is resolved through profd (GetCapture gives the trace
// files; the local store's files are read in place).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "daemon/analysis/analysis.h"
#include "daemon/analysis/render.h"
#include "daemon/analysis/report_diff.h"

namespace profctl {
namespace {

namespace analysis = profd::analysis;

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

// Capture ids look like 20260101T120000Z-host-1a2b3c4d: no slash, no .json suffix.
bool LooksLikeCaptureId(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && !absl::EndsWith(s, ".json") &&
         !absl::EndsWith(s, ".gz");
}

// The trace files an argument names: the file itself, or the files of a capture in profd's
// store. On failure prints why and returns the exit code.
int ResolveInputs(const GlobalOptions& g, const std::string& arg, std::vector<std::string>* out) {
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
  if (!LooksLikeCaptureId(arg)) {
    std::cerr << "profctl: no trace file " << arg
              << ". Give a .json or .json.gz trace (profd capture, torch.profiler "
                 "export_chrome_trace) or a capture id from `profctl captures`.\n";
    return kExitNotFound;
  }
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::GetCaptureRequest request;
  request.set_capture_id(arg);
  profd::v1::CaptureInfo info;
  grpc::Status status = client.stub().GetCapture(WithDeadline(&ctx, g), request, &info);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
        status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      std::cerr << "profctl: " << arg << " is neither a trace file here nor a capture profd knows ("
                << client.Explain(status) << ")\n";
      return ProfdClient::ExitCodeFor(status);
    }
    return Fail(client, status);
  }
  std::vector<std::string> unreadable;
  for (const profd::v1::TraceFile& f : info.files()) {
    if (!absl::StrContains(f.name(), "trace")) continue;
    // The local store keeps the files where the path says. (Traces in a remote store need the
    // store's GetTrace download: add it here, writing each file to a temp dir.)
    if (IsFile(f.path())) {
      out->push_back(f.path());
    } else {
      unreadable.push_back(f.path().empty() ? f.name() : f.path());
    }
  }
  if (!unreadable.empty() || out->empty()) {
    std::cerr << "profctl: capture " << arg << " has no trace file readable on this machine"
              << (unreadable.empty() ? "" : " (" + absl::StrJoin(unreadable, ", ") + ")")
              << ". Copy the trace here (profctl capture -o) and run profctl report FILE.\n";
    return kExitNotFound;
  }
  return kExitOk;
}

int Analyze(const GlobalOptions& g, const std::vector<std::string>& args,
            const analysis::AnalysisOptions& options, analysis::Report* report) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    int rc = ResolveInputs(g, arg, &paths);
    if (rc != kExitOk) return rc;
  }
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeTraceFiles(paths, options);
  if (!r.ok()) {
    std::cerr << "profctl: " << r.status().message() << "\n";
    return r.status().code() == absl::StatusCode::kNotFound ? kExitNotFound : kExitError;
  }
  *report = std::move(*r);
  return kExitOk;
}

int RunReport(const GlobalOptions& g, const ReportFlags& f) {
  analysis::AnalysisOptions options;
  options.top_kernels = f.top;
  options.top_apis = f.top;
  options.top_operators = f.top;
  analysis::Report report;
  int rc = Analyze(g, f.inputs, options, &report);
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
  if (g.json || f.json) {
    std::cout << analysis::ReportToJson(report);
  } else {
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
      "top kernels, CUDA API, copies, syncs, findings with advice. Reads profd and PyTorch "
      "profiler traces (.json or .json.gz); "
      "no profd needed for a file");
  report
      ->add_option("trace", rf->inputs,
                   "Trace file(s) (one per process of a capture) or a capture id")
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

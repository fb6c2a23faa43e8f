// profctl capture, captures, cancel: start a time-boxed capture and watch it to the end, list
// recent ones, stop one early.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "analysis/format.h"
#include "analysis/text_table.h"
#include "client/commands.h"
#include "client/fleet_capture.h"
#include "common/printable.h"
#include "daemon/capture/capture_request.h"
#include "daemon/trace/trace_format.h"
#include "profd/v1/capture_limits.h"

namespace profctl {

namespace analysis = profd::analysis;
namespace {

struct CaptureFlags {
  std::vector<uint32_t> pids;
  bool all = false;
  std::string pod;
  std::string pod_namespace;
  std::string duration = "5s";
  std::string delay;
  std::string start_at;
  std::string before;  // the flight recorder's seconds before the request
  std::string kinds;
  uint64_t max_events = 0;
  std::string output;
  std::string label;
  std::string reason;
  bool no_progress = false;
  std::string via = "auto";
  bool record_shapes = false;
  bool with_stack = false;
  bool profile_memory = false;
  bool gpu_metrics = false;
  std::string gpu_metrics_interval = "1ms";
  std::string format;  // "": profd's --trace_format
  FleetFlags fleet;    // -l / --deployment / --job: across nodes
};

using analysis::FormatBytes;
using analysis::FormatCount;
using analysis::FormatDuration;
// What a capture's answer quotes from its processes (names, messages, paths) is shown through
// Printable: a process names itself, and a kernel name is whatever its code says.
using profd::Printable;
using profd::TraceFormatInfo;
using profd::TraceFormatNamed;
using profd::TraceFormatOfFile;
using profd::TraceFormatOfManifest;
using profd::TraceFormatOfName;
using profd::TraceFormats;

bool ParseKinds(const std::string& text, profd::v1::CaptureRequest* request, std::string* error) {
  static const std::pair<const char*, profd::v1::ActivityKind> kNames[] = {
      {"kernel", profd::v1::ACTIVITY_KIND_KERNEL},
      {"memcpy", profd::v1::ACTIVITY_KIND_MEMCPY},
      {"memset", profd::v1::ACTIVITY_KIND_MEMSET},
      {"runtime", profd::v1::ACTIVITY_KIND_RUNTIME},
      {"sync", profd::v1::ACTIVITY_KIND_SYNCHRONIZATION},
      {"driver", profd::v1::ACTIVITY_KIND_DRIVER},
      {"nvtx", profd::v1::ACTIVITY_KIND_NVTX},
      {"memory", profd::v1::ACTIVITY_KIND_MEMORY},
      {"overhead", profd::v1::ACTIVITY_KIND_OVERHEAD},
  };
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    bool found = false;
    for (const auto& [name, kind] : kNames) {
      if (part == name) {
        request->add_kinds(kind);
        found = true;
      }
    }
    if (!found) {
      *error = absl::StrCat("unknown activity kind '", std::string(part),
                            "': use kernel, memcpy, memset, runtime, sync, driver, nvtx, memory, "
                            "overhead");
      return false;
    }
  }
  return true;
}

// Captures the spool could not take yet (profctl spool's list), best effort: an older profd, or
// one without a store, has none to tell.
std::vector<profd::v1::StoredTrace> WaitingForRoom(const ProfdClient& client,
                                                   const GlobalOptions& g) {
  grpc::ClientContext ctx;
  profd::v1::SpoolStatus spool;
  if (!StoreStub(client)
           ->GetSpoolStatus(WithDeadline(&ctx, g), profd::v1::GetSpoolStatusRequest(), &spool)
           .ok()) {
    return {};
  }
  return {spool.waiting().begin(), spool.waiting().end()};
}

void PrintSummary(const profd::v1::CaptureInfo& info) {
  const profd::v1::CaptureSummary& s = info.summary();
  std::cout << "Capture " << info.capture_id() << ": " << PhaseName(info.phase());
  if (s.window_ns() > 0) {
    // The window is the events' own span (first start to last end), which a process that was
    // idle for most of the capture makes much shorter than the duration asked for.
    std::cout << ", " << FormatCount(s.events()) << " events, " << FormatCount(s.dropped_records())
              << " dropped; the events span " << FormatDuration(static_cast<double>(s.window_ns()));
    if (info.duration_ms() > 0) {
      std::cout << " of the " << absl::FormatDuration(absl::Milliseconds(info.duration_ms()))
                << " capture";
    }
  }
  std::cout << "\n";
  // A failed capture's message goes to stderr, once (RunCapture).
  if (!info.message().empty() && info.phase() != profd::v1::CAPTURE_PHASE_FAILED) {
    std::cout << "  " << Printable(info.message()) << "\n";
  }
  for (const auto& p : info.processes()) {
    std::cout << "  pid " << p.pid() << " (" << Printable(p.comm())
              << "): " << FormatCount(p.events()) << " events";
    if (p.start_latency_ns() > 0) {
      // Through Kineto, profd knows when the process took the config; it starts tracing at its
      // own next ticks (docs/KINETO.md).
      std::cout << (p.path() == profd::v1::CAPTURE_PATH_KINETO ? ", through Kineto, taken "
                                                               : ", CUPTI on ")
                << FormatDuration(static_cast<double>(p.start_latency_ns())) << " after the start";
    }
    // --before: the flight recorder's part, from before the request.
    if (p.recorded_from_unix_ns() > 0) {
      std::cout << ", from "
                << FormatDuration(
                       static_cast<double>(info.requested_unix_ns() - p.recorded_from_unix_ns()))
                << " before the request (flight recorder)";
    } else if (info.before_ms() > 0 && !p.message().empty()) {
      std::cout << ", nothing from before the request: " << Printable(p.message());
    }
    if (p.dropped_records() > 0)
      std::cout << ", " << FormatCount(p.dropped_records()) << " DROPPED";
    if (p.truncated()) std::cout << ", CUT at the event cap";
    // Another profiler in the process (torch.profiler) started: it came first.
    if (p.error() == profd::v1::CAPTURE_ERROR_CUT_SHORT)
      std::cout << ", CUT SHORT: " << Printable(p.message());
    std::cout << "\n";
  }
  if (info.has_gpu_metrics()) {
    const profd::v1::GpuMetrics& m = info.gpu_metrics();
    if (m.samples() > 0) {
      std::cout << "  GPU counters: " << FormatCount(m.samples()) << " samples of " << m.gpus()
                << " GPU(s), every " << FormatDuration(static_cast<double>(m.interval_ns()))
                << " (the report's kernel table says what bounds each kernel)\n";
    } else {
      std::cout << "  GPU counters: none"
                << (m.error().empty() ? "" : absl::StrCat(" (", Printable(m.error()), ")")) << "\n";
    }
  }
  if (s.gpus_size() > 0) {
    std::cout << "\n";
    analysis::TextTable gpus({"GPU>", "PID>", "BUSY>", "KERNELS>", "COPIES>", "COPIED>"});
    for (const auto& g : s.gpus()) {
      gpus.AddRow({std::to_string(g.device()), std::to_string(g.pid()),
                   absl::StrFormat("%.1f%%", 100 * g.busy_ratio()), FormatCount(g.kernels()),
                   FormatCount(g.memcpys()), FormatBytes(g.memcpy_bytes())});
    }
    std::cout << gpus.Render("");
  }
  if (s.top_kernels_size() > 0) {
    uint64_t total = 0;
    for (const auto& k : s.top_kernels()) total += k.total_ns();
    std::cout << "\nTop kernels by total GPU time\n";
    analysis::TextTable kernels({"TIME %>", "TOTAL>", "COUNT>", "AVG>", "MIN>", "MAX>", "NAME"},
                                80);
    for (const auto& k : s.top_kernels()) {
      kernels.AddRow({absl::StrFormat("%.1f", total ? 100.0 * k.total_ns() / total : 0.0),
                      FormatDuration(static_cast<double>(k.total_ns())), FormatCount(k.count()),
                      FormatDuration(k.avg_ns()), FormatDuration(static_cast<double>(k.min_ns())),
                      FormatDuration(static_cast<double>(k.max_ns())), k.name()});
    }
    std::cout << kernels.Render("");
  }
  if (info.files_size() > 0) std::cout << "\n";
  for (const auto& f : info.files()) {
    std::cout << "Trace: " << Printable(f.path()) << " (" << FormatBytes(f.bytes()) << ")\n";
  }
}

// --output's folder must exist: profctl makes no folders but the last one (-o DIR for several
// processes), so a typo fails at once, before the capture runs, not after it as "cannot copy".
// "" when the path can be written to, else the message.
std::string CheckOutput(const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(output, ec)) return "";
  fs::path parent = fs::path(output).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::exists(parent, ec)) {
    return absl::StrCat("--output ", output, ": the folder ", parent.string(),
                        " does not exist; create it first (mkdir -p ", parent.string(),
                        ") or give a path in an existing folder");
  }
  if (!fs::is_directory(parent, ec)) {
    return absl::StrCat("--output ", output, ": ", parent.string(), " is not a folder");
  }
  if (access(parent.c_str(), W_OK) != 0) {
    return absl::StrCat("--output ", output, ": cannot write into ", parent.string(), ": ",
                        std::strerror(errno));
  }
  return "";
}

// output with its suffix replaced by the one of `want`'s captures (x.json.gz -> x.pftrace.gz), or
// output itself when its name says no format or that one.
std::string WithSuffixOf(const std::string& output, const TraceFormatInfo& want) {
  const TraceFormatInfo* have = TraceFormatOfName(output);
  if (have == nullptr || have == &want) return output;
  std::string stem = output;
  for (std::string_view suffix : have->suffixes) {
    if (stem.ends_with(suffix)) {
      stem.resize(stem.size() - suffix.size());
      break;
    }
  }
  return stem + std::string(want.capture_suffix);
}

int CopyOut(const profd::v1::CaptureInfo& info, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (info.files_size() == 0) {
    std::cerr << "profctl: no trace to copy to " << output << "\n";
    return kExitCaptureFailed;
  }
  for (const auto& f : info.files()) {
    fs::path to = info.files_size() == 1 && !fs::is_directory(output) ? fs::path(output)
                                                                      : fs::path(output) / f.name();
    // profd's --trace_format chose the format: a Perfetto trace is not copied under a JSON name
    // (nor the reverse), where every reader would fail on it.
    if (info.files_size() == 1 && !fs::is_directory(output)) {
      const TraceFormatInfo* format = TraceFormatOfManifest(f.format());
      if (format == nullptr) format = &TraceFormatOfFile(f.path());
      if (const std::string renamed = WithSuffixOf(output, *format); renamed != output) {
        to = renamed;
        std::cout << "The trace is " << format->description
                  << " (profd's --trace_format), so it is copied to " << to.string() << ", not "
                  << output << "\n";
      }
    }
    if (info.files_size() > 1) fs::create_directory(output, ec);
    if (std::error_code source_ec; !fs::exists(f.path(), source_ec)) {
      std::cerr
          << "profctl: cannot copy the trace to " << to.string() << ": " << f.path()
          << " is not on this machine (profd runs elsewhere, or retention already removed it from "
             "--capture_dir); fetch it from the store with `profctl get "
          << info.capture_id() << " -o DIR`\n";
      return kExitError;
    }
    fs::copy_file(f.path(), to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::cerr << "profctl: cannot write " << to.string() << ": " << ec.message()
                << " (the trace stays in " << f.path() << ")\n";
      return kExitError;
    }
    std::cout << "Copied to " << to.string() << "\n";
  }
  return kExitOk;
}

// Ctrl-C while a capture runs, as nsys and torch.profiler do: the first stops the capture early
// and keeps what was captured (profctl then prints it as usual); a second one detaches, leaving
// the capture to run to its end in profd.
std::atomic<int> g_interrupts{0};
void OnInterrupt(int) { g_interrupts.fetch_add(1); }

class InterruptWatch {
 public:
  InterruptWatch(const GlobalOptions& g, ProfdClient* client, grpc::ClientContext* stream)
      : g_(g), client_(client), stream_(stream) {
    g_interrupts = 0;
    struct sigaction sa = {};
    sa.sa_handler = OnInterrupt;
    sigaction(SIGINT, &sa, &previous_);
    thread_ = std::thread([this] { Watch(); });
  }
  ~InterruptWatch() {
    done_ = true;
    thread_.join();
    if (stopper_.joinable()) stopper_.join();
    sigaction(SIGINT, &previous_, nullptr);
  }
  void SetCaptureId(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    id_ = id;
  }
  bool detached() const { return detached_; }
  // The first Ctrl-C asked profd to stop the capture (a second one may still have detached).
  bool stop_asked() const { return stop_asked_; }

 private:
  void Watch() {
    int handled = 0;
    while (!done_) {
      const int n = g_interrupts.load();
      if (n > handled) {
        handled = n;
        if (n == 1) {
          // On its own thread: a second Ctrl-C while profd stops the capture still detaches.
          stop_asked_ = true;
          stopper_ = std::thread([this] { Stop(); });
        } else {
          detached_ = true;
          stream_->TryCancel();
        }
      }
      usleep(5000);
    }
  }
  void Stop() {
    std::string id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = id_;
    }
    if (id.empty()) {  // not started yet: nothing to keep
      detached_ = true;
      stream_->TryCancel();
      return;
    }
    std::cerr << "\nStopping capture " << id
              << " early, keeping what was captured (Ctrl-C again to detach)\n";
    grpc::ClientContext ctx;
    profd::v1::CancelCaptureRequest request;
    request.set_capture_id(id);
    profd::v1::CaptureInfo response;
    grpc::Status status = client_->stub().CancelCapture(WithDeadline(&ctx, g_), request, &response);
    if (!status.ok()) std::cerr << "profctl: " << client_->Explain(status) << "\n";
  }

  const GlobalOptions& g_;
  ProfdClient* const client_;
  grpc::ClientContext* const stream_;
  std::mutex mu_;
  std::string id_;
  std::atomic<bool> done_{false};
  std::atomic<bool> detached_{false};
  std::atomic<bool> stop_asked_{false};
  struct sigaction previous_ = {};
  std::thread thread_;
  std::thread stopper_;
};

// --output: a folder that exists, and a name that does not say the other format than --format's.
// "" when it will do, else the message.
std::string CheckOutputFlag(const CaptureFlags& f) {
  if (f.output.empty()) return "";
  if (std::string bad = CheckOutput(f.output); !bad.empty()) return bad;
  // A file name that says the other format: refused before anything is captured.
  const TraceFormatInfo* named = TraceFormatOfName(f.output);
  const TraceFormatInfo* wanted = TraceFormatNamed(f.format);
  if (named != nullptr && wanted != nullptr && named != wanted &&
      !std::filesystem::is_directory(f.output)) {
    const std::string named_name(named->name), wanted_description(wanted->description);
    return absl::StrCat("--output ", f.output, " names a ", named_name, " trace, but --format ",
                        f.format, " writes ", wanted_description, ". Use --output ",
                        WithSuffixOf(f.output, *wanted), " (or --format ", named_name, ")");
  }
  return "";
}

// What to capture: --pid, --all, --pod POD -n NAMESPACE (the columns of `profctl agents`, the
// labels of /metrics), or NAMESPACE/POD. "" when the flags agree, else the message.
std::string SetTargets(const CaptureFlags& f, profd::v1::CaptureRequest* request) {
  for (uint32_t pid : f.pids) request->add_pids(pid);
  request->set_all(f.all);
  std::string pod = f.pod, pod_namespace = f.pod_namespace;
  if (size_t slash = pod.find('/'); slash != std::string::npos) {
    if (!pod_namespace.empty() && pod_namespace != pod.substr(0, slash)) {
      return absl::StrCat("--pod ", pod, " names namespace ", pod.substr(0, slash), " but -n says ",
                          pod_namespace);
    }
    pod_namespace = pod.substr(0, slash);
    pod = pod.substr(slash + 1);
  }
  request->set_pod_name(pod);
  request->set_pod_namespace(pod_namespace);
  return "";
}

// When and how long: --duration (also into *duration), --delay, --start-at, --before. "" when
// they parse, else the message.
std::string SetTiming(const CaptureFlags& f, profd::v1::CaptureRequest* request,
                      absl::Duration* duration) {
  // The request carries whole milliseconds (int64): at least 1 ms; profd applies its own
  // --max_capture_duration and says so. A year keeps the sum with --delay far from overflow.
  const absl::Duration most = absl::Hours(24 * 366);
  if (std::string bad =
          ParseDurationFlag("--duration", f.duration, absl::Milliseconds(1), most, duration);
      !bad.empty()) {
    return bad;
  }
  request->set_duration_ms(absl::ToInt64Milliseconds(*duration));
  if (!f.delay.empty()) {
    absl::Duration delay;
    // Its bound is checked with the rest of the request, by CheckCaptureRequest.
    if (std::string bad = ParseDurationFlag("--delay", f.delay, absl::ZeroDuration(), most, &delay);
        !bad.empty()) {
      return bad;
    }
    request->set_delay_ms(absl::ToInt64Milliseconds(delay));
  }
  if (!f.start_at.empty()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, f.start_at, &t, &err)) {
      return absl::StrCat("--start-at wants an RFC 3339 time such as 2026-11-29T17:00:00Z: ", err);
    }
    request->set_start_at_unix_ns(absl::ToUnixNanos(t));
  }
  if (!f.before.empty()) {
    absl::Duration before;
    // Its bound is checked with the rest of the request, by CheckCaptureRequest.
    if (std::string bad =
            ParseDurationFlag("--before", f.before, absl::ZeroDuration(), most, &before);
        !bad.empty()) {
      return bad;
    }
    request->set_before_ms(absl::ToInt64Milliseconds(before));
  }
  return "";
}

// What to record and how: --kinds, --max-events, --label, --reason, --via, torch.profiler's
// options, --gpu-metrics, --format. "" when they parse, else the message.
std::string SetRecording(const CaptureFlags& f, profd::v1::CaptureRequest* request) {
  std::string kinds_error;
  if (!ParseKinds(f.kinds, request, &kinds_error)) return kinds_error;
  request->set_max_events(f.max_events);
  request->set_label(f.label);
  request->set_reason(f.reason);
  if (f.via == "kineto") {
    request->set_path(profd::v1::CAPTURE_PATH_KINETO);
  } else if (f.via == "cupti" || f.via == "agent") {
    request->set_path(profd::v1::CAPTURE_PATH_CUPTI);
  } else if (f.via != "auto") {
    return absl::StrCat("--via wants auto, kineto or cupti, not '", f.via, "'");
  }
  request->set_record_shapes(f.record_shapes);
  request->set_with_stack(f.with_stack);
  request->set_profile_memory(f.profile_memory);
  if (f.gpu_metrics) {
    absl::Duration interval;
    // CUPTI's PM sampling runs from tens of microseconds; profd widens it for long captures.
    if (std::string bad = ParseDurationFlag("--gpu-metrics-interval", f.gpu_metrics_interval,
                                            absl::Microseconds(20), absl::Seconds(1), &interval);
        !bad.empty()) {
      return bad;
    }
    request->set_gpu_metrics(true);
    request->set_gpu_metrics_interval_ns(absl::ToInt64Nanoseconds(interval));
  }
  request->set_trace_format(f.format);
  return "";
}

// The request the flags ask for, checked in their order and then as profd will check it (said
// before it goes). "" when it can go, else the message.
std::string BuildCaptureRequest(const CaptureFlags& f, profd::v1::CaptureRequest* request,
                                absl::Duration* duration) {
  if (std::string bad = CheckOutputFlag(f); !bad.empty()) return bad;
  if (std::string bad = SetTargets(f, request); !bad.empty()) return bad;
  if (std::string bad = SetTiming(f, request, duration); !bad.empty()) return bad;
  if (std::string bad = SetRecording(f, request); !bad.empty()) return bad;
  if (absl::Status bad = profd::CheckCaptureRequest(*request, absl::Now()); !bad.ok()) {
    return std::string(bad.message());
  }
  return "";
}

// What a capture's stream brought and how it ended.
struct CaptureStreamEnd {
  profd::v1::CaptureInfo last;  // the latest state profd sent
  bool have_final = false;      // profd sent the capture's final state
  bool detached = false;        // Ctrl-C left the capture to run on in profd
  bool stop_asked = false;      // the first Ctrl-C asked profd to stop the capture
  grpc::Status status;
};

void DrawProgressBar(const profd::v1::CaptureInfo& last,
                     const profd::v1::CaptureProgress& progress) {
  double total = static_cast<double>(last.duration_ms());
  double done = std::min<double>(static_cast<double>(progress.elapsed_ms()), total);
  int width = 30, filled = total > 0 ? static_cast<int>(width * done / total) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(static_cast<size_t>(width), ' ');
  std::fprintf(stderr, "\r%-9s [%s] %5.1fs/%.1fs  %s events   ", PhaseName(last.phase()).c_str(),
               bar.c_str(), done / 1000, total / 1000, FormatCount(progress.events()).c_str());
  std::fflush(stderr);
}

// Starts the capture and follows its stream to the end, with a progress bar on a terminal and
// Ctrl-C watched (InterruptWatch).
CaptureStreamEnd FollowCapture(const GlobalOptions& g, const CaptureFlags& f,
                               const profd::v1::CaptureRequest& request, absl::Duration duration,
                               ProfdClient* client) {
  CaptureStreamEnd end;
  grpc::ClientContext ctx;
  // The stream lasts as long as the capture: no --timeout deadline on it.
  auto reader = client->stub().Capture(&ctx, request);
  profd::v1::CaptureProgress progress;
  const bool tty = isatty(STDERR_FILENO) && !f.no_progress && !g.json;
  bool announced = false;
  std::optional<InterruptWatch> interrupts;
  interrupts.emplace(g, client, &ctx);
  while (reader->Read(&progress)) {
    end.last = progress.capture();
    interrupts->SetCaptureId(end.last.capture_id());
    if (!announced && !g.json && !f.no_progress) {
      std::cerr << "Capture " << end.last.capture_id() << " of " << end.last.processes_size()
                << " process(es) for " << absl::FormatDuration(duration) << "\n";
      announced = true;
    }
    if (tty) DrawProgressBar(end.last, progress);
    if (progress.final()) end.have_final = true;
  }
  if (tty) std::fprintf(stderr, "\n");
  end.detached = interrupts->detached();
  end.stop_asked = interrupts->stop_asked();
  interrupts.reset();
  end.status = reader->Finish();
  return end;
}

// A capture that ended in profd: its summary, why it failed, whether the spool took its trace,
// and the copy to --output. Returns the exit code.
int ReportCaptureEnd(const GlobalOptions& g, const CaptureFlags& f, const ProfdClient& client,
                     const profd::v1::CaptureInfo& last) {
  if (g.json) {
    PrintJson(last);
  } else {
    PrintSummary(last);
  }
  int rc = last.phase() == profd::v1::CAPTURE_PHASE_FAILED ? kExitCaptureFailed : kExitOk;
  if (rc != kExitOk) std::cerr << "profctl: capture failed: " << Printable(last.message()) << "\n";
  // Done, but the spool could not take the trace (its disk full, say): not silent, not exit 0.
  if (rc == kExitOk && last.phase() == profd::v1::CAPTURE_PHASE_DONE) {
    for (const profd::v1::StoredTrace& t : WaitingForRoom(client, g)) {
      if (t.capture_id() != last.capture_id()) continue;
      std::cerr << "profctl: capture " << last.capture_id()
                << " is done but NOT STORED: " << Printable(t.upload_error())
                << ". The trace is kept in " << Printable(t.location())
                << "; profd puts it in the spool when room returns (`profctl spool`)\n";
      rc = kExitError;
    }
  }
  if (!f.output.empty() && last.files_size() > 0) {
    int copy_rc = CopyOut(last, f.output);
    if (rc == kExitOk) rc = copy_rc;
  }
  return rc;
}

int RunCapture(const GlobalOptions& g, const CaptureFlags& f) {
  profd::v1::CaptureRequest request;
  absl::Duration duration;
  if (std::string bad = BuildCaptureRequest(f, &request, &duration); !bad.empty()) {
    std::cerr << "profctl: " << bad << "\n";
    return kExitUsage;
  }
  if (f.fleet.wanted()) {
    if (!f.output.empty()) {
      std::cerr << "profctl: --output copies one node's traces; a capture across nodes keeps "
                   "them in the shared store: `profctl report FLEET_ID`, `profctl list`\n";
      return kExitUsage;
    }
    FleetFlags fleet = f.fleet;
    fleet.name_space = f.pod_namespace;
    return RunFleetCapture(g, fleet, request, f.no_progress);
  }
  if (f.pids.empty() && !f.all && f.pod.empty()) {
    std::cerr << "profctl: say what to capture: --pid PID (see `profctl agents`), --pod NAME or "
                 "--all; across nodes -l SELECTOR, --deployment NAME or --job NAME\n";
    return kExitUsage;
  }

  ProfdClient client(ResolveTarget(g.target), g.tls);
  const CaptureStreamEnd end = FollowCapture(g, f, request, duration, &client);
  const profd::v1::CaptureInfo& last = end.last;
  if (end.detached) {
    std::cerr << "profctl: detached"
              << (last.capture_id().empty() ? ""
                  : end.stop_asked
                      ? "; capture " + last.capture_id() +
                            " is stopping in profd, keeping what was captured: see `profctl "
                            "captures`"
                      : "; capture " + last.capture_id() + " goes on: see `profctl captures`")
              << "\n";
    return 130;  // as a shell reports an interrupted command
  }
  if (!end.status.ok() && !last.capture_id().empty() &&
      (end.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
       end.status.error_code() == grpc::StatusCode::CANCELLED ||
       end.status.error_code() == grpc::StatusCode::INTERNAL)) {
    // profd was there (it answered with the capture) and went away: not "is it running?".
    std::cerr << "profctl: profd stopped during capture " << last.capture_id() << " ("
              << Printable(end.status.error_message())
              << "); a profd that restarts repairs its trace: see `profctl captures` then\n";
    return kExitError;
  }
  if (!end.status.ok()) return Fail(client, end.status);
  if (!end.have_final) {
    std::cerr << "profctl: lost the connection to profd before the capture ended; it goes on: "
                 "see `profctl captures`\n";
    return kExitError;
  }
  return ReportCaptureEnd(g, f, client, last);
}

int RunCaptures(const GlobalOptions& g, uint32_t limit) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::ListCapturesRequest request;
  request.set_limit(limit);
  profd::v1::ListCapturesResponse response;
  grpc::Status status = client.stub().ListCaptures(WithDeadline(&ctx, g), request, &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  std::set<std::string> not_spooled;
  for (const profd::v1::StoredTrace& t : WaitingForRoom(client, g)) {
    not_spooled.insert(t.capture_id());
  }
  analysis::TextTable table(
      {"ID", "STATE", "REQUESTED", "DURATION>", "PIDS", "EVENTS>", "LOCATION"}, 70);
  for (const auto& c : response.captures()) {
    std::string pids;
    uint64_t events = 0;
    for (const auto& p : c.processes()) {
      absl::StrAppend(&pids, pids.empty() ? "" : ",", p.pid());
      events += p.events();
    }
    table.AddRow({c.capture_id(),
                  not_spooled.count(c.capture_id()) ? PhaseName(c.phase()) + ", NOT STORED"
                                                    : PhaseName(c.phase()),
                  Ago(c.requested_unix_ns()),
                  absl::FormatDuration(absl::Milliseconds(c.duration_ms())), pids,
                  FormatCount(events), c.location()});
  }
  std::cout << (table.empty() ? "No captures yet on this profd.\n" : table.Render(""));
  if (!not_spooled.empty()) {
    std::cout << "\n"
              << not_spooled.size()
              << " finished capture(s) NOT STORED: profd's spool could not take them (`profctl "
                 "spool` says why); they are kept in their capture folder and retried\n";
  }
  if (response.omitted() > 0) {
    std::cerr << "profctl: " << response.omitted()
              << " more captures not shown: profd's answer is capped at 16 MiB (ask for fewer "
                 "with --limit)\n";
  }
  return kExitOk;
}

int RunCancel(const GlobalOptions& g, const std::string& id) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::CancelCaptureRequest request;
  request.set_capture_id(id);
  profd::v1::CaptureInfo response;
  grpc::Status status = client.stub().CancelCapture(WithDeadline(&ctx, g), request, &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
  } else {
    std::cout << "Capture " << id << ": " << PhaseName(response.phase())
              << (CaptureIsOver(response) ? "" : ", stopping") << "\n";
  }
  return kExitOk;
}

struct RecorderFlags {
  std::string state;  // on | off
  CaptureFlags targets;
  std::string span = "10s";
  uint64_t max_mib = 64;
  std::string duty;  // "100ms/1s": duty-cycled
};

// --duty ON/PERIOD ("100ms/1s") into the request; "" when it parses, else the message.
std::string SetDuty(const std::string& duty, profd::v1::SetRecorderRequest* request) {
  if (duty.empty()) return "";
  const size_t slash = duty.find('/');
  absl::Duration on, period;
  std::string bad = slash == std::string::npos
                        ? "--duty wants ON/PERIOD, e.g. 100ms/1s (100 ms of every second)"
                        : ParseDurationFlag("--duty", duty.substr(0, slash), absl::Milliseconds(1),
                                            absl::Minutes(1), &on);
  if (bad.empty()) {
    bad = ParseDurationFlag("--duty", duty.substr(slash + 1), absl::Milliseconds(2),
                            absl::Minutes(1), &period);
  }
  if (bad.empty() && on >= period) bad = "--duty " + duty + ": ON must be shorter than PERIOD";
  if (!bad.empty()) return bad;
  request->set_duty_on_ms(absl::ToInt64Milliseconds(on));
  request->set_duty_period_ms(absl::ToInt64Milliseconds(period));
  return "";
}

int RunRecorder(const GlobalOptions& g, const RecorderFlags& f) {
  profd::v1::CaptureRequest which;
  absl::Duration span;
  std::string bad = SetTargets(f.targets, &which);
  if (bad.empty() && which.pids().empty() && !which.all() && which.pod_name().empty()) {
    bad = "say which processes: --pid, --pod or --all";
  }
  if (bad.empty()) {
    bad = ParseDurationFlag("--span", f.span, absl::Seconds(1),
                            absl::Milliseconds(profd::v1::kMaxBeforeMs), &span);
  }
  if (bad.empty() && (f.max_mib < 8 || f.max_mib > 4096)) {
    bad = "--max-mib " + std::to_string(f.max_mib) + " is outside 8..4096";
  }
  profd::v1::SetRecorderRequest request;
  if (bad.empty()) bad = SetDuty(f.duty, &request);
  if (!bad.empty()) {
    std::cerr << "profctl: " << bad << "\n";
    return kExitUsage;
  }
  *request.mutable_pids() = which.pids();
  request.set_all(which.all());
  request.set_pod_name(which.pod_name());
  request.set_pod_namespace(which.pod_namespace());
  request.set_on(f.state == "on");
  request.set_seconds(absl::ToInt64Seconds(span));
  request.set_max_bytes(f.max_mib << 20);
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::SetRecorderResponse response;
  grpc::Status status = client.stub().SetRecorder(WithDeadline(&ctx, g), request, &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  std::vector<std::string> pids;
  for (uint32_t pid : response.pids()) pids.push_back(std::to_string(pid));
  std::cout << "Flight recorder " << f.state << " for pid " << absl::StrJoin(pids, ", ");
  if (request.on()) {
    std::cout << ": the last " << absl::FormatDuration(span) << ", at most " << f.max_mib
              << " MiB per process" << (f.duty.empty() ? "" : ", duty-cycled " + f.duty)
              << ". `profctl capture --before " << absl::FormatDuration(span)
              << "` begins that far back; `profctl agents` shows what each holds";
  }
  std::cout << "\n";
  return kExitOk;
}

void AddRecorderCommand(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto r = std::make_shared<RecorderFlags>();
  CLI::App* recorder = app.add_subcommand(
      "recorder", "Turn a process's GPU flight recorder on or off (capture --before reads it)");
  recorder->add_option("state", r->state, "on or off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));
  recorder->add_option("--pid", r->targets.pids, "Process (repeat for several)");
  recorder->add_flag("--all", r->targets.all, "Every process with an agent on this node");
  recorder->add_option("--pod", r->targets.pod, "Every process of this pod: POD or NAMESPACE/POD");
  recorder->add_option("-n,--namespace", r->targets.pod_namespace, "Namespace of --pod");
  recorder->add_option("--span", r->span, "How much to keep (default 10s)");
  recorder->add_option("--max-mib", r->max_mib, "Memory bound per process (default 64)");
  recorder->add_option("--duty", r->duty,
                       "Record ON of every PERIOD (e.g. 100ms/1s): a sample of the time at a "
                       "fraction of the cost");
  recorder->callback([&g, rc, r] { *rc = RunRecorder(g, *r); });
}

}  // namespace

bool CaptureIsOver(const profd::v1::CaptureInfo& info) {
  return info.phase() == profd::v1::CAPTURE_PHASE_DONE ||
         info.phase() == profd::v1::CAPTURE_PHASE_FAILED ||
         info.phase() == profd::v1::CAPTURE_PHASE_CANCELLED;
}

void AddCaptureCommands(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto f = std::make_shared<CaptureFlags>();
  CLI::App* capture = app.add_subcommand(
      "capture", "Capture CUDA activity of running processes for a while, then summarize it");
  capture->add_option("--pid", f->pids, "Process to capture (repeat for several)");
  capture->add_flag("--all", f->all, "Every process with an agent on this node");
  capture->add_option("--pod", f->pod,
                      "Every process of this Kubernetes pod: POD (with -n NAMESPACE), or "
                      "NAMESPACE/POD, as the POD and NAMESPACE columns of `agents` say");
  capture->add_option("-n,--namespace", f->pod_namespace,
                      "Namespace of --pod, -l, --deployment, --job (default: the kubeconfig "
                      "context's)");
  capture->add_option("-l,--selector", f->fleet.selector,
                      "Across nodes: the pods this Kubernetes label selector picks (app=llm)");
  capture->add_option("--deployment", f->fleet.deployment,
                      "Across nodes: the pods of this Deployment");
  capture->add_option("--job", f->fleet.job, "Across nodes: the pods of this Job");
  capture->add_option("--kubeconfig", f->fleet.kubeconfig,
                      "Kubernetes credentials (default as kubectl: $KUBECONFIG, ~/.kube/config, "
                      "else the pod's service account)");
  capture->add_option("--context", f->fleet.context, "kubeconfig context (default: current)");
  capture->add_option("--node-address", f->fleet.node_address,
                      "Each node's profd, from {node_ip} (the pod's hostIP) and {node_name} "
                      "(default {node_ip}:7465); mutual TLS with --tls-ca/--tls-cert/--tls-key, "
                      "--tls-server-name may use the same names");
  capture->add_option("--node-timeout", f->fleet.node_timeout,
                      "Across nodes: how long after the window a node may take before it is "
                      "reported failed (default 30s)");
  capture->add_option("--lead", f->fleet.lead,
                      "Across nodes without --start-at/--delay: every node starts this long after "
                      "the pods are found (default 2s)");
  capture->add_option("--duration", f->duration, "How long to capture (default 5s)");
  capture->add_option("--delay", f->delay, "Start this long after the request (e.g. 2s)");
  capture->add_option("--start-at", f->start_at,
                      "Start at this wall-clock time (RFC 3339), for a common start across nodes");
  capture->add_option("--before", f->before,
                      "Begin this long before the request (e.g. 10s) with what each process's "
                      "flight recorder kept (profctl recorder on)");
  capture->add_option("--kinds", f->kinds,
                      "Activities, comma-separated (default kernel,memcpy,memset,runtime,sync; "
                      "also driver,nvtx,memory,overhead)");
  capture->add_option("--max-events", f->max_events, "Cut each process's trace after this many");
  capture->add_option("-o,--output", f->output, "Copy the trace here (a folder for several)");
  capture->add_option("--label", f->label, "Free text kept with the capture");
  capture->add_option("--reason", f->reason,
                      "Why you capture (an incident, a ticket): in the capture's manifest and, "
                      "where profd authorizes with Kubernetes, its audit line");
  capture->add_flag("--no-progress", f->no_progress, "No progress line");
  capture->add_option("--via", f->via,
                      "auto (default: through Kineto when the process polls profd's Kineto "
                      "socket, with CPU operators; else the agent), kineto, or cupti (the agent)");
  capture
      ->add_option("--format", f->format,
                   "Trace format: json (Chrome trace JSON: HTA, TensorBoard, Perfetto UI) or "
                   "perfetto (Perfetto protobuf, 2.5x smaller; Perfetto UI, trace_processor). "
                   "Default: profd's --trace_format (json). Kineto's own traces stay JSON")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names;
        for (const TraceFormatInfo& format : TraceFormats()) names.emplace_back(format.name);
        return names;
      }()));
  capture->add_flag("--gpu-metrics", f->gpu_metrics,
                    "Sample each GPU's hardware counters (SM, tensor pipes, DRAM, PCIe) over the "
                    "window: counter tracks in the trace, per-kernel throughputs and what bounds "
                    "each kernel in the report");
  capture->add_option(
      "--gpu-metrics-interval", f->gpu_metrics_interval,
      "Sampling interval of --gpu-metrics (default 1ms; 20us to 1s). 100us resolves "
      "shorter kernels but cost GPT-2 ~+14 % vs ~+2 % at 1ms on an H200 "
      "(docs/HARDWARE_COUNTERS.md)");
  capture->add_flag("--record-shapes", f->record_shapes,
                    "Through Kineto: operator input shapes (torch.profiler record_shapes)");
  capture->add_flag("--with-stack", f->with_stack,
                    "Through Kineto: Python stacks (torch.profiler with_stack)");
  capture->add_flag("--profile-memory", f->profile_memory,
                    "Through Kineto: memory events (torch.profiler profile_memory)");
  capture->callback([&g, rc, f] { *rc = RunCapture(g, *f); });

  auto limit = std::make_shared<uint32_t>(20);
  CLI::App* captures = app.add_subcommand("captures", "List recent captures on this profd");
  captures->add_option("--limit", *limit, "How many (default 20)");
  captures->callback([&g, rc, limit] { *rc = RunCaptures(g, *limit); });

  auto id = std::make_shared<std::string>();
  CLI::App* cancel =
      app.add_subcommand("cancel", "Stop a running capture early (keeps its events)");
  cancel->add_option("id", *id, "Capture id")->required();
  cancel->callback([&g, rc, id] { *rc = RunCancel(g, *id); });

  AddRecorderCommand(app, g, rc);
}

}  // namespace profctl

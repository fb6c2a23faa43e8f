#include "daemon/capture/kineto_source.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "analysis/trace_reader.h"
#include "daemon/capture/capture_session.h"
#include "daemon/kineto/kineto_trace_file.h"
#include "daemon/trace/trace_format.h"

namespace profd {
namespace {

ssize_t read_fd(int fd, char* buf, size_t cap) { return read(fd, buf, cap); }

// The copy's parse keeps no event.
class DiscardEvents : public analysis::TraceEventSink {
 public:
  void Add(const analysis::GpuActivity&) override {}
  void Add(const analysis::HostCall&) override {}
  void Add(const analysis::CpuOp&) override {}
  void Add(const analysis::CounterSample&) override {}
};

}  // namespace

KinetoSource::KinetoSource(kineto::KinetoIpcServer* server, uint32_t pid, uid_t uid,
                           std::string folder, uint64_t max_trace_bytes, int gzip_level)
    : server_(server),
      pid_(pid),
      uid_(uid),
      folder_(std::move(folder)),
      max_trace_bytes_(max_trace_bytes),
      gzip_level_(gzip_level),
      file_name_(TraceFileName(pid, TraceFormat::kChromeJson)) {}

KinetoSource::~KinetoSource() { Withdraw(); }

absl::Status KinetoSource::Offer(const kineto::KinetoTraceRequest& request, absl::Time expires,
                                 std::function<void(Event)> notify) {
  capture_id_ = request.capture_id;
  kineto::KinetoIpcServer::Offer offer;
  offer.config = [request](absl::Time delivered) {
    return kineto::BuildKinetoConfig(request, delivered);
  };
  offer.expires = expires;
  offer.on_delivered = [notify](const kineto::KinetoClient& client, absl::Time at) {
    notify(Event{Event::kDelivered, at, client.ns_pid});
  };
  offer.on_expired = [notify] { notify(Event{Event::kExpired, absl::Now(), 0}); };
  absl::Status s = server_->Make(pid_, std::move(offer));
  offered_ = s.ok();
  return s;
}

kineto::KinetoTraceRequest KinetoSource::ConfigFor(const v1::CaptureInfo& capture,
                                                   const v1::CaptureRequest& request) {
  kineto::KinetoTraceRequest config;
  config.capture_id = capture.capture_id();
  config.duration = absl::Milliseconds(capture.duration_ms());
  const absl::Time start_at = absl::FromUnixNanos(capture.start_at_unix_ns());
  if (start_at > absl::FromUnixNanos(capture.requested_unix_ns())) config.start_at = start_at;
  config.record_shapes = request.record_shapes();
  config.with_stack = request.with_stack();
  config.profile_memory = request.profile_memory();
  return config;
}

absl::Time KinetoSource::OfferExpiry(const v1::CaptureInfo& capture, absl::Duration poll_period,
                                     absl::Duration start_timeout, absl::Time now) {
  const absl::Time start_at = absl::FromUnixNanos(capture.start_at_unix_ns());
  return std::max(start_at, now) + 2 * std::max(poll_period, absl::Seconds(5)) + start_timeout;
}

bool KinetoSource::Apply(const Event& event, const v1::CaptureInfo& capture,
                         absl::Duration finish_timeout, v1::ProcessCapture* p) {
  if (CaptureSession::Terminal(p->state())) return false;
  if (event.kind == Event::kExpired) {
    p->set_state(v1::CAPTURE_STATE_FAILED);
    p->set_error(v1::CAPTURE_ERROR_CUPTI_IN_USE);
    std::optional<kineto::KinetoClient> client =
        server_ != nullptr ? server_->Find(p->pid()) : std::nullopt;
    p->set_message(
        !client ? "the process stopped polling profd's Kineto socket (exited?) before it took "
                  "the capture"
        : client->busy
            ? "Kineto stayed busy collecting another trace in this process (a torch.profiler "
              "session): capture again when it ends"
            : "Kineto did not take the capture at its polls (KINETO_USE_DAEMON=1 set?)");
    return true;
  }
  Delivered(event.pid_in_namespace);
  const absl::Time start =
      kineto::KinetoStart(absl::FromUnixNanos(capture.start_at_unix_ns()), event.at);
  p->set_state(v1::CAPTURE_STATE_STARTED);
  p->set_enabled_unix_ns(absl::ToUnixNanos(start));
  p->set_start_latency_ns(absl::ToInt64Nanoseconds(
      start -
      absl::FromUnixNanos(std::max(capture.requested_unix_ns(), capture.start_at_unix_ns()))));
  // Kineto writes the trace when the window ends, the whole JSON at once.
  deadline_ = start + absl::Milliseconds(capture.duration_ms()) + finish_timeout;
  return true;
}

bool KinetoSource::Collect(absl::Time now, int64_t duration_ms, absl::Duration finish_timeout,
                           v1::ProcessCapture* p) {
  if (p->state() != v1::CAPTURE_STATE_STARTED) return false;
  absl::Status collected = TryCollect();
  if (collected.ok()) {
    collected_ = true;
    p->set_state(v1::CAPTURE_STATE_FINISHED);
    p->set_disabled_unix_ns(p->enabled_unix_ns() + duration_ms * 1'000'000);
    return true;
  }
  if (absl::IsNotFound(collected) && now <= deadline_) return false;
  p->set_state(v1::CAPTURE_STATE_FAILED);
  p->set_message(absl::IsNotFound(collected)
                     ? absl::StrCat("Kineto took the capture but wrote no trace within ",
                                    absl::FormatDuration(finish_timeout),
                                    " of its end (a torch.profiler session in the process "
                                    "pre-empts on-demand traces)")
                     : std::string(collected.message()));
  return true;
}

absl::StatusOr<analysis::Report> KinetoSource::Analyze(const std::vector<std::string>& paths,
                                                       uint64_t events, uint64_t max_exact_events) {
  if (events <= max_exact_events) return analysis::AnalyzeTraceFiles(paths);
  absl::StatusOr<analysis::Report> report = analysis::AnalyzeTraceFilesStreaming(paths);
  if (report.ok()) {
    report->notes.push_back(absl::StrCat(
        "The Kineto traces hold ", events, " events, more than profd analyses in memory (",
        max_exact_events,
        ", CaptureOptions::kineto_max_exact_events): they were analysed streaming, so the "
        "operator table has no CUDA time. `profctl report` on the trace file gives it."));
  }
  return report;
}

void KinetoSource::Withdraw() {
  if (offered_ && !delivered()) server_->Withdraw(pid_);
  offered_ = false;
}

absl::Status KinetoSource::TryCollect() {
  absl::StatusOr<kineto::KinetoTraceFile> file = kineto::KinetoTraceFile::Open(
      static_cast<pid_t>(pid_), uid_,
      kineto::KinetoTraceFileAsWritten(capture_id_, pid_in_namespace_), max_trace_bytes_);
  if (!file.ok()) return file.status();
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  const std::string path = folder_ + "/" + file_name_;
  gzFile out = gzopen(path.c_str(), absl::StrCat("wb", gzip_level_).c_str());
  if (out == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  // Each chunk read goes to the copy and to the parser; a copy error stops the parse with it.
  uint64_t copied = 0;
  const analysis::ReadChunk read = [&](char* buf, size_t cap) -> absl::StatusOr<size_t> {
    const ssize_t n = read_fd(file->fd(), buf, cap);
    if (n < 0) {
      return absl::InternalError(absl::StrCat("reading Kineto's trace: ", std::strerror(errno)));
    }
    copied += static_cast<uint64_t>(n);
    if (copied > max_trace_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Kineto's trace grew past the ", max_trace_bytes_,
                       "-byte limit while profd read it (profd --kineto_max_trace_bytes)"));
    }
    if (n > 0 && gzwrite(out, buf, static_cast<unsigned>(n)) != n) {
      return absl::ResourceExhaustedError(absl::StrCat("writing ", path, " failed (disk full?)"));
    }
    return static_cast<size_t>(n);
  };
  // Names only (bounded by its NameTable): the events are counted and dropped; the capture's
  // report reads the copy once it is whole (CaptureOrchestrator's Finalize).
  analysis::Trace tables;
  DiscardEvents discard;
  analysis::ReadLimits limits;
  limits.require_object = true;
  absl::Status status = analysis::StreamTrace(read, absl::StrCat("Kineto's trace of pid ", pid_),
                                              &tables, &discard, limits);
  if (!status.ok() && status.code() == absl::StatusCode::kInvalidArgument) {
    status = absl::InvalidArgumentError(absl::StrCat(
        status.message(), " (", copied,
        " bytes read; the file the process wrote where Kineto writes its trace is not one)"));
  }
  if (gzclose(out) != Z_OK && status.ok()) {
    status = absl::ResourceExhaustedError(absl::StrCat("writing ", path, " failed (disk full?)"));
  }
  if (!status.ok()) {
    unlink(path.c_str());
    return status;
  }
  trace_bytes_ = copied;
  trace_events_ = tables.files.empty() ? 0 : tables.files.back().events;
  // It is profd's now: the process's /tmp does not keep a copy of every capture.
  (void)file->Remove();
  return absl::OkStatus();
}

}  // namespace profd

#include "daemon/capture/kineto_source.h"

#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/analysis/trace_reader.h"
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

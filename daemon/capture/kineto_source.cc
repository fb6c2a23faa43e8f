#include "daemon/capture/kineto_source.h"

#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/kineto/kineto_trace_file.h"

namespace profd {

KinetoSource::KinetoSource(kineto::KinetoIpcServer* server, uint32_t pid, uid_t uid,
                           std::string folder, uint64_t max_trace_bytes, int gzip_level)
    : server_(server),
      pid_(pid),
      uid_(uid),
      folder_(std::move(folder)),
      max_trace_bytes_(max_trace_bytes),
      gzip_level_(gzip_level),
      file_name_(absl::StrCat("trace-", pid, ".json.gz")) {}

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
  std::vector<char> buf(1 << 20);
  uint64_t copied = 0;
  absl::Status status;
  while (true) {
    ssize_t n = read(file->fd(), buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      status = absl::InternalError(absl::StrCat("reading Kineto's trace: ", std::strerror(errno)));
      break;
    }
    copied += static_cast<uint64_t>(n);
    if (copied > max_trace_bytes_) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("Kineto's trace grew past the ", max_trace_bytes_,
                       "-byte limit while profd read it (profd --kineto_max_trace_bytes)"));
      break;
    }
    if (gzwrite(out, buf.data(), static_cast<unsigned>(n)) != n) {
      status = absl::ResourceExhaustedError(absl::StrCat("writing ", path, " failed (disk full?)"));
      break;
    }
  }
  if (gzclose(out) != Z_OK && status.ok()) {
    status = absl::ResourceExhaustedError(absl::StrCat("writing ", path, " failed (disk full?)"));
  }
  if (!status.ok()) {
    unlink(path.c_str());
    return status;
  }
  trace_bytes_ = copied;
  // It is profd's now: the process's /tmp does not keep a copy of every capture.
  (void)file->Remove();
  return absl::OkStatus();
}

}  // namespace profd

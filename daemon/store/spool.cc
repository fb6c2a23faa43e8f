#include "daemon/store/spool.h"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/log.h"
#include "daemon/store/byte_size.h"

namespace profd::store {

namespace fs = std::filesystem;

namespace {

constexpr char kComponent[] = "spool";

uint64_t FolderBytes(const std::string& folder) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(folder, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

absl::Status MoveFolder(const std::string& from, const std::string& to) {
  if (rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  if (errno == EEXIST || errno == ENOTEMPTY) {
    return absl::AlreadyExistsError(absl::StrCat(to, " already exists"));
  }
  if (errno != EXDEV) {
    return absl::InternalError(
        absl::StrCat("cannot move ", from, " to ", to, ": ", std::strerror(errno)));
  }
  // Another file system: copy beside the target, then rename, so pending/ never holds half.
  std::error_code ec;
  std::string temp = to + ".partial";
  fs::remove_all(temp, ec);
  fs::copy(from, temp, fs::copy_options::recursive, ec);
  if (ec || rename(temp.c_str(), to.c_str()) != 0) {
    fs::remove_all(temp, ec);
    return absl::InternalError(absl::StrCat("cannot copy ", from, " to ", to));
  }
  fs::remove_all(from, ec);
  return absl::OkStatus();
}

}  // namespace

Spool::Spool(SpoolOptions options, TraceStore* store)
    : options_(std::move(options)), store_(store), backoff_(options_.retry_initial) {
  stats_.capacity_bytes = options_.max_bytes;
}

absl::StatusOr<std::unique_ptr<Spool>> Spool::Open(SpoolOptions options, TraceStore* store) {
  std::unique_ptr<Spool> spool(new Spool(std::move(options), store));
  const std::string& dir = spool->options_.dir;
  for (const char* sub : {"incoming", "pending", "failed"}) {
    std::error_code ec;
    fs::create_directories(fs::path(dir) / sub, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create the spool folder ", dir, "/",
                                                      sub, ": ", ec.message(),
                                                      ". Pick a writable one with --spool_dir"));
    }
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the spool folder ", dir, " is not writable by profd: fix it or pick --spool_dir"));
  }

  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "incoming", ec)) {
    LogWarning(kComponent, "removing %s: a capture that never finished (profd stopped during it)",
               entry.path().string());
    fs::remove_all(entry.path(), ec);
  }
  std::vector<std::string> pending;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "pending", ec)) {
    if (entry.is_directory()) pending.push_back(entry.path().string());
  }
  std::sort(pending.begin(), pending.end());  // ids start with their time: oldest first
  MutexLock lock(&spool->mu_);
  for (const std::string& folder : pending) {
    if (absl::EndsWith(folder, ".partial")) {
      fs::remove_all(folder, ec);
      continue;
    }
    absl::StatusOr<v1::StoredTrace> trace = DescribeCaptureFolder(folder, spool->options_.hostname);
    if (!trace.ok()) {
      std::string to = (fs::path(dir) / "failed" / fs::path(folder).filename()).string();
      LogError(kComponent, "cannot upload %s, moved to %s: %s", folder, to,
               trace.status().message());
      (void)MoveFolder(folder, to);
      continue;
    }
    spool->Enqueue(*std::move(trace), folder);
  }
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "failed", ec)) {
    spool->failed_bytes_ += FolderBytes(entry.path().string());
    ++spool->stats_.failed;
  }
  if (!spool->queue_.empty()) {
    LogInfo(kComponent, "resuming %d pending uploads (%s) to %s", spool->queue_.size(),
            FormatBytes(spool->queued_bytes_), store->uri());
  }
  spool->uploader_ = std::thread([s = spool.get()] { s->UploadLoop(); });
  return spool;
}

Spool::~Spool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  if (uploader_.joinable()) uploader_.join();
}

void Spool::Enqueue(v1::StoredTrace trace, std::string folder) {
  trace.set_state(v1::TRACE_STATE_SPOOLED);
  trace.set_location(store_->LocationOf(trace));
  queued_bytes_ += trace.bytes();
  queue_.push_back(Item{std::move(trace), std::move(folder)});
  wake_.Signal();
}

uint64_t Spool::UsedBytesLocked() const {
  uint64_t used = queued_bytes_ + failed_bytes_;
  for (const auto& [id, bytes] : reservations_) used += bytes;
  return used;
}

absl::Status Spool::CheckSpaceLocked(uint64_t expected_bytes) const {
  uint64_t used = UsedBytesLocked();
  // Written so that no sum can wrap: expected_bytes comes from clients.
  if (used < options_.max_bytes && expected_bytes <= options_.max_bytes - used) {
    return absl::OkStatus();
  }
  std::string why = stats_.last_error.empty()
                        ? ""
                        : absl::StrCat(" (last upload error: ", stats_.last_error, ")");
  return absl::ResourceExhaustedError(absl::StrCat(
      "spool full: ", FormatBytes(used), " of ", FormatBytes(options_.max_bytes), " in ",
      options_.dir, " are held by ", queue_.size(), " finished captures waiting for upload to ",
      store_->uri(), why, " and ", reservations_.size(), " running; this capture needs about ",
      FormatBytes(expected_bytes),
      ". Finished traces are never dropped, so new captures are refused until uploads drain: fix "
      "the store, or raise --spool_max_bytes"));
}

absl::Status Spool::CheckSpace(uint64_t expected_bytes) const {
  MutexLock lock(&mu_);
  return CheckSpaceLocked(expected_bytes);
}

absl::StatusOr<std::string> Spool::Reserve(const std::string& capture_id, uint64_t expected_bytes) {
  if (absl::Status s = ValidateCaptureId(capture_id); !s.ok()) return s;
  std::string folder = (fs::path(options_.dir) / "incoming" / capture_id).string();
  MutexLock lock(&mu_);
  if (absl::Status s = CheckSpaceLocked(expected_bytes); !s.ok()) {
    ++stats_.refused_total;
    return s;
  }
  bool queued = std::any_of(queue_.begin(), queue_.end(), [&](const Item& item) {
    return item.trace.capture_id() == capture_id;
  });
  if (reservations_.count(capture_id) || queued) {
    return absl::AlreadyExistsError(absl::StrCat("capture ", capture_id, " is already spooled"));
  }
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", folder, ": ", ec.message()));
  }
  reservations_[capture_id] = expected_bytes;
  return folder;
}

absl::Status Spool::Grow(const std::string& capture_id, uint64_t bytes) {
  MutexLock lock(&mu_);
  auto it = reservations_.find(capture_id);
  if (it == reservations_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("capture ", capture_id, " has no reservation in the spool"));
  }
  if (bytes <= it->second) return absl::OkStatus();
  const uint64_t held = it->second;
  // Checked as if this reservation were not there yet, so the message names the whole need.
  it->second = 0;
  absl::Status room = CheckSpaceLocked(bytes);
  it->second = room.ok() ? bytes : held;
  if (!room.ok()) ++stats_.refused_total;
  return room;
}

absl::StatusOr<v1::StoredTrace> Spool::Submit(const std::string& capture_id,
                                              const std::string& folder) {
  if (absl::Status s = ValidateCaptureId(capture_id); !s.ok()) return s;
  const std::string source = SourceOf(capture_id, folder);
  absl::StatusOr<v1::StoredTrace> trace = DescribeCaptureFolder(source, options_.hostname);
  if (!trace.ok()) return trace.status();
  if (trace->capture_id() != capture_id) {
    return absl::FailedPreconditionError(absl::StrCat(source, "/manifest.json says capture_id ",
                                                      trace->capture_id(),
                                                      ", but it was submitted as ", capture_id));
  }
  return Queue(*trace, source);
}

absl::StatusOr<v1::StoredTrace> Spool::Submit(v1::StoredTrace described,
                                              const std::string& folder) {
  if (absl::Status s = ValidateCaptureId(described.capture_id()); !s.ok()) return s;
  if (described.hostname().empty()) described.set_hostname(options_.hostname);
  if (described.source().empty()) described.set_source("capture");
  const std::string source = SourceOf(described.capture_id(), folder);
  if (absl::Status s = AddFolderFiles(source, &described); !s.ok()) return s;
  // pending/ holds only folders a restarted profd can describe again.
  if (std::none_of(described.files().begin(), described.files().end(),
                   [](const v1::StoredFile& f) { return f.name() == kManifestFile; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "capture folder ", source, " has no manifest.json: a finished capture must have one"));
  }
  return Queue(described, source);
}

std::string Spool::SourceOf(const std::string& capture_id, const std::string& folder) const {
  return folder.empty() ? (fs::path(options_.dir) / "incoming" / capture_id).string() : folder;
}

absl::StatusOr<v1::StoredTrace> Spool::Queue(const v1::StoredTrace& trace,
                                             const std::string& source) {
  const std::string& capture_id = trace.capture_id();
  std::string target = (fs::path(options_.dir) / "pending" / capture_id).string();
  MutexLock lock(&mu_);
  if (absl::Status s = MoveFolder(source, target); !s.ok()) return s;
  reservations_.erase(capture_id);
  Enqueue(trace, target);
  LogInfo(kComponent, "capture %s spooled (%s), uploading to %s", capture_id,
          FormatBytes(trace.bytes()), queue_.back().trace.location());
  return queue_.back().trace;
}

absl::StatusOr<v1::StoredTrace> Spool::SubmitCopy(v1::StoredTrace described,
                                                  const std::string& folder) {
  const std::string capture_id = described.capture_id();
  absl::StatusOr<std::string> copy = Reserve(capture_id, FolderBytes(folder));
  if (!copy.ok()) return copy.status();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (!entry.is_regular_file()) continue;
    fs::path to = fs::path(*copy) / entry.path().filename();
    if (link(entry.path().c_str(), to.c_str()) != 0) {
      fs::copy_file(entry.path(), to, fs::copy_options::overwrite_existing, ec);
      if (ec) break;
    }
  }
  if (ec) {
    Abandon(capture_id);
    return absl::InternalError(
        absl::StrCat("cannot copy ", folder, " into the spool ", *copy, ": ", ec.message()));
  }
  absl::StatusOr<v1::StoredTrace> queued = Submit(std::move(described));
  if (!queued.ok()) Abandon(capture_id);
  return queued;
}

void Spool::Abandon(const std::string& capture_id) {
  if (!ValidateCaptureId(capture_id).ok()) return;
  std::error_code ec;
  fs::remove_all(fs::path(options_.dir) / "incoming" / capture_id, ec);
  MutexLock lock(&mu_);
  reservations_.erase(capture_id);
}

SpoolStats Spool::stats() const {
  MutexLock lock(&mu_);
  SpoolStats s = stats_;
  s.bytes = UsedBytesLocked();
  s.pending = static_cast<uint32_t>(queue_.size());
  s.reserved = static_cast<uint32_t>(reservations_.size());
  return s;
}

std::vector<v1::StoredTrace> Spool::Pending() const {
  MutexLock lock(&mu_);
  std::vector<v1::StoredTrace> out;
  for (const Item& item : queue_) {
    out.push_back(item.trace);
    out.back().set_upload_error(stats_.last_error);
  }
  return out;
}

std::optional<std::pair<v1::StoredTrace, std::string>> Spool::FindPending(
    const std::string& capture_id) const {
  MutexLock lock(&mu_);
  for (const Item& item : queue_) {
    if (item.trace.capture_id() == capture_id) {
      v1::StoredTrace trace = item.trace;
      trace.set_upload_error(stats_.last_error);
      return std::make_pair(trace, item.folder);
    }
  }
  return std::nullopt;
}

void Spool::UploadLoop() {
  for (;;) {
    Item item;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && (queue_.empty() || absl::Now() < stats_.next_attempt)) {
        if (queue_.empty()) {
          Wait(&wake_, &mu_);
        } else {
          WaitWithDeadline(&wake_, &mu_, stats_.next_attempt);
        }
      }
      if (stopping_) return;
      item = queue_.front();
    }

    absl::Status status;
    std::error_code ec;
    const bool folder_gone = !fs::is_directory(item.folder, ec);
    if (folder_gone) {
      status = absl::NotFoundError("its spool folder was deleted");
    } else {
      status = store_->Put(item.trace, item.folder, /*may_move=*/true).status();
    }

    MutexLock lock(&mu_);
    if (status.ok() || folder_gone) {
      queue_.pop_front();
      queued_bytes_ -= std::min(queued_bytes_, item.trace.bytes());
      if (status.ok()) {
        fs::remove_all(item.folder, ec);
        ++stats_.uploaded_total;
        stats_.uploaded_bytes_total += item.trace.bytes();
        stats_.last_upload = absl::Now();
        stats_.last_error.clear();
        LogInfo(kComponent, "capture %s stored at %s", item.trace.capture_id(),
                item.trace.location());
      } else {
        LogError(kComponent, "capture %s dropped from the upload queue: %s",
                 item.trace.capture_id(), status.message());
      }
      backoff_ = options_.retry_initial;
      stats_.next_attempt = absl::InfinitePast();
    } else {
      ++stats_.upload_failures_total;
      stats_.last_error = std::string(status.message());
      stats_.next_attempt = absl::Now() + backoff_;
      LogWarning(kComponent, "upload of capture %s failed, %d waiting, retry in %s: %s",
                 item.trace.capture_id(), queue_.size(), absl::FormatDuration(backoff_),
                 status.message());
      backoff_ = std::min(backoff_ * 2, options_.retry_max);
    }
  }
}

}  // namespace profd::store

#include "daemon/store/spool.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
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

// "No space left on device (ENOSPC)": the words and the name a user can search for.
std::string ErrnoText(int error) {
  const char* name = strerrorname_np(error);
  return absl::StrCat(std::strerror(error), name != nullptr ? absl::StrCat(" (", name, ")") : "");
}

// A failed write into the spool. A full disk (or quota, or file size limit) is RESOURCE_EXHAUSTED
// and says which folder's file system is full; any other error is INTERNAL.
absl::Status WriteError(const std::string& what, int error, const std::string& spool_dir) {
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", ErrnoText(error),
                                                     ": the file system of the spool ", spool_dir,
                                                     " is full (or over a quota or size limit)"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", ErrnoText(error)));
}

// Copies a capture file into the spool with plain read/write, so that a failure carries the
// kernel's errno: std::filesystem::copy_file reports a short sendfile as EIO, hiding the ENOSPC
// (or EFBIG) a full disk gave. 0 on success, else the errno.
int CopyFile(const std::string& from, const std::string& to) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (out < 0) {
    const int error = errno;
    close(in);
    return error;
  }
  int error = 0;
  std::vector<char> buffer(1 << 20);
  while (error == 0) {
    ssize_t n = read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    for (ssize_t done = 0; done < n && error == 0;) {
      ssize_t w = write(out, buffer.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) error = errno;
      if (w > 0) done += w;
    }
  }
  // A full disk can also show only at close (NFS, some FUSE file systems).
  if (close(out) != 0 && error == 0) error = errno;
  close(in);
  return error;
}

// Errors that room (or time) can cure: a capture failing with one waits and is retried. Not a bad
// id, a folder without manifest, or an id already spooled.
bool WorthRetrying(const absl::Status& s) {
  return !absl::IsInvalidArgument(s) && !absl::IsFailedPrecondition(s) &&
         !absl::IsAlreadyExists(s) && !absl::IsNotFound(s);
}

absl::Status MoveFolder(const std::string& from, const std::string& to) {
  if (rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  if (errno == EEXIST || errno == ENOTEMPTY) {
    return absl::AlreadyExistsError(absl::StrCat(to, " already exists"));
  }
  if (errno != EXDEV) {
    return WriteError(absl::StrCat("cannot move ", from, " to ", to), errno,
                      fs::path(to).parent_path().parent_path().string());
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
    : options_(std::move(options)),
      store_(store),
      backoff_(options_.retry_initial),
      room_backoff_(options_.retry_initial) {
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
  spool->FindWaiting();
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
    if (ec.value() == EACCES || ec.value() == EPERM || ec.value() == EROFS) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", folder, ": ", ErrnoText(ec.value())));
    }
    return WriteError(absl::StrCat("cannot create ", folder), ec.value(), options_.dir);
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
  absl::StatusOr<v1::StoredTrace> queued = CopyIn(described, folder);
  if (queued.ok() || !WorthRetrying(queued.status())) return queued;
  return KeepWaiting(std::move(described), folder, queued.status());
}

absl::StatusOr<v1::StoredTrace> Spool::CopyIn(v1::StoredTrace described,
                                              const std::string& folder) {
  const std::string capture_id = described.capture_id();
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return absl::NotFoundError(absl::StrCat("the capture folder ", folder, " is gone"));
  }
  absl::StatusOr<std::string> copy = Reserve(capture_id, FolderBytes(folder));
  if (!copy.ok()) return copy.status();
  absl::Status copied;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    // Dot files are the capture code's and the spool's own (temporaries, kUnspooledMarker).
    if (!entry.is_regular_file() || entry.path().filename().string().starts_with(".")) continue;
    fs::path to = fs::path(*copy) / entry.path().filename();
    if (link(entry.path().c_str(), to.c_str()) == 0) continue;
    if (int error = CopyFile(entry.path().string(), to.string()); error != 0) {
      copied = WriteError(absl::StrCat("cannot copy ", entry.path().string(), " into the spool"),
                          error, options_.dir);
      break;
    }
  }
  if (copied.ok() && ec) {
    copied = absl::InternalError(absl::StrCat("cannot list ", folder, ": ", ec.message()));
  }
  if (!copied.ok()) {
    Abandon(capture_id);
    return copied;
  }
  absl::StatusOr<v1::StoredTrace> queued = Submit(std::move(described));
  if (!queued.ok()) Abandon(capture_id);
  return queued;
}

absl::Status Spool::KeepWaiting(v1::StoredTrace described, const std::string& folder,
                                const absl::Status& why) {
  const std::string capture_id = described.capture_id();
  const std::string marker = (fs::path(folder) / kUnspooledMarker).string();
  {
    // The mark lets a restarted profd find the capture again. Its disk may be full too: then only
    // this profd retries (retention still keeps the folder: the store does not have it).
    std::ofstream out(marker, std::ios::trunc);
    out << why.message() << "\n";
    out.close();
    if (!out) {
      LogWarning(kComponent,
                 "cannot mark %s as not yet spooled (%s): a restarted profd will not "
                 "retry it",
                 folder, std::strerror(errno));
    }
  }
  const absl::Duration retry = [&] {
    MutexLock lock(&mu_);
    ++stats_.write_failures_total;
    stats_.last_write_error = std::string(why.message());
    bool known = false;
    for (Waiting& w : waiting_) {
      if (w.described.capture_id() == capture_id) {
        w.error = stats_.last_write_error;
        known = true;
      }
    }
    if (!known) waiting_.push_back(Waiting{std::move(described), folder, stats_.last_write_error});
    if (next_room_attempt_ == absl::InfinitePast()) {
      next_room_attempt_ = absl::Now() + room_backoff_;
    }
    wake_.Signal();
    return room_backoff_;
  }();
  LogError(kComponent,
           "capture %s is not in the spool: %s. Its trace is kept in %s and goes to the spool "
           "when room returns (tried again after each upload, every %s at first, and at profd's "
           "start)",
           capture_id, why.message(), folder, absl::FormatDuration(retry));
  return absl::Status(
      why.code(),
      absl::StrCat("the trace is not stored yet: ", why.message(), ". It is kept in ", folder,
                   " and goes to the spool, then the store, when room returns (`profctl spool` "
                   "shows it waiting)"));
}

void Spool::FindWaiting() {
  if (options_.capture_dir.empty()) return;
  std::error_code ec;
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(options_.capture_dir, ec)) {
    std::error_code marker_ec;
    if (entry.is_directory(marker_ec) && fs::exists(entry.path() / kUnspooledMarker, marker_ec)) {
      folders.push_back(entry.path().string());
    }
  }
  std::sort(folders.begin(), folders.end());  // ids start with their time: oldest first
  for (const std::string& folder : folders) {
    const std::string marker = (fs::path(folder) / kUnspooledMarker).string();
    absl::StatusOr<v1::StoredTrace> described = DescribeCaptureFolder(folder, options_.hostname);
    if (!described.ok()) {
      LogError(kComponent, "%s is marked as not yet spooled but cannot be: %s", folder,
               described.status().message());
      continue;
    }
    const std::string& id = described->capture_id();
    // Spooled after all (profd stopped between the copy and the mark's removal).
    if (std::any_of(queue_.begin(), queue_.end(),
                    [&](const Item& item) { return item.trace.capture_id() == id; })) {
      fs::remove(marker, ec);
      continue;
    }
    std::ifstream in(marker);
    std::string why;
    std::getline(in, why);
    waiting_.push_back(Waiting{*std::move(described), folder,
                               absl::StrCat("not spooled before profd restarted: ", why)});
  }
  if (!waiting_.empty()) {
    stats_.last_write_error = waiting_.back().error;
    LogWarning(kComponent,
               "%d finished captures in %s were not spooled before profd stopped (%s): trying "
               "again now",
               waiting_.size(), options_.capture_dir, stats_.last_write_error);
    next_room_attempt_ = absl::InfinitePast();
  }
}

void Spool::RetryWaiting() {
  std::vector<Waiting> tries;
  {
    MutexLock lock(&mu_);
    tries.assign(waiting_.begin(), waiting_.end());
  }
  bool failed = false;
  for (Waiting& w : tries) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const std::string& id = w.described.capture_id();
    absl::StatusOr<v1::StoredTrace> queued = CopyIn(w.described, w.folder);
    const bool done = queued.ok() || !WorthRetrying(queued.status());
    MutexLock lock(&mu_);
    if (done) {
      waiting_.erase(
          std::remove_if(waiting_.begin(), waiting_.end(),
                         [&](const Waiting& x) { return x.described.capture_id() == id; }),
          waiting_.end());
      std::error_code ec;
      fs::remove(fs::path(w.folder) / kUnspooledMarker, ec);
      if (queued.ok()) {
        LogInfo(kComponent, "capture %s is in the spool now (it waited for room: %s)", id, w.error);
      } else {
        LogError(kComponent, "capture %s can no longer be spooled, left in %s: %s", id, w.folder,
                 queued.status().message());
      }
      continue;
    }
    failed = true;
    ++stats_.write_failures_total;
    stats_.last_write_error = std::string(queued.status().message());
    for (Waiting& x : waiting_) {
      if (x.described.capture_id() == id) x.error = stats_.last_write_error;
    }
    LogWarning(kComponent, "capture %s still cannot go to the spool, retry in %s: %s", id,
               absl::FormatDuration(room_backoff_), queued.status().message());
  }
  MutexLock lock(&mu_);
  if (waiting_.empty()) stats_.last_write_error.clear();
  if (failed) {
    next_room_attempt_ = absl::Now() + room_backoff_;
    room_backoff_ = std::min(room_backoff_ * 2, options_.retry_max);
  } else {
    next_room_attempt_ = absl::InfinitePast();
    room_backoff_ = options_.retry_initial;
  }
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
  s.waiting_for_room = static_cast<uint32_t>(waiting_.size());
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
  for (const Waiting& w : waiting_) {
    out.push_back(w.described);
    out.back().set_state(v1::TRACE_STATE_WAITING_FOR_ROOM);
    out.back().set_location(w.folder);
    out.back().set_upload_error(w.error);
  }
  return out;
}

std::vector<v1::StoredTrace> Spool::WaitingForRoom() const {
  std::vector<v1::StoredTrace> out;
  for (v1::StoredTrace& t : Pending()) {
    if (t.state() == v1::TRACE_STATE_WAITING_FOR_ROOM) out.push_back(std::move(t));
  }
  return out;
}

bool Spool::Holds(const std::string& capture_id) const {
  return FindPending(capture_id).has_value();
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
  for (const Waiting& w : waiting_) {
    if (w.described.capture_id() == capture_id) {
      v1::StoredTrace trace = w.described;
      trace.set_state(v1::TRACE_STATE_WAITING_FOR_ROOM);
      trace.set_location(w.folder);
      trace.set_upload_error(w.error);
      return std::make_pair(trace, w.folder);
    }
  }
  return std::nullopt;
}

void Spool::UploadLoop() {
  for (;;) {
    Item item;
    bool retry_waiting = false;
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        const absl::Time now = absl::Now();
        if (!waiting_.empty() && now >= next_room_attempt_) {
          retry_waiting = true;
          break;
        }
        if (!queue_.empty() && now >= stats_.next_attempt) break;
        absl::Time wake = absl::InfiniteFuture();
        if (!queue_.empty()) wake = std::min(wake, stats_.next_attempt);
        if (!waiting_.empty()) wake = std::min(wake, next_room_attempt_);
        if (wake == absl::InfiniteFuture()) {
          Wait(&wake_, &mu_);
        } else {
          WaitWithDeadline(&wake_, &mu_, wake);
        }
      }
      if (!retry_waiting) item = queue_.front();
    }
    if (retry_waiting) {
      RetryWaiting();
      continue;
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
        // Room was freed: a capture waiting for it goes next.
        next_room_attempt_ = absl::InfinitePast();
      } else {
        LogError(kComponent, "capture %s dropped from the upload queue: %s",
                 item.trace.capture_id(), status.message());
      }
      backoff_ = options_.retry_initial;
      stats_.next_attempt = absl::InfinitePast();
    } else if (absl::IsCancelled(status)) {
      // profd is stopping (TraceStore::Cancel): not a failure; the capture stays in pending/.
      LogInfo(kComponent, "upload of capture %s stopped (%s); it resumes at the next start",
              item.trace.capture_id(), status.message());
      stats_.next_attempt = absl::Now() + backoff_;
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

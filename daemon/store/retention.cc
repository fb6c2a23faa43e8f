#include "daemon/store/retention.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/log.h"

namespace profd::store {
namespace {

namespace fs = std::filesystem;

constexpr char kComponent[] = "retention";

// A folder without manifest.json is a capture being written or one a crash left: gone only when
// this old (no capture runs for a day: --max_capture_duration).
constexpr absl::Duration kUnfinishedAge = absl::Hours(24);

absl::Time ToAbslTime(fs::file_time_type t) {
  const auto system = std::chrono::file_clock::to_sys(t);
  return absl::FromChrono(
      std::chrono::time_point_cast<std::chrono::system_clock::duration>(system));
}

uint64_t FolderBytes(const fs::path& folder) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(folder, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uint64_t size = it->file_size(size_ec);
      if (!size_ec) bytes += size;
    }
  }
  return bytes;
}

}  // namespace

std::vector<RetainedCapture> ChooseForDeletion(
    std::vector<RetainedCapture> captures, const RetentionLimits& limits, absl::Time now,
    const std::function<bool(const RetainedCapture&)>& may_delete) {
  std::sort(captures.begin(), captures.end(),
            [](const RetainedCapture& a, const RetainedCapture& b) {
              return a.time != b.time ? a.time < b.time : a.id < b.id;
            });
  uint64_t total = 0;
  for (const RetainedCapture& c : captures) total += c.bytes;
  std::vector<RetainedCapture> chosen;
  for (const RetainedCapture& c : captures) {
    const bool too_old = now - c.time > limits.max_age;
    const bool too_big = limits.max_bytes > 0 && total > limits.max_bytes;
    if (!too_old && !too_big) break;  // the rest are younger, and the total fits
    if (!may_delete(c)) continue;
    total -= c.bytes;
    chosen.push_back(c);
  }
  return chosen;
}

Retention::Retention(RetentionOptions options, const Spool* spool, TraceStore* store)
    : options_(std::move(options)), spool_(spool), store_(store) {
  MutexLock lock(&mu_);
  capture_dir_stats_.active = options_.capture_dir_limits.enabled();
  store_stats_.active = options_.store_limits.enabled() && store_ != nullptr && store_->is_local();
}

Retention::~Retention() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Retention::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Retention::Loop() {
  while (true) {
    Sweep();
    MutexLock lock(&mu_);
    if (WaitUntil(&stop_cv_, &mu_, absl::Now() + options_.interval,
                  [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; })) {
      return;
    }
  }
}

void Retention::Sweep() {
  MutexLock one_at_a_time(&sweep_mu_);
  if (options_.capture_dir_limits.enabled()) SweepCaptureDir();
  bool store_active;
  {
    MutexLock lock(&mu_);
    store_active = store_stats_.active;
  }
  if (store_active) SweepStore();
}

void Retention::SweepCaptureDir() {
  std::vector<RetainedCapture> captures;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(options_.capture_dir, ec)) {
    std::error_code entry_ec;
    if (!entry.is_directory(entry_ec)) continue;
    const fs::file_time_type mtime = entry.last_write_time(entry_ec);
    if (entry_ec) continue;
    captures.push_back(
        {entry.path().filename().string(), FolderBytes(entry.path()), ToAbslTime(mtime)});
  }
  if (ec == std::errc::no_such_file_or_directory) return;  // made by the first capture
  if (ec) {
    LogWarning(kComponent, "cannot list --capture_dir %s: %s", options_.capture_dir, ec.message());
    return;
  }
  const absl::Time now = absl::Now();
  auto may_delete = [&](const RetainedCapture& c) {
    const std::string folder = absl::StrCat(options_.capture_dir, "/", c.id);
    std::error_code exists_ec;
    if (!fs::exists(folder + "/" + kManifestFile, exists_ec)) {
      return now - c.time > kUnfinishedAge;
    }
    // Still waiting for the store: the folder may be the only complete copy (and the spool's
    // links share its files). A folder the spool could not take yet is marked, and is the only
    // copy there is.
    if (spool_ == nullptr || store_ == nullptr || spool_->Holds(c.id) ||
        fs::exists(folder + "/" + kUnspooledMarker, exists_ec)) {
      return false;
    }
    return store_->Get(c.id).ok();
  };
  uint64_t pruned = 0, pruned_bytes = 0;
  for (const RetainedCapture& c :
       ChooseForDeletion(captures, options_.capture_dir_limits, now, may_delete)) {
    std::error_code remove_ec;
    fs::remove_all(absl::StrCat(options_.capture_dir, "/", c.id), remove_ec);
    if (remove_ec) {
      LogWarning(kComponent, "cannot delete %s/%s: %s", options_.capture_dir, c.id,
                 remove_ec.message());
      continue;
    }
    LogInfo(kComponent, "deleted capture folder %s (%d bytes, written %s ago)", c.id, c.bytes,
            absl::FormatDuration(absl::Trunc(now - c.time, absl::Seconds(1))));
    ++pruned;
    pruned_bytes += c.bytes;
  }
  Account(captures, pruned, pruned_bytes, &capture_dir_stats_);
}

void Retention::SweepStore() {
  TraceFilter filter;
  filter.hostname = options_.hostname;  // each host writes (and prunes) only its own index
  filter.limit = std::numeric_limits<size_t>::max();
  absl::StatusOr<std::vector<v1::StoredTrace>> listed = store_->List(filter);
  if (!listed.ok()) {
    LogWarning(kComponent, "cannot list the store %s: %s", store_->uri(),
               listed.status().message());
    return;
  }
  std::vector<RetainedCapture> captures;
  std::map<std::string, const v1::StoredTrace*> by_id;
  for (const v1::StoredTrace& t : *listed) {
    if (t.state() != v1::TRACE_STATE_STORED) continue;  // spooled: not in the store yet
    captures.push_back({t.capture_id(), t.bytes(), absl::FromUnixNanos(t.started_unix_ns())});
    by_id[t.capture_id()] = &t;
  }
  const absl::Time now = absl::Now();
  uint64_t pruned = 0, pruned_bytes = 0;
  for (const RetainedCapture& c : ChooseForDeletion(captures, options_.store_limits, now,
                                                    [](const RetainedCapture&) { return true; })) {
    if (absl::Status s = store_->Remove(*by_id[c.id]); !s.ok()) {
      LogWarning(kComponent, "cannot delete %s from the store: %s", c.id, s.message());
      continue;
    }
    LogInfo(kComponent, "deleted capture %s from the store (%d bytes)", c.id, c.bytes);
    ++pruned;
    pruned_bytes += c.bytes;
  }
  Account(captures, pruned, pruned_bytes, &store_stats_);
}

void Retention::Account(const std::vector<RetainedCapture>& swept, uint64_t pruned,
                        uint64_t pruned_bytes, RetentionStats* stats) {
  uint64_t bytes = 0;
  for (const RetainedCapture& c : swept) bytes += c.bytes;
  MutexLock lock(&mu_);
  stats->kept = swept.size() - pruned;
  stats->kept_bytes = bytes - pruned_bytes;
  stats->pruned_total += pruned;
  stats->pruned_bytes_total += pruned_bytes;
}

RetentionStats Retention::capture_dir_stats() const {
  MutexLock lock(&mu_);
  return capture_dir_stats_;
}

RetentionStats Retention::store_stats() const {
  MutexLock lock(&mu_);
  return store_stats_;
}

}  // namespace profd::store

// Retention: keeps --capture_dir and a local (file://) store from filling the disk, by age and by
// total size, oldest captures first.
//
//   --capture_dir   every capture folder profd wrote (kept for `profctl capture -o` and for a
//                   store that is down). A folder is deleted only once its capture is in the
//                   store (TraceStore::Get finds it) and not waiting in the spool (nor for room
//                   in it: Spool::Holds, kUnspooledMarker); a folder with
//                   no manifest.json (a capture being written, or left by a crash) only when a
//                   day old. Without a store nothing there is ever "in the store": kept.
//   local store     only when a cap is given (--store_retention_age / _bytes): this host's
//                   captures, through TraceStore::Remove (index row first, then the folder). An
//                   S3 store is left to the bucket's lifecycle rules.
//
// A capture over the age limit is deleted; then, oldest first, captures until the total is under
// the byte limit. One that may not be deleted still counts towards the total, so the cap can be
// exceeded while uploads are pending: finished traces are never dropped.
//
// One thread of its own sweeps every `interval`; Sweep() runs one pass on the caller's thread.
// stats() may be called from any thread (/metrics).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/spool.h"
#include "daemon/store/trace_store.h"

namespace profd::store {

struct RetentionLimits {
  absl::Duration max_age = absl::InfiniteDuration();  // older captures go
  uint64_t max_bytes = 0;                             // 0: no size cap
  bool enabled() const { return max_age != absl::InfiniteDuration() || max_bytes > 0; }
};

// One capture as retention sees it.
struct RetainedCapture {
  std::string id;
  uint64_t bytes = 0;
  absl::Time time;  // when it was written (folder) or started (store)
};

// The policy alone, pure: the captures to delete, oldest first. may_delete is asked only about
// captures the limits would delete.
std::vector<RetainedCapture> ChooseForDeletion(
    std::vector<RetainedCapture> captures, const RetentionLimits& limits, absl::Time now,
    const std::function<bool(const RetainedCapture&)>& may_delete);

// For /metrics: per place, counters only grow.
struct RetentionStats {
  bool active = false;      // limits given for this place
  uint64_t kept_bytes = 0;  // after the last sweep
  uint64_t kept = 0;
  uint64_t pruned_total = 0;
  uint64_t pruned_bytes_total = 0;
};

struct RetentionOptions {
  std::string capture_dir;
  RetentionLimits capture_dir_limits;
  RetentionLimits store_limits;  // local stores only
  std::string hostname;          // whose captures this profd may remove from the store
  absl::Duration interval = absl::Minutes(1);
};

class Retention {
 public:
  // spool and store may be null (no store configured or it failed to open).
  Retention(RetentionOptions options, const Spool* spool, TraceStore* store);
  ~Retention();  // stops the thread

  void Start();  // the sweeping thread
  void Sweep();  // one pass now

  RetentionStats capture_dir_stats() const;
  RetentionStats store_stats() const;

 private:
  void SweepCaptureDir();
  void SweepStore();
  void Loop();
  // After a sweep of one place: what it found (`swept`), and what it deleted of that.
  void Account(const std::vector<RetainedCapture>& swept, uint64_t pruned, uint64_t pruned_bytes,
               RetentionStats* stats) ABSL_LOCKS_EXCLUDED(mu_);

  const RetentionOptions options_;
  const Spool* const spool_;
  TraceStore* const store_;

  mutable absl::Mutex mu_;
  RetentionStats capture_dir_stats_ ABSL_GUARDED_BY(mu_);
  RetentionStats store_stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_cv_;  // stopping_ set
  absl::Mutex sweep_mu_;   // one sweep at a time (the thread, a test)
  std::thread thread_;
};

}  // namespace profd::store

// Spool: the local folder every finished capture goes through on its way to the store, so that
// nothing finished is lost when the store is down or profd restarts.
//
//   <dir>/incoming/<capture-id>/   being written by a running capture (Reserve gives this path)
//   <dir>/pending/<capture-id>/    finished, waiting for upload (Submit renames it here: atomic)
//   <dir>/failed/<capture-id>/     a folder that can never be stored (no valid manifest), kept
//
// A background thread uploads pending captures oldest first through TraceStore::Put and deletes
// each folder once stored. A failed upload is retried with exponential back-off (retry_initial,
// doubling, at most retry_max) and the capture stays in pending/ meanwhile. A profd started on the
// same spool folder resumes what is in pending/; incoming/ folders left by a crash hold captures
// that never finished and are removed.
//
// Size cap (max_bytes): bytes in pending/ and failed/ plus the bytes reserved by running captures.
// When a new capture does not fit, it is refused (RESOURCE_EXHAUSTED, "spool full: ...") before it
// starts; finished captures are never dropped to make room.
//
// How the capture code uses it (CaptureOrchestrator, any thread):
//   absl::StatusOr<std::string> folder = spool->Reserve(capture_id, expected_bytes);
//   if (!folder.ok()) -> fail the capture with folder.status().message() (spool full, bad id)
//   ... write manifest.json, trace-<pid>.json.gz, summary.json into *folder ...
//   absl::StatusOr<v1::StoredTrace> queued = spool->Submit(described);  // location() = final URI
//   or, if the capture failed: spool->Abandon(capture_id);
// `described` is the capture's row as its writer knows it (DescribeCapture, BuildImportedCapture):
// the spool does not read manifest.json back, nor the digests the writer already took.
// Submit(capture_id) describes the folder from its manifest instead (folders written by others).
// A capture that wrote its folder elsewhere and keeps it: spool->SubmitCopy(described, folder)
// (what profd_main wires into CaptureOptions::on_complete today).
//
// When the spool cannot take a finished capture (its disk is full, a write fails, or it is over
// max_bytes), SubmitCopy keeps the capture where it is (its folder in --capture_dir), marks the
// folder with kUnspooledMarker, says why (the errno named: "No space left on device (ENOSPC)")
// in its answer and in profd's log, and the uploader thread tries again: after each upload that
// freed room, and with the upload back-off meanwhile. Open finds marked folders in
// options.capture_dir again, so a restart retries them at once. Such a capture is listed (state
// WAITING_FOR_ROOM), counted (write_failures_total, waiting_for_room) and Holds() it: retention
// leaves its folder alone.
//
// For /metrics (read from any thread): Spool::stats() returns a SpoolStats snapshot.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/trace_store.h"
#include "profd/v1/store.pb.h"

namespace profd::store {

inline constexpr char kDefaultSpoolDir[] = "/var/lib/profd/spool";
// In a capture folder the spool could not take: the capture still has to be spooled. Holds the
// last error. A dot file, so it is neither copied nor stored.
inline constexpr char kUnspooledMarker[] = ".unspooled";

struct SpoolOptions {
  std::string dir = kDefaultSpoolDir;
  uint64_t max_bytes = 10ull << 30;
  absl::Duration retry_initial = absl::Seconds(1);
  absl::Duration retry_max = absl::Minutes(5);
  std::string hostname;  // for manifests that do not name their host
  // --capture_dir: where captures the spool could not take wait (marked kUnspooledMarker). "" for
  // none.
  std::string capture_dir;
};

// A snapshot of the spool for /metrics and `profctl`. Counters (_total) only grow.
struct SpoolStats {
  uint64_t bytes = 0;           // pending + failed + reserved by running captures
  uint64_t capacity_bytes = 0;  // --spool_max_bytes
  uint32_t pending = 0;         // finished captures waiting for upload
  uint32_t reserved = 0;        // captures being written
  uint32_t failed = 0;          // folders in failed/ (never stored, kept for a person to look at)
  uint64_t uploaded_total = 0;  // captures stored
  uint64_t uploaded_bytes_total = 0;   // their files' bytes
  uint64_t upload_failures_total = 0;  // failed upload attempts (each retry counts)
  uint64_t refused_total = 0;          // captures refused because the spool was full
  std::string last_error;              // of the last failed attempt; cleared by a success
  // Finished captures the spool could not take yet (disk full, write error, over max_bytes),
  // kept in their folder and retried.
  uint32_t waiting_for_room = 0;
  uint64_t write_failures_total = 0;  // failed attempts to take a capture (each retry counts)
  std::string last_write_error;       // of the last such failure; cleared when none waits
  absl::Time next_attempt = absl::InfinitePast();
  absl::Time last_upload = absl::InfinitePast();
};

// Public methods are thread-safe. One uploader thread of its own calls TraceStore::Put.
class Spool {
 public:
  // Creates the folders, queues what pending/ holds (a restart resumes), starts the uploader.
  static absl::StatusOr<std::unique_ptr<Spool>> Open(SpoolOptions options, TraceStore* store);
  ~Spool();  // stops the uploader; pending captures stay on disk for the next start

  // OK when a capture of about expected_bytes fits; RESOURCE_EXHAUSTED ("spool full") otherwise.
  absl::Status CheckSpace(uint64_t expected_bytes) const;
  // Checks space, holds expected_bytes against the cap and returns the (new, empty) folder the
  // capture writes its files into. INVALID_ARGUMENT for a bad id, ALREADY_EXISTS for an id in use.
  absl::StatusOr<std::string> Reserve(const std::string& capture_id, uint64_t expected_bytes);
  // Raises a reservation to `bytes` when that fits under the cap; RESOURCE_EXHAUSTED ("spool
  // full") otherwise, and the reservation stays as it was. For writers that learn their size as
  // they go (ImportTrace counts what arrives, whatever its header declared): grow, then write.
  absl::Status Grow(const std::string& capture_id, uint64_t bytes);
  // The capture is complete: its folder (the reserved one, or `folder` if it wrote elsewhere on the
  // same file system) must hold manifest.json. Moves it to pending/ atomically and queues the
  // upload; returns the row the store will hold, with location() the capture's final URI.
  // FAILED_PRECONDITION when the folder has no valid manifest (the capture stays reserved: fix it
  // and Submit again, or Abandon).
  absl::StatusOr<v1::StoredTrace> Submit(const std::string& capture_id,
                                         const std::string& folder = "");
  // The same for a capture its writer describes: described holds the row but for the files it
  // has not listed (summary.json, manifest.json), which are added from the folder.
  absl::StatusOr<v1::StoredTrace> Submit(v1::StoredTrace described, const std::string& folder = "");
  // For a capture folder its writer keeps (CaptureOrchestrator's --capture_dir): checks space,
  // hard-links (or copies) its files into the spool and submits them. The folder is left as is.
  // When the spool cannot take it (full disk, write error, over max_bytes) the capture waits for
  // room (see above) and the error says so: RESOURCE_EXHAUSTED for a full disk or spool,
  // INTERNAL for another write error.
  absl::StatusOr<v1::StoredTrace> SubmitCopy(v1::StoredTrace described, const std::string& folder);
  // Drops a reservation and deletes what the capture wrote (a failed or cancelled capture).
  void Abandon(const std::string& capture_id);

  SpoolStats stats() const;
  const std::string& dir() const { return options_.dir; }
  const std::string& store_uri() const { return store_->uri(); }

  // Finished captures not yet in the store: state SPOOLED with the last upload error, then
  // those waiting for room (state WAITING_FOR_ROOM, upload_error the write error).
  std::vector<v1::StoredTrace> Pending() const;
  // Only those waiting for room.
  std::vector<v1::StoredTrace> WaitingForRoom() const;
  // The pending (or waiting) capture and its folder, if it is still waiting.
  std::optional<std::pair<v1::StoredTrace, std::string>> FindPending(
      const std::string& capture_id) const;
  // Whether the capture is not in the store yet but the spool has it to do: pending, or waiting
  // for room. Its folder must stay.
  bool Holds(const std::string& capture_id) const;

 private:
  struct Item {
    v1::StoredTrace trace;
    std::string folder;
  };
  // A capture the spool could not take: its row, its folder (in --capture_dir), the last error.
  struct Waiting {
    v1::StoredTrace described;
    std::string folder;
    std::string error;
  };
  Spool(SpoolOptions options, TraceStore* store);
  void UploadLoop();
  // SubmitCopy's work: reserve, link or copy, submit. No waiting on failure.
  absl::StatusOr<v1::StoredTrace> CopyIn(v1::StoredTrace described, const std::string& folder);
  // The capture waits for room: marked, listed, logged; returns the error to answer with.
  absl::Status KeepWaiting(v1::StoredTrace described, const std::string& folder,
                           const absl::Status& why);
  // Folders marked kUnspooledMarker in options_.capture_dir, at Open.
  void FindWaiting() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The uploader's try at every waiting capture.
  void RetryWaiting();
  uint64_t UsedBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSpaceLocked(uint64_t expected_bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(v1::StoredTrace trace, std::string folder) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a capture's folder is before Submit: `folder`, or its reserved folder in incoming/.
  std::string SourceOf(const std::string& capture_id, const std::string& folder) const;
  // Moves a described capture's folder to pending/ and queues its upload.
  absl::StatusOr<v1::StoredTrace> Queue(const v1::StoredTrace& trace, const std::string& source);

  const SpoolOptions options_;
  TraceStore* const store_;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> reservations_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  SpoolStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  absl::Time next_room_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration room_backoff_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar wake_;
  std::thread uploader_;
};

}  // namespace profd::store

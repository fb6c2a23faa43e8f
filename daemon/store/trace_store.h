// TraceStore: where finished captures live, on any ObjectBucket (a local directory or an S3
// bucket), under one key layout that scales to a fleet:
//
//   <prefix>/<yyyy>/<mm>/<dd>/<hostname>/<capture-id>/manifest.json
//                                                     summary.json
//                                                     trace-<pid>.json.gz ...
//   <prefix>/_index/<yyyy>-<mm>-<dd>/<hostname>.json   one row per capture of that host and day
//
// The date is the UTC day in the capture id (<yyyymmdd>T<hhmmss>Z-...), so Get(id) goes straight
// to one day's index. The per-host, per-day index lets List read one small object per host and day
// instead of one manifest per capture, and list the days with one delimited listing; it is written
// after the capture's files, so a listed capture is complete. Only the profd of that host writes
// its index (one writer: no lost updates). The index sits in a flat _index/ folder rather than
// beside the captures because delimited listings of deep trees are where S3 look-alikes differ
// (s3rver reports no common prefix for keys two levels down).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/object_bucket.h"
#include "daemon/store/s3_bucket.h"
#include "profd/v1/profd.pb.h"
#include "profd/v1/store.pb.h"

namespace profd::store {

inline constexpr char kDefaultStoreUri[] = "file:///var/lib/profd/traces";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kSummaryFile[] = "summary.json";

struct TraceFilter {
  std::string hostname;  // exact
  std::string pod;       // pod name or namespace/pod
  std::string alert;     // the alertname of the alert that started the capture, exact
  std::string fleet_id;  // exact: the captures of one fleet capture
  absl::Time since = absl::InfinitePast();
  size_t limit = 50;
  // Every store request of the listing ends by then (profctl list: its call's deadline).
  absl::Time deadline = absl::InfiniteFuture();
};

// Whether a row passes the filter's hostname, pod, alert and since (not its limit).
bool TraceMatches(const v1::StoredTrace& row, const TraceFilter& filter);

// Capture ids name folders and keys: letters, digits, '.', '_', '-', at most 200, not starting
// with '.'. INVALID_ARGUMENT otherwise.
absl::Status ValidateCaptureId(const std::string& capture_id);

// A row read back from a store (an index) is untrusted: anyone with write access to the bucket can
// plant one. Its capture id must be a capture id, and its host and every file name one plain file
// name (common/file_name.h), before any of them is joined to a key or a path. DATA_LOSS
// naming the capture, the bad name and `where` (the index) otherwise.
absl::Status ValidateStoredTrace(const v1::StoredTrace& row, const std::string& where);

// Describes a finished capture folder from its manifest.json and files (sizes, SHA-256): the row
// the index will hold. Fields read from the manifest (all optional but the file itself):
// capture_id (else the folder name), hostname (else default_hostname), label, alert.name, source,
// started_unix_ns (else requested_unix_ns, else the id's time), processes[].pod_name and
// .pod_namespace. Files in sub-folders are ignored.
absl::StatusOr<v1::StoredTrace> DescribeCaptureFolder(const std::string& folder,
                                                      const std::string& default_hostname);

// The row of a capture profd just made, from its CaptureInfo rather than its manifest read back:
// capture_id, hostname, label, alert name, source "capture", started_unix_ns (else
// requested_unix_ns), the processes' pods, and its trace files with the sizes and digests taken as
// they were written.
v1::StoredTrace DescribeCapture(const v1::CaptureInfo& info);

// Lists every file of `folder` in trace (sorted by name, with sizes and SHA-256) and their total.
// A file the trace already lists with a digest is not read again.
absl::Status AddFolderFiles(const std::string& folder, v1::StoredTrace* trace);

// Thread-safe: the spool's uploader thread calls Put while gRPC threads call List/Get/Read.
class TraceStore {
 public:
  // uri: file:///path (or a plain absolute path) or s3://bucket[/prefix]. s3 is used for s3://.
  static absl::StatusOr<std::unique_ptr<TraceStore>> Open(const std::string& uri,
                                                          const S3Options& s3);
  TraceStore(std::unique_ptr<ObjectBucket> bucket, std::string uri, std::string key_prefix);

  const std::string& uri() const { return uri_; }
  bool is_local() const { return is_local_; }

  // Where the capture's folder is (or will be, once uploaded): file:///... or s3://.../id/.
  std::string LocationOf(const v1::StoredTrace& trace) const;

  // Stores every file of `folder` (described by DescribeCaptureFolder), manifest.json last, then
  // adds the capture to its index. Idempotent: a retry after a failure overwrites what got there.
  // may_move: the folder's files may be moved instead of copied (the spool gives them up).
  absl::StatusOr<v1::StoredTrace> Put(const v1::StoredTrace& described, const std::string& folder,
                                      bool may_move);

  // Newest first, at most filter.limit. Rows that fail ValidateStoredTrace are left out (and
  // logged): one planted row does not hide every other capture.
  absl::StatusOr<std::vector<v1::StoredTrace>> List(const TraceFilter& filter);
  // NOT_FOUND when the store has no such capture; DATA_LOSS when its row fails
  // ValidateStoredTrace (the message names the capture and the bad name).
  absl::StatusOr<v1::StoredTrace> Get(const std::string& capture_id,
                                      absl::Time deadline = absl::InfiniteFuture());
  // Streams one file of a stored capture. NOT_FOUND for a file the capture does not have.
  absl::Status Read(const v1::StoredTrace& trace, const std::string& file, const ChunkSink& sink,
                    absl::Time deadline = absl::InfiniteFuture());
  // Ends every store request in flight and refuses new ones (profd stopping). Any thread.
  void Cancel() { bucket_->Cancel(); }
  // Deletes a capture of a local store: its row from the index, then its folder (retention,
  // daemon/store/retention.h). UNIMPLEMENTED for S3: buckets have lifecycle rules for that.
  absl::Status Remove(const v1::StoredTrace& trace);

 private:
  static absl::Time DayOf(const v1::StoredTrace& trace);
  std::string DayPrefix(const v1::StoredTrace& trace) const;
  std::string IndexDay(const v1::StoredTrace& trace) const;  // yyyy-mm-dd
  std::string IndexKey(const std::string& day, const std::string& host) const;
  // The hosts with an index on that day, and when each index was last written, newest first.
  struct HostIndex {
    std::string host;
    absl::Time modified;
  };
  absl::StatusOr<std::vector<HostIndex>> IndexedHosts(const std::string& day, absl::Time deadline);
  std::string FolderKey(const v1::StoredTrace& trace) const;
  // The valid rows of one index; each refused row's id and why go to `refused` when given (else
  // to the log).
  absl::StatusOr<std::vector<v1::StoredTrace>> ReadIndex(
      const std::string& key, absl::Time deadline,
      std::vector<std::pair<std::string, absl::Status>>* refused = nullptr);
  // The rows of several indexes (one per host of a day), read concurrently: a fleet has one index
  // object per host, and reading them one after another made `list` wait for each round trip.
  absl::StatusOr<std::vector<v1::StoredTrace>> ReadIndexes(const std::vector<std::string>& keys,
                                                           absl::Time deadline);
  absl::StatusOr<std::vector<std::string>> Subfolders(const std::string& prefix,
                                                      absl::Time deadline);

  std::unique_ptr<ObjectBucket> bucket_;
  const std::string uri_;
  const std::string prefix_;  // "" or "some/prefix/"
  bool is_local_ = false;
  std::string local_root_;  // local stores: the folder the keys are under
  absl::Mutex index_mu_;    // serializes read-modify-write of index objects
  absl::Mutex warned_mu_;
  std::set<std::string> warned_ ABSL_GUARDED_BY(warned_mu_);  // refused rows already logged
};

}  // namespace profd::store

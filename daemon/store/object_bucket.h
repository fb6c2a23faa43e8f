// ObjectBucket: the few object-store operations the trace store needs (put a file, read an
// object as a stream of chunks, list keys under a prefix), with two implementations: LocalBucket
// (a directory, file://) and S3Bucket (an S3-compatible service, s3://). Keys are '/'-separated
// relative paths such as "2026/11/29/node-1/<capture-id>/manifest.json".
//
// Deadlines: every request ends by its `deadline` (the caller's: a gRPC call's, for a request made
// on behalf of profctl) or by the bucket's own limits (S3: connect timeout, no progress for
// --s3_timeout), whichever comes first; Cancel() ends every request in flight and refuses new ones
// (profd stopping), so no thread waits on the network for ever.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace profd::store {

// Receives a read object piece by piece; an error stops the read and is returned by Read.
using ChunkSink = std::function<absl::Status(absl::string_view chunk)>;

struct ObjectInfo {
  std::string key;
  uint64_t bytes = 0;
  // When the object was last written, by the store's clock; InfiniteFuture when not known.
  absl::Time modified = absl::InfiniteFuture();
};

struct ObjectListing {
  std::vector<ObjectInfo> objects;   // keys directly under the prefix (or all, undelimited)
  std::vector<std::string> folders;  // delimited listings only: "prefix/child/" entries
};

// Implementations are thread-safe: the spool's uploader thread and gRPC handler threads call them
// at the same time. Every error message names the bucket and says what to do.
class ObjectBucket {
 public:
  virtual ~ObjectBucket() = default;

  // The URI of the object (file:///root/key or s3://bucket/key), for messages and manifests.
  virtual std::string UriOf(const std::string& key) const = 0;

  // Stores the file at `path` under `key`, replacing any object there. Readers never see a partial
  // object. may_move: the caller will not change the file again, so a local bucket may link it into
  // place instead of copying (no second copy on disk for the default local store).
  virtual absl::Status PutFile(const std::string& key, const std::string& path, bool may_move) = 0;
  virtual absl::Status PutBytes(const std::string& key, const std::string& data) = 0;

  // NOT_FOUND when there is no such object; DEADLINE_EXCEEDED past `deadline`.
  virtual absl::Status Read(const std::string& key, const ChunkSink& sink, absl::Time deadline) = 0;

  // Objects whose key starts with `prefix` (which ends in '/' or is empty). delimited: only the
  // direct children, with sub-folders in `folders`, as S3's ListObjectsV2 with delimiter '/'.
  virtual absl::StatusOr<ObjectListing> List(const std::string& prefix, bool delimited,
                                             absl::Time deadline) = 0;

  // Ends the requests in flight (CANCELLED) and refuses new ones: profd is stopping, and an
  // upload cut here resumes from the spool at the next start. Any thread.
  virtual void Cancel() {}
};

// Reads a small object whole.
absl::StatusOr<std::string> ReadAll(ObjectBucket& bucket, const std::string& key,
                                    absl::Time deadline = absl::InfiniteFuture());

// OK for a key the store may read or write: '/'-separated names, none of them empty, "." or "..",
// no control characters, not starting with '/'. A key is built from names read back from the
// store (index rows): this is the last check before it becomes a path or a URL.
absl::Status ValidateObjectKey(const std::string& key);

}  // namespace profd::store

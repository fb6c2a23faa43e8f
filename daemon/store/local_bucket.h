// LocalBucket: an ObjectBucket on a local directory (the default store, file:///var/lib/profd/
// traces). Keys are paths under the root. Writes go to a hidden temporary name and are renamed into
// place, so a reader never sees half a file.
#pragma once

#include <string>

#include "daemon/store/object_bucket.h"

namespace profd::store {

// Thread-safe: no state beyond the root path.
class LocalBucket final : public ObjectBucket {
 public:
  // The root is created on first write.
  explicit LocalBucket(std::string root);

  std::string UriOf(const std::string& key) const override;
  absl::Status PutFile(const std::string& key, const std::string& path, bool may_move) override;
  absl::Status PutBytes(const std::string& key, const std::string& data) override;
  absl::Status Read(const std::string& key, const ChunkSink& sink, absl::Time deadline) override;
  absl::StatusOr<ObjectListing> List(const std::string& prefix, bool delimited,
                                     absl::Time deadline) override;

 private:
  std::string root_;
};

}  // namespace profd::store

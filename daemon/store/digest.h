// Checksums for integrity: SHA-256 (manifests, S3 payload signing) and MD5 (S3 Content-MD5 and
// ETags), from OpenSSL's libcrypto rather than hand-written code.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace profd::store {

// Incremental SHA-256. Not thread-safe; one per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  void Update(absl::string_view data);
  std::string HexDigest();  // finishes the hash

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(absl::string_view data);
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);
std::string Md5Hex(absl::string_view data);
std::string Md5Base64(absl::string_view data);

}  // namespace profd::store

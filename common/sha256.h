// SHA-256 and HMAC-SHA256 (capture manifests, S3 payload and request signing, profctl get's
// checks), from OpenSSL's libcrypto. The one implementation in profd and profctl.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace profd {

// Incremental SHA-256. Not thread-safe; one per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  std::string HexDigest();  // finishes the hash: lowercase hex
  std::string RawDigest();  // finishes the hash: the 32 bytes

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(absl::string_view data);
// HMAC-SHA256 of data under key: the 32 raw bytes (AWS SigV4 chains these).
std::string HmacSha256(absl::string_view key, absl::string_view data);
// NOT_FOUND when the file cannot be opened, DATA_LOSS on a read error.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace profd

// The digests S3 wants of a payload: SHA-256 (x-amz-content-sha256, signed) and MD5
// (Content-MD5, and the ETag S3 answers), both from OpenSSL's libcrypto and taken in one pass over
// the bytes, so each uploaded byte is read once for hashing. SHA-256 has its home in
// common/sha256.h.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace profd::store {

struct PayloadDigest {
  std::string sha256_hex;  // lowercase hex, as x-amz-content-sha256 carries it
  std::string md5;         // the 16 raw bytes

  std::string md5_hex() const;     // an ETag's form
  std::string md5_base64() const;  // Content-MD5's form
};

// SHA-256 and MD5 of data, block by block, so each block is hashed twice while in cache.
PayloadDigest DigestPayload(absl::string_view data);

}  // namespace profd::store

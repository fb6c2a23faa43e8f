// MD5 for S3 (Content-MD5 and ETags), from OpenSSL's libcrypto rather than hand-written code.
// SHA-256 has its home in daemon/common/sha256.h.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace profd::store {

std::string Md5Hex(absl::string_view data);
std::string Md5Base64(absl::string_view data);

}  // namespace profd::store

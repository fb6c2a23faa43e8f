#include "daemon/store/digest.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace profd::store {

namespace {

std::string Md5Raw(absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_md5(), nullptr);
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace

std::string Md5Hex(absl::string_view data) {
  std::string raw = Md5Raw(data);
  return absl::BytesToHexString(raw);
}

std::string Md5Base64(absl::string_view data) { return absl::Base64Escape(Md5Raw(data)); }

}  // namespace profd::store

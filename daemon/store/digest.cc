#include "daemon/store/digest.h"

#include <openssl/evp.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "common/sha256.h"

namespace profd::store {

std::string PayloadDigest::md5_hex() const { return absl::BytesToHexString(md5); }

std::string PayloadDigest::md5_base64() const { return absl::Base64Escape(md5); }

PayloadDigest DigestPayload(absl::string_view data) {
  constexpr size_t kBlock = 64 << 10;  // fits in L2: the MD5 pass reads what SHA-256 just read
  Sha256 sha;
  EVP_MD_CTX* md5 = EVP_MD_CTX_new();
  EVP_DigestInit_ex(md5, EVP_md5(), nullptr);
  for (size_t at = 0; at < data.size(); at += kBlock) {
    absl::string_view block = data.substr(at, std::min(kBlock, data.size() - at));
    sha.Update(block);
    EVP_DigestUpdate(md5, block.data(), block.size());
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(md5, out, &n);
  EVP_MD_CTX_free(md5);
  return {sha.HexDigest(), std::string(reinterpret_cast<const char*>(out), n)};
}

}  // namespace profd::store

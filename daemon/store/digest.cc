#include "daemon/store/digest.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace profd::store {

namespace {

std::string Hex(const unsigned char* bytes, unsigned int n) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n)));
}

std::string Md5Raw(absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_md5(), nullptr);
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->ctx); }

void Sha256::Update(absl::string_view data) {
  EVP_DigestUpdate(state_->ctx, data.data(), data.size());
}

std::string Sha256::HexDigest() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(state_->ctx, out, &n);
  return Hex(out, n);
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.HexDigest();
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  Sha256 hash;
  std::string buffer(1 << 16, '\0');
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    hash.Update(absl::string_view(buffer.data(), n));
  }
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("read error in ", path));
  return hash.HexDigest();
}

std::string Md5Hex(absl::string_view data) {
  std::string raw = Md5Raw(data);
  return absl::BytesToHexString(raw);
}

std::string Md5Base64(absl::string_view data) { return absl::Base64Escape(Md5Raw(data)); }

}  // namespace profd::store

#include "daemon/store/sigv4.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"

namespace profd::store {

std::string AmzDate(absl::Time t) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", t, absl::UTCTimeZone());
}

SigV4Signature SignV4(const SigV4Request& request, const std::string& access_key_id,
                      const std::string& secret_access_key, const std::string& region,
                      const std::string& amz_date) {
  std::vector<std::pair<std::string, std::string>> headers = request.headers;
  for (auto& [name, value] : headers) {
    name = absl::AsciiStrToLower(name);
    // SigV4 trims values and squeezes inner runs of spaces.
    std::string squeezed;
    for (char c : absl::StripAsciiWhitespace(value)) {
      if (c == ' ' && !squeezed.empty() && squeezed.back() == ' ') continue;
      squeezed.push_back(c);
    }
    value = std::move(squeezed);
  }
  std::sort(headers.begin(), headers.end());

  SigV4Signature out;
  std::string canonical_headers;
  std::vector<std::string> names;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    names.push_back(name);
  }
  out.signed_headers = absl::StrJoin(names, ";");
  out.canonical_request = absl::StrCat(
      request.method, "\n", request.path.empty() ? "/" : request.path, "\n", request.query, "\n",
      canonical_headers, "\n", out.signed_headers, "\n", request.payload_sha256_hex);

  const std::string date = amz_date.substr(0, 8);
  const std::string scope = absl::StrCat(date, "/", region, "/s3/aws4_request");
  const std::string string_to_sign = absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n",
                                                  Sha256Hex(out.canonical_request));
  std::string key = HmacSha256("AWS4" + secret_access_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, "s3");
  key = HmacSha256(key, "aws4_request");
  const std::string signature = absl::BytesToHexString(HmacSha256(key, string_to_sign));
  out.authorization =
      absl::StrCat("AWS4-HMAC-SHA256 Credential=", access_key_id, "/", scope,
                   ", SignedHeaders=", out.signed_headers, ", Signature=", signature);
  return out;
}

}  // namespace profd::store

// AWS Signature Version 4 for S3 requests, computed here rather than by libcurl: libcurl 7.88's
// CURLOPT_AWS_SIGV4 lists `expect` in SignedHeaders although profd removes that header, which S3
// front ends that read SigV4 strictly refuse. Signing the exact header list we send keeps the
// signed set equal to the sent set on every server (AWS, MinIO, Ceph RGW, moto).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace profd::store {

struct SigV4Request {
  std::string method;  // GET, PUT, POST, DELETE, HEAD
  std::string path;    // the path as sent, already URI-encoded ("/bucket/key" or "/key")
  std::string query;   // the query as sent: sorted, encoded, "name=value&..." ("" for none)
  // Every header that is sent and signed, lowercase names, values as sent. host, x-amz-date and
  // x-amz-content-sha256 must be among them.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256_hex;
};

struct SigV4Signature {
  std::string authorization;   // the Authorization header's value
  std::string signed_headers;  // "host;x-amz-content-sha256;x-amz-date", for messages
  std::string canonical_request;
};

// "20261130T215500Z": the x-amz-date value (and its first 8 characters the scope's date).
std::string AmzDate(absl::Time t);

SigV4Signature SignV4(const SigV4Request& request, const std::string& access_key_id,
                      const std::string& secret_access_key, const std::string& region,
                      const std::string& amz_date);

}  // namespace profd::store

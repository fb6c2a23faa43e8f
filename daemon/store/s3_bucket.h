// S3Bucket: an ObjectBucket on an S3-compatible service (AWS S3, MinIO, Ceph RGW, GCS through its
// S3 interoperability API), over libcurl, signed with AWS SigV4 by daemon/store/sigv4.h over
// exactly the headers sent.
//
// Integrity: every PUT (and every multipart part) carries Content-MD5 and x-amz-content-sha256 of
// its payload, so the service rejects a corrupted body, and the ETag that comes back is checked
// against the MD5 when it is one. Files larger than the part size go up as a multipart upload
// (two parts in memory: the next is read and hashed while one is sent); a failed multipart upload
// is aborted, and its id is recorded beside the file (.<name>.s3-upload) until it is, so the next
// attempt (or profd restarted) aborts one an outage left behind. Requests share one libcurl
// connection cache.
//
// Errors become absl::Status with a message that names the bucket and endpoint and says what to
// do: no such bucket (NOT_FOUND), credentials or signature refused (PERMISSION_DENIED), clock skew
// (FAILED_PRECONDITION), endpoint unreachable (UNAVAILABLE).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/store/digest.h"
#include "daemon/store/object_bucket.h"

typedef void CURLSH;

namespace profd::store {

struct S3Options {
  std::string bucket;
  std::string endpoint;  // "" = https://s3.<region>.amazonaws.com; else scheme://host[:port]
  std::string region;    // "" = $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1
  // endpoint/bucket/key instead of bucket.endpoint/key (MinIO, s3rver); always for IP endpoints.
  bool path_style = false;
  uint64_t part_size = 8ull << 20;  // files above this go up in parts of this size (>= 5 MiB)
  // Every request has a deadline (an endpoint that takes connections and never answers must not
  // hold a thread for ever): the connection within connect_timeout (at most stall_timeout);
  // then it fails once no byte moved for stall_timeout (--s3_timeout); a request with a body also
  // by 2 x stall_timeout plus its size at min_bytes_per_second (a service trickling a byte a
  // second never trips the stall check); a read with no deadline of its caller by
  // request_timeout. A caller's deadline (a gRPC call's) ends it sooner.
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration stall_timeout = absl::Seconds(30);
  uint64_t min_bytes_per_second = 256u << 10;
  absl::Duration request_timeout = absl::Minutes(10);
  int list_page_size = 0;  // max-keys of each listing request; 0 = the service's (1000 on S3)
};

// Credentials the standard way: $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY (+ $AWS_SESSION_TOKEN),
// else the shared credentials file ($AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials), profile
// $AWS_PROFILE or "default". Read again for every request, so rotated keys are picked up.
struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string source;  // where they came from, for messages
};
absl::StatusOr<AwsCredentials> LoadAwsCredentials();

// The Status for an S3 error response (HTTP status and XML body), in words a user can act on.
// signed_headers: the request's SignedHeaders, named when the signature is refused.
absl::Status S3ErrorStatus(const std::string& what, const std::string& where, long http_status,
                           const std::string& body, const std::string& signed_headers = "");

// Where the id of a multipart upload of the file at `path` is kept while it is in flight.
std::string MultipartRecordPath(const std::string& path);

// Thread-safe: every request uses its own curl handle.
class S3Bucket final : public ObjectBucket {
 public:
  // prefix: the key prefix inside the bucket the URIs print (keys passed in already include it).
  explicit S3Bucket(S3Options options);
  ~S3Bucket() override;
  S3Bucket(const S3Bucket&) = delete;
  S3Bucket& operator=(const S3Bucket&) = delete;

  std::string UriOf(const std::string& key) const override;
  absl::Status PutFile(const std::string& key, const std::string& path, bool may_move) override;
  absl::Status PutBytes(const std::string& key, const std::string& data) override;
  absl::Status Read(const std::string& key, const ChunkSink& sink, absl::Time deadline) override;
  absl::StatusOr<ObjectListing> List(const std::string& prefix, bool delimited,
                                     absl::Time deadline) override;
  void Cancel() override { cancelled_.store(true); }

  // The endpoint requests go to, for messages.
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string etag;
    std::string signed_headers;  // what the request's signature covered, for messages
  };
  struct Target {
    std::string url;   // without the query
    std::string host;  // the Host header: [bucket.]host[:port]
    std::string path;  // encoded, as sent and signed
  };
  // One signed request. query must be canonical (sorted, encoded); digest is body's. With a sink,
  // a 2xx body goes to the sink instead of Response::body.
  absl::StatusOr<Response> Send(const std::string& method, const std::string& key,
                                const std::string& query, absl::string_view body,
                                const PayloadDigest& digest, const std::string& content_type,
                                const ChunkSink* sink,
                                absl::Time deadline = absl::InfiniteFuture());
  // A request without a body.
  absl::StatusOr<Response> Send(const std::string& method, const std::string& key,
                                const std::string& query, const ChunkSink* sink,
                                absl::Time deadline = absl::InfiniteFuture());
  // The Status of an S3 error answer; a refused signature names the headers signed.
  absl::Status ErrorOf(const std::string& what, const std::string& where, const Response& r) const;
  static absl::Status CheckEtag(const std::string& quoted_etag, const PayloadDigest& digest,
                                const std::string& what);
  Target TargetFor(const std::string& key) const;
  absl::Status PutMultipart(const std::string& key, const std::string& path, uint64_t size);
  absl::Status AbortUpload(const std::string& key, const std::string& upload_id);
  // Aborts the upload recorded in `record` (if any) and removes the record.
  absl::Status AbortRecordedUpload(const std::string& record);

  S3Options options_;
  std::string endpoint_;     // scheme://host[:port], no trailing '/'
  std::mutex share_mu_[16];  // one per curl_lock_data kind, guarding share_ as libcurl asks
  CURLSH* share_ = nullptr;
  std::atomic<bool> cancelled_{false};  // Cancel(): every transfer's progress callback sees it
};

}  // namespace profd::store

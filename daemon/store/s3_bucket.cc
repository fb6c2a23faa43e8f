#include "daemon/store/s3_bucket.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "daemon/log.h"
#include "daemon/store/digest.h"
#include "daemon/store/sigv4.h"

namespace profd::store {

namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// An IPv4 or IPv6 literal: no DNS name to put a bucket in front of.
bool IsIpLiteral(absl::string_view host) {
  std::string h(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

// host[:port] of scheme://host[:port]; the host alone without the port.
absl::string_view Authority(absl::string_view endpoint) {
  size_t start = endpoint.find("://");
  return start == absl::string_view::npos ? endpoint : endpoint.substr(start + 3);
}
absl::string_view HostOf(absl::string_view authority) {
  if (absl::StartsWith(authority, "[")) return authority.substr(0, authority.find(']') + 1);
  return authority.substr(0, authority.rfind(':'));
}

// libcurl may hold the lock of one kind of shared data while it takes another's: one mutex each.
static_assert(CURL_LOCK_DATA_LAST <= 16, "S3Bucket::share_mu_ needs a mutex per curl_lock_data");
void LockShare(CURL*, curl_lock_data data, curl_lock_access, void* mutexes) {
  static_cast<std::mutex*>(mutexes)[data].lock();
}
void UnlockShare(CURL*, curl_lock_data data, void* mutexes) {
  static_cast<std::mutex*>(mutexes)[data].unlock();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// RFC 3986 percent-encoding as SigV4 wants it; '/' kept when encoding a key path.
std::string UriEncode(absl::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  // absl::Hex prints lowercase; SigV4 wants uppercase hex digits.
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '%') {
      out[i + 1] = absl::ascii_toupper(out[i + 1]);
      out[i + 2] = absl::ascii_toupper(out[i + 2]);
    }
  }
  return out;
}

// The object's Content-Type, from its name ("" = application/octet-stream).
std::string ContentTypeOf(absl::string_view key) {
  return absl::EndsWith(key, ".json") ? "application/json"
         : absl::EndsWith(key, ".gz") ? "application/gzip"
                                      : "";
}

// A canonical query string: parameters sorted by name, names and values encoded, "name=" kept for
// empty values (curl signs the query as given).
std::string Query(std::vector<std::pair<std::string, std::string>> params) {
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += "&";
    absl::StrAppend(&out, UriEncode(k, false), "=", UriEncode(v, false));
  }
  return out;
}

std::string XmlUnescape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"&lt;", "<"},
                                 {"&gt;", ">"},
                                 {"&quot;", "\""},
                                 {"&apos;", "'"},
                                 {"&#34;", "\""},
                                 {"&amp;", "&"}});
}

// The inner text of every <tag>...</tag> in xml (no nesting of the same tag in S3's answers).
std::vector<std::string> XmlAll(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> out;
  std::string open = absl::StrCat("<", tag, ">");
  std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != absl::string_view::npos) {
    size_t start = pos + open.size();
    size_t end = xml.find(close, start);
    if (end == absl::string_view::npos) break;
    out.emplace_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string XmlFirst(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> all = XmlAll(xml, tag);
  return all.empty() ? "" : XmlUnescape(all.front());
}

absl::StatusOr<AwsCredentials> FromCredentialsFile(const std::string& path,
                                                   const std::string& profile) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("no file");
  std::string line, section;
  AwsCredentials c;
  c.source = absl::StrCat(path, " [", profile, "]");
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      section = std::string(absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)));
      continue;
    }
    if (section != profile) continue;
    std::pair<std::string, std::string> kv = absl::StrSplit(l, absl::MaxSplits('=', 1));
    std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(kv.first));
    std::string value(absl::StripAsciiWhitespace(kv.second));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::NotFoundError(absl::StrCat(path, " has no [", profile,
                                            "] section with aws_access_key_id and "
                                            "aws_secret_access_key"));
  }
  return c;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  absl::string_view line(data, size * n);
  if (absl::StartsWithIgnoreCase(line, "etag:")) {
    *static_cast<std::string*>(user) = std::string(absl::StripAsciiWhitespace(line.substr(5)));
  }
  return size * n;
}

struct BodyTarget {
  CURL* curl;
  const ChunkSink* sink;
  std::string* body;
  absl::Status sink_status;
};

// Called by libcurl about once a second even when nothing moves: a non-zero answer aborts the
// transfer (CURLE_ABORTED_BY_CALLBACK).
int OnProgress(void* cancelled, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(cancelled)->load() ? 1 : 0;
}

long Millis(absl::Duration d) {
  return static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* target = static_cast<BodyTarget*>(user);
  long status = 0;
  curl_easy_getinfo(target->curl, CURLINFO_RESPONSE_CODE, &status);
  absl::string_view chunk(data, size * n);
  if (target->sink != nullptr && status >= 200 && status < 300) {
    target->sink_status = (*target->sink)(chunk);
    return target->sink_status.ok() ? chunk.size() : 0;
  }
  target->body->append(chunk.data(), chunk.size());
  return chunk.size();
}

// The request's headers: those signed, then the signature, and no others that curl would add.
curl_slist* HeaderList(const SigV4Request& to_sign, const SigV4Signature& signature,
                       bool has_body) {
  curl_slist* headers = nullptr;
  auto add_header = [&](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
  for (const auto& [name, value] : to_sign.headers) add_header(absl::StrCat(name, ": ", value));
  add_header("Authorization: " + signature.authorization);
  add_header("Expect:");  // no 100-continue round trip (and no unsigned header left to sign)
  if (!has_body) add_header("Content-Type:");
  return headers;
}

void SetMethod(CURL* curl, const std::string& method, bool has_body, absl::string_view body) {
  if (method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (has_body) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
  }
}

// The request's deadlines (S3Options): connecting, no progress, the whole request, which the
// `left` to the caller's deadline cuts short when it comes first (then true).
bool SetDeadlines(CURL* curl, const S3Options& options, bool has_body, size_t body_bytes,
                  absl::Duration left, absl::Duration stall) {
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   Millis(std::min(options.connect_timeout, stall)));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(absl::ToInt64Seconds(absl::Ceil(stall, absl::Seconds(1)))));
  absl::Duration total = options.request_timeout;
  if (has_body) {
    total = 2 * stall +
            absl::Seconds(static_cast<double>(body_bytes) /
                          static_cast<double>(std::max<uint64_t>(1, options.min_bytes_per_second)));
  }
  const bool caller_deadline_first = left < total;
  if (caller_deadline_first) total = left;
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, Millis(total));
  return caller_deadline_first;
}

// Why a transfer failed (cancelled, timed out, unreachable): the request for `uri` to `endpoint`,
// at `host`.
absl::Status TransferError(CURLcode rc, const char* error, bool caller_deadline_first,
                           absl::Duration stall, const std::string& endpoint,
                           const std::string& uri, const std::string& host, bool path_style) {
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    return absl::CancelledError(absl::StrCat("request for ", uri, " to ", endpoint,
                                             " stopped: profd is stopping (an upload resumes "
                                             "from the spool at the next start)"));
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    std::string why = error[0] ? error : curl_easy_strerror(rc);
    if (caller_deadline_first) {
      return absl::DeadlineExceededError(absl::StrCat("S3 endpoint ", endpoint,
                                                      " did not answer for ", uri,
                                                      " before the caller's deadline (", why, ")"));
    }
    return absl::UnavailableError(absl::StrCat(
        "S3 endpoint ", endpoint, " did not answer in time (", why, ") for ", uri,
        ": it takes connections but sent nothing for ", absl::FormatDuration(stall),
        " (--s3_timeout), or was too slow for the request's size. Check the service and "
        "--s3_endpoint; traces wait in the spool and are retried"));
  }
  std::string why = error[0] ? error : curl_easy_strerror(rc);
  std::string hint;
  if (rc == CURLE_COULDNT_RESOLVE_HOST && !path_style) {
    hint = absl::StrCat(" (virtual-hosted style puts the bucket in the host name, ", host,
                        "; for MinIO, Ceph RGW or a local endpoint pass "
                        "--s3_path_style)");
  }
  return absl::UnavailableError(absl::StrCat(
      "S3 endpoint ", endpoint, " unreachable (", why, ")", hint, " for ", uri,
      ". Check --s3_endpoint and that the service is up; traces wait in the spool and are "
      "retried"));
}

}  // namespace

absl::StatusOr<AwsCredentials> LoadAwsCredentials() {
  AwsCredentials c;
  c.access_key_id = Env("AWS_ACCESS_KEY_ID");
  c.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!c.access_key_id.empty() && !c.secret_access_key.empty()) {
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.source = "the environment (AWS_ACCESS_KEY_ID)";
    return c;
  }
  std::string path = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty()) path = absl::StrCat(Env("HOME"), "/.aws/credentials");
  std::string profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  absl::StatusOr<AwsCredentials> from_file = FromCredentialsFile(path, profile);
  if (from_file.ok()) return from_file;
  return absl::UnauthenticatedError(absl::StrCat(
      "no AWS credentials for the S3 store: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not "
      "both set, and ",
      from_file.status().message() == "no file" ? absl::StrCat("there is no ", path)
                                                : std::string(from_file.status().message()),
      ". Set them in profd's environment, or write the credentials file (AWS_PROFILE picks the "
      "profile)"));
}

absl::Status S3ErrorStatus(const std::string& what, const std::string& where, long http_status,
                           const std::string& body, const std::string& signed_headers) {
  std::string code = XmlFirst(body, "Code");
  std::string message = XmlFirst(body, "Message");
  std::string detail =
      code.empty() ? absl::StrCat("HTTP ", http_status) : absl::StrCat(code, ": ", message);
  if (code == "NoSuchBucket" || (code.empty() && http_status == 404 && what == "listing")) {
    return absl::NotFoundError(absl::StrCat("no such bucket: ", where, " does not exist (", detail,
                                            ") while ", what,
                                            ". Create the bucket, or fix --store / --s3_endpoint"));
  }
  if (code == "NoSuchKey" || code == "NoSuchUpload" || (code.empty() && http_status == 404)) {
    return absl::NotFoundError(absl::StrCat("not found: ", where, " (", detail, ")"));
  }
  if (code == "RequestTimeTooSkewed") {
    return absl::FailedPreconditionError(absl::StrCat(
        "clock skew: this host's clock is more than 15 minutes away from the S3 service's at ",
        where, " (", detail, ") while ", what, ". Fix the clock (NTP, chrony), then it retries"));
  }
  if (code == "SignatureDoesNotMatch") {
    // A wrong secret, or a server that canonicalizes the request otherwise: say what was signed,
    // and what the server computed when it tells.
    std::string canonical = XmlFirst(body, "CanonicalRequest");
    return absl::PermissionDeniedError(absl::StrCat(
        "signature refused: the S3 service computed another SigV4 signature for ", where, " (",
        detail, ") while ", what, ". profd signed the headers ",
        signed_headers.empty() ? "(unknown)" : signed_headers,
        canonical.empty()
            ? ""
            : absl::StrCat(" and the service's canonical request was:\n", canonical, "\n"),
        ". Either AWS_SECRET_ACCESS_KEY (or the profile's secret) does not belong to the access "
        "key, or something between profd and S3 changes the request (a proxy rewriting headers or "
        "the path)"));
  }
  if (code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "ExpiredToken" ||
      code == "InvalidToken" || code == "TokenRefreshRequired" || code == "AllAccessDisabled" ||
      code == "InvalidSecurity" || (code.empty() && (http_status == 401 || http_status == 403))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "access denied: S3 refused the credentials for ", where, " (", detail, ") while ", what,
        ". Check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (or AWS_PROFILE "
        "and ~/.aws/credentials) and the bucket's policy"));
  }
  if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
      code == "IllegalLocationConstraintException") {
    return absl::FailedPreconditionError(
        absl::StrCat("wrong region or endpoint for ", where, " (", detail, ") while ", what,
                     ". Set --s3_region to the bucket's region, or --s3_endpoint"));
  }
  if (code == "BadDigest" || code == "InvalidDigest" || code == "XAmzContentSHA256Mismatch") {
    return absl::DataLossError(absl::StrCat("the upload to ", where, " was corrupted in transit (",
                                            detail, "); it is retried"));
  }
  if (http_status >= 500 || code == "SlowDown" || code == "ServiceUnavailable") {
    return absl::UnavailableError(absl::StrCat("the S3 service at ", where, " is failing (", detail,
                                               ") while ", what, "; it is retried"));
  }
  return absl::UnknownError(
      absl::StrCat("S3 error for ", where, " while ", what, ": HTTP ", http_status, " ", detail));
}

S3Bucket::S3Bucket(S3Options options) : options_(std::move(options)) {
  InitCurlOnce();
  if (options_.region.empty()) options_.region = Env("AWS_REGION");
  if (options_.region.empty()) options_.region = Env("AWS_DEFAULT_REGION");
  if (options_.region.empty()) options_.region = "us-east-1";
  endpoint_ = options_.endpoint.empty()
                  ? absl::StrCat("https://s3.", options_.region, ".amazonaws.com")
                  : options_.endpoint;
  if (!absl::StrContains(endpoint_, "://")) endpoint_ = "https://" + endpoint_;
  while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
  // As the AWS SDKs do: "bucket.10.0.0.5" names no host, so an IP endpoint means path style.
  if (!options_.path_style && IsIpLiteral(HostOf(Authority(endpoint_)))) {
    options_.path_style = true;
    LogInfo("store", "S3 endpoint %s is an IP address: using path-style requests (%s/%s/<key>)",
            endpoint_, endpoint_, options_.bucket);
  }
  // One connection cache for every request of this bucket: requests reuse kept-alive connections
  // (no TCP and TLS handshake per part or per index read).
  share_ = curl_share_init();
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, LockShare);
  curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, UnlockShare);
  curl_share_setopt(share_, CURLSHOPT_USERDATA, share_mu_);
}

S3Bucket::~S3Bucket() { curl_share_cleanup(share_); }

std::string S3Bucket::UriOf(const std::string& key) const {
  return absl::StrCat("s3://", options_.bucket, "/", key);
}

S3Bucket::Target S3Bucket::TargetFor(const std::string& key) const {
  const absl::string_view scheme =
      absl::string_view(endpoint_).substr(0, endpoint_.find("://") + 3);
  const absl::string_view authority = Authority(endpoint_);
  Target t;
  if (options_.path_style) {
    t.host = std::string(authority);
    t.path = absl::StrCat("/", UriEncode(options_.bucket, false), "/", UriEncode(key, true));
  } else {
    t.host = absl::StrCat(options_.bucket, ".", authority);
    t.path = absl::StrCat("/", UriEncode(key, true));
  }
  t.url = absl::StrCat(scheme, t.host, t.path);
  return t;
}

absl::StatusOr<S3Bucket::Response> S3Bucket::Send(const std::string& method, const std::string& key,
                                                  const std::string& query, absl::string_view body,
                                                  const PayloadDigest& digest,
                                                  const std::string& content_type,
                                                  const ChunkSink* sink, absl::Time deadline) {
  if (cancelled_.load()) {
    return absl::CancelledError(absl::StrCat("request for ", UriOf(key),
                                             " not sent: profd is stopping (it resumes at the "
                                             "next start)"));
  }
  if (!key.empty()) {
    if (absl::Status s = ValidateObjectKey(key); !s.ok()) return s;
  }
  const absl::Time sent = absl::Now();
  if (sent >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("no time left to ask ", endpoint_, " for ", UriOf(key)));
  }
  absl::StatusOr<AwsCredentials> credentials = LoadAwsCredentials();
  if (!credentials.ok()) return credentials.status();

  const Target target_url = TargetFor(key);
  const bool has_body = method == "PUT" || method == "POST";
  // Exactly the headers sent are the headers signed.
  SigV4Request to_sign{method, target_url.path, query, {}, digest.sha256_hex};
  const std::string amz_date = AmzDate(absl::Now());
  to_sign.headers = {{"host", target_url.host},
                     {"x-amz-content-sha256", digest.sha256_hex},
                     {"x-amz-date", amz_date}};
  if (!credentials->session_token.empty()) {
    to_sign.headers.push_back({"x-amz-security-token", credentials->session_token});
  }
  if (has_body && !body.empty()) to_sign.headers.push_back({"content-md5", digest.md5_base64()});
  if (has_body) {
    to_sign.headers.push_back(
        {"content-type", content_type.empty() ? "application/octet-stream" : content_type});
  }
  SigV4Signature signature = SignV4(to_sign, credentials->access_key_id,
                                    credentials->secret_access_key, options_.region, amz_date);

  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  Response response;
  response.signed_headers = signature.signed_headers;
  BodyTarget target{curl, sink, &response.body, absl::OkStatus()};
  char error[CURL_ERROR_SIZE] = {};
  std::string url = target_url.url;
  if (!query.empty()) absl::StrAppend(&url, "?", query);
  curl_slist* headers = HeaderList(to_sign, signature, has_body);

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);  // the path signed is the path sent
  curl_easy_setopt(curl, CURLOPT_SHARE, share_);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  const absl::Duration stall = std::max(options_.stall_timeout, absl::Seconds(1));
  const bool caller_deadline_first =
      SetDeadlines(curl, options_, has_body, body.size(), deadline - sent, stall);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &cancelled_);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.etag);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &target);
  SetMethod(curl, method, has_body, body);

  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);

  if (!target.sink_status.ok()) return target.sink_status;
  if (rc != CURLE_OK) {
    return TransferError(rc, error, caller_deadline_first, stall, endpoint_, UriOf(key),
                         target_url.host, options_.path_style);
  }
  return response;
}

absl::StatusOr<S3Bucket::Response> S3Bucket::Send(const std::string& method, const std::string& key,
                                                  const std::string& query, const ChunkSink* sink,
                                                  absl::Time deadline) {
  static const PayloadDigest kEmpty = DigestPayload("");
  return Send(method, key, query, "", kEmpty, "", sink, deadline);
}

absl::Status S3Bucket::ErrorOf(const std::string& what, const std::string& where,
                               const Response& r) const {
  return S3ErrorStatus(what, where, r.status, r.body, r.signed_headers);
}

absl::Status S3Bucket::PutBytes(const std::string& key, const std::string& data) {
  const PayloadDigest digest = DigestPayload(data);
  absl::StatusOr<Response> r = Send("PUT", key, "", data, digest, ContentTypeOf(key), nullptr);
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status >= 300) {
    return ErrorOf("uploading", UriOf(key) + " at " + endpoint_, *r);
  }
  return CheckEtag(r->etag, digest, UriOf(key));
}

absl::Status S3Bucket::CheckEtag(const std::string& quoted_etag, const PayloadDigest& digest,
                                 const std::string& what) {
  // An ETag that is an MD5 must be ours (SSE-KMS objects have other ETags).
  std::string etag(absl::StripSuffix(absl::StripPrefix(quoted_etag, "\""), "\""));
  if (etag.size() == 32 && etag != digest.md5_hex()) {
    return absl::DataLossError(absl::StrCat("upload of ", what, " came back with ETag ", etag,
                                            ", expected MD5 ", digest.md5_hex(),
                                            "; it is retried"));
  }
  return absl::OkStatus();
}

absl::Status S3Bucket::PutFile(const std::string& key, const std::string& path, bool) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot upload ", path, ": it does not exist"));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > options_.part_size) return PutMultipart(key, path, size);
  std::ifstream in(path, std::ios::binary);
  std::string data(size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) {
    return absl::DataLossError(absl::StrCat("short read from ", path));
  }
  return PutBytes(key, data);
}

std::string MultipartRecordPath(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return absl::StrCat(dir, "/.", name, ".s3-upload");
}

absl::Status S3Bucket::AbortUpload(const std::string& key, const std::string& upload_id) {
  absl::StatusOr<Response> r = Send("DELETE", key, Query({{"uploadId", upload_id}}), nullptr);
  if (!r.ok()) return r.status();
  if (r->status >= 200 && r->status < 300) {
    LogInfo("store", "aborted multipart upload %s of %s", upload_id, UriOf(key));
    return absl::OkStatus();
  }
  // 404 NoSuchUpload: already aborted or completed; nothing is left to pay for.
  if (r->status == 404) return absl::OkStatus();
  // A service without AbortMultipartUpload (s3rver answers 405): asking again cannot help.
  if (r->status == 405 || r->status == 501) {
    LogWarning(
        "store",
        "the S3 service at %s cannot abort multipart uploads (HTTP %d): upload %s of %s "
        "stays until the bucket's lifecycle rule (AbortIncompleteMultipartUpload) removes it",
        endpoint_, r->status, upload_id, UriOf(key));
    return absl::OkStatus();
  }
  return ErrorOf(absl::StrCat("aborting multipart upload ", upload_id),
                 UriOf(key) + " at " + endpoint_, *r);
}

absl::Status S3Bucket::AbortRecordedUpload(const std::string& record) {
  std::ifstream in(record);
  if (!in) return absl::OkStatus();
  std::string key, upload_id;
  std::getline(in, key);
  std::getline(in, upload_id);
  in.close();
  if (!key.empty() && !upload_id.empty()) {
    absl::Status aborted = AbortUpload(key, upload_id);
    // The service still down (or profd stopping): try again with the next attempt rather than
    // leave the upload.
    if (absl::IsUnavailable(aborted) || absl::IsCancelled(aborted) ||
        absl::IsDeadlineExceeded(aborted)) {
      return absl::UnavailableError(absl::StrCat(
          "cannot abort the multipart upload ", upload_id, " of ", UriOf(key),
          " an earlier attempt left (its parts would stay and be billed), so no new upload starts "
          "yet: ",
          aborted.message()));
    }
    // Refused for good (e.g. no s3:AbortMultipartUpload permission): say so once, and go on
    // uploading rather than keep the trace waiting for ever.
    if (!aborted.ok()) {
      LogWarning("store",
                 "multipart upload %s of %s, left by an earlier attempt, cannot be aborted (%s); "
                 "an AbortIncompleteMultipartUpload lifecycle rule on the bucket removes it",
                 upload_id, UriOf(key), aborted.message());
    }
  }
  unlink(record.c_str());
  return absl::OkStatus();
}

absl::Status S3Bucket::PutMultipart(const std::string& key, const std::string& path,
                                    uint64_t size) {
  const std::string where = UriOf(key) + " at " + endpoint_;
  // An upload an outage or a crash interrupted is aborted before a new one starts.
  const std::string record = MultipartRecordPath(path);
  if (absl::Status s = AbortRecordedUpload(record); !s.ok()) return s;

  absl::StatusOr<Response> r = Send("POST", key, Query({{"uploads", ""}}), "", DigestPayload(""),
                                    ContentTypeOf(key), nullptr);
  if (!r.ok()) return r.status();
  if (r->status != 200) return ErrorOf("starting a multipart upload", where, *r);
  std::string upload_id = XmlFirst(r->body, "UploadId");
  if (upload_id.empty()) {
    return absl::UnknownError(
        absl::StrCat("S3 at ", endpoint_, " answered a multipart upload start without UploadId"));
  }
  if (absl::Status s = WriteFileAtomically(record, absl::StrCat(key, "\n", upload_id, "\n"));
      !s.ok()) {
    LogWarning("store",
               "cannot record multipart upload %s of %s in %s (%s): an outage now would "
               "leave it unaborted",
               upload_id, UriOf(key), record, s.message());
  }
  // The abort goes now; if the service is down it stays recorded and the next attempt retries it.
  auto abort_upload = [&](absl::Status why) {
    absl::Status aborted = AbortUpload(key, upload_id);
    if (aborted.ok()) {
      unlink(record.c_str());
    } else {
      LogWarning("store",
                 "multipart upload %s of %s not aborted yet (%s); the next attempt "
                 "aborts it",
                 upload_id, UriOf(key), aborted.message());
    }
    return why;
  };

  // Part n+1 is read and hashed on a second thread while part n is on the wire: two parts in
  // memory.
  struct Part {
    std::string bytes;
    PayloadDigest digest;
    bool read = false;
  };
  std::ifstream in(path, std::ios::binary);
  auto load = [&in](uint64_t n, Part* part) {
    part->bytes.resize(n);
    in.read(part->bytes.data(), static_cast<std::streamsize>(n));
    part->read = static_cast<uint64_t>(in.gcount()) == n;
    if (part->read) part->digest = DigestPayload(part->bytes);
  };
  const uint64_t part_size = options_.part_size;
  Part parts[2];
  load(std::min(part_size, size), &parts[0]);
  std::string complete = "<CompleteMultipartUpload>";
  int number = 0;
  for (uint64_t offset = 0; offset < size; offset += part_size) {
    ++number;
    Part& part = parts[(number - 1) % 2];
    std::thread next;
    if (offset + part_size < size) {
      next = std::thread(load, std::min(part_size, size - offset - part_size), &parts[number % 2]);
    }
    // The reader is joined on every way out of this iteration.
    struct Join {
      std::thread& t;
      ~Join() {
        if (t.joinable()) t.join();
      }
    } join{next};
    if (!part.read)
      return abort_upload(absl::DataLossError(absl::StrCat("short read from ", path)));
    absl::string_view body = part.bytes;
    const PayloadDigest& digest = part.digest;
    r = Send("PUT", key, Query({{"partNumber", std::to_string(number)}, {"uploadId", upload_id}}),
             body, digest, "", nullptr);
    if (!r.ok()) return abort_upload(r.status());
    if (r->status != 200) {
      return abort_upload(ErrorOf(absl::StrCat("uploading part ", number), where, *r));
    }
    if (absl::Status s =
            CheckEtag(r->etag, digest, absl::StrCat("part ", number, " of ", UriOf(key)));
        !s.ok()) {
      return abort_upload(s);
    }
    std::string etag(absl::StripSuffix(absl::StripPrefix(r->etag, "\""), "\""));
    absl::StrAppend(&complete, "<Part><PartNumber>", number, "</PartNumber><ETag>\"", etag,
                    "\"</ETag></Part>");
  }
  complete += "</CompleteMultipartUpload>";
  r = Send("POST", key, Query({{"uploadId", upload_id}}), complete, DigestPayload(complete),
           "application/xml", nullptr);
  if (!r.ok()) return abort_upload(r.status());
  // CompleteMultipartUpload can fail with 200 and an <Error> body.
  if (r->status != 200 || absl::StrContains(r->body, "<Error>")) {
    return abort_upload(ErrorOf("completing a multipart upload", where, *r));
  }
  unlink(record.c_str());
  return absl::OkStatus();
}

absl::Status S3Bucket::Read(const std::string& key, const ChunkSink& sink, absl::Time deadline) {
  absl::StatusOr<Response> r = Send("GET", key, "", &sink, deadline);
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status >= 300) {
    return ErrorOf("reading", UriOf(key) + " at " + endpoint_, *r);
  }
  return absl::OkStatus();
}

absl::StatusOr<ObjectListing> S3Bucket::List(const std::string& prefix, bool delimited,
                                             absl::Time deadline) {
  ObjectListing listing;
  std::string token;
  for (int page = 0; page < 10000; ++page) {
    std::vector<std::pair<std::string, std::string>> params = {{"list-type", "2"},
                                                               {"prefix", prefix}};
    if (delimited) params.push_back({"delimiter", "/"});
    if (!token.empty()) params.push_back({"continuation-token", token});
    if (options_.list_page_size > 0) {
      params.push_back({"max-keys", std::to_string(options_.list_page_size)});
    }
    absl::StatusOr<Response> r = Send("GET", "", Query(params), nullptr, deadline);
    if (!r.ok()) return r.status();
    if (r->status != 200) {
      return ErrorOf("listing", absl::StrCat("bucket s3://", options_.bucket, " at ", endpoint_),
                     *r);
    }
    for (const std::string& item : XmlAll(r->body, "Contents")) {
      ObjectInfo info;
      info.key = XmlFirst(item, "Key");
      (void)absl::SimpleAtoi(XmlFirst(item, "Size"), &info.bytes);
      std::string err;
      if (!absl::ParseTime(absl::RFC3339_full, XmlFirst(item, "LastModified"), &info.modified,
                           &err)) {
        info.modified = absl::InfiniteFuture();
      }
      listing.objects.push_back(std::move(info));
    }
    for (const std::string& item : XmlAll(r->body, "CommonPrefixes")) {
      listing.folders.push_back(XmlFirst(item, "Prefix"));
    }
    if (XmlFirst(r->body, "IsTruncated") != "true") break;
    token = XmlFirst(r->body, "NextContinuationToken");
    if (token.empty()) break;
  }
  return listing;
}

}  // namespace profd::store

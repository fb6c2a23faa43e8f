#include "daemon/store/s3_bucket.h"

#include <curl/curl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/common/sha256.h"
#include "daemon/store/digest.h"

namespace profd::store {

namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
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
                           const std::string& body) {
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
  if (code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
      code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired" ||
      code == "AllAccessDisabled" || code == "InvalidSecurity" ||
      (code.empty() && (http_status == 401 || http_status == 403))) {
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
}

std::string S3Bucket::UriOf(const std::string& key) const {
  return absl::StrCat("s3://", options_.bucket, "/", key);
}

std::string S3Bucket::UrlFor(const std::string& key, const std::string& query) const {
  std::string url;
  if (options_.path_style) {
    url =
        absl::StrCat(endpoint_, "/", UriEncode(options_.bucket, false), "/", UriEncode(key, true));
  } else {
    size_t scheme_end = endpoint_.find("://") + 3;
    url = absl::StrCat(endpoint_.substr(0, scheme_end), options_.bucket, ".",
                       endpoint_.substr(scheme_end), "/", UriEncode(key, true));
  }
  if (!query.empty()) absl::StrAppend(&url, "?", query);
  return url;
}

absl::StatusOr<S3Bucket::Response> S3Bucket::Send(const std::string& method, const std::string& key,
                                                  const std::string& query, absl::string_view body,
                                                  const std::string& content_type,
                                                  const ChunkSink* sink) {
  absl::StatusOr<AwsCredentials> credentials = LoadAwsCredentials();
  if (!credentials.ok()) return credentials.status();

  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  Response response;
  BodyTarget target{curl, sink, &response.body, absl::OkStatus()};
  char error[CURL_ERROR_SIZE] = {};
  std::string url = UrlFor(key, query);
  std::string sigv4 = absl::StrCat("aws:amz:", options_.region, ":s3");

  curl_slist* headers = nullptr;
  auto add_header = [&](const std::string& h) { headers = curl_slist_append(headers, h.c_str()); };
  // libcurl 7.88 signs the x-amz-* headers it is given and takes the payload hash from this one.
  add_header("x-amz-content-sha256: " + Sha256Hex(body));
  if (!credentials->session_token.empty()) {
    add_header("x-amz-security-token: " + credentials->session_token);
  }
  add_header("Expect:");  // no 100-continue round trip
  if (method == "PUT" || (method == "POST" && !body.empty())) {
    add_header("Content-MD5: " + Md5Base64(body));
    add_header("Content-Type: " +
               (content_type.empty() ? "application/octet-stream" : content_type));
  }

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, credentials->access_key_id.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, credentials->secret_access_key.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.request_timeout)));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.etag);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &target);
  if (method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (method == "PUT" || method == "POST") {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
  }

  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);

  if (!target.sink_status.ok()) return target.sink_status;
  if (rc != CURLE_OK) {
    std::string why = error[0] ? error : curl_easy_strerror(rc);
    return absl::UnavailableError(absl::StrCat(
        "S3 endpoint ", endpoint_, " unreachable (", why, ") for ", UriOf(key),
        ". Check --s3_endpoint and that the service is up; traces wait in the spool and are "
        "retried"));
  }
  return response;
}

absl::Status S3Bucket::PutBytes(const std::string& key, const std::string& data) {
  std::string type = absl::EndsWith(key, ".json") ? "application/json"
                     : absl::EndsWith(key, ".gz") ? "application/gzip"
                                                  : "";
  absl::StatusOr<Response> r = Send("PUT", key, "", data, type, nullptr);
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status >= 300) {
    return S3ErrorStatus("uploading", UriOf(key) + " at " + endpoint_, r->status, r->body);
  }
  // An ETag that is an MD5 must be ours (SSE-KMS objects have other ETags).
  std::string etag(absl::StripSuffix(absl::StripPrefix(r->etag, "\""), "\""));
  if (etag.size() == 32 && etag != Md5Hex(data)) {
    return absl::DataLossError(absl::StrCat("upload of ", UriOf(key), " came back with ETag ", etag,
                                            ", expected MD5 ", Md5Hex(data), "; it is retried"));
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

absl::Status S3Bucket::PutMultipart(const std::string& key, const std::string& path,
                                    uint64_t size) {
  const std::string where = UriOf(key) + " at " + endpoint_;
  absl::StatusOr<Response> r = Send("POST", key, Query({{"uploads", ""}}), "", "", nullptr);
  if (!r.ok()) return r.status();
  if (r->status != 200)
    return S3ErrorStatus("starting a multipart upload", where, r->status, r->body);
  std::string upload_id = XmlFirst(r->body, "UploadId");
  if (upload_id.empty()) {
    return absl::UnknownError(
        absl::StrCat("S3 at ", endpoint_, " answered a multipart upload start without UploadId"));
  }
  auto abort_upload = [&](absl::Status why) {
    (void)Send("DELETE", key, Query({{"uploadId", upload_id}}), "", "", nullptr);
    return why;
  };

  std::ifstream in(path, std::ios::binary);
  std::string complete = "<CompleteMultipartUpload>";
  std::string part(options_.part_size, '\0');
  int number = 0;
  for (uint64_t offset = 0; offset < size; offset += options_.part_size) {
    ++number;
    uint64_t n = std::min<uint64_t>(options_.part_size, size - offset);
    in.read(part.data(), static_cast<std::streamsize>(n));
    if (static_cast<uint64_t>(in.gcount()) != n) {
      return abort_upload(absl::DataLossError(absl::StrCat("short read from ", path)));
    }
    absl::string_view body(part.data(), n);
    r = Send("PUT", key, Query({{"partNumber", std::to_string(number)}, {"uploadId", upload_id}}),
             body, "", nullptr);
    if (!r.ok()) return abort_upload(r.status());
    if (r->status != 200) {
      return abort_upload(
          S3ErrorStatus(absl::StrCat("uploading part ", number), where, r->status, r->body));
    }
    std::string etag(absl::StripSuffix(absl::StripPrefix(r->etag, "\""), "\""));
    if (etag.size() == 32 && etag != Md5Hex(body)) {
      return abort_upload(absl::DataLossError(
          absl::StrCat("part ", number, " of ", UriOf(key), " came back with ETag ", etag,
                       ", expected MD5 ", Md5Hex(body), "; it is retried")));
    }
    absl::StrAppend(&complete, "<Part><PartNumber>", number, "</PartNumber><ETag>\"", etag,
                    "\"</ETag></Part>");
  }
  complete += "</CompleteMultipartUpload>";
  r = Send("POST", key, Query({{"uploadId", upload_id}}), complete, "application/xml", nullptr);
  if (!r.ok()) return abort_upload(r.status());
  // CompleteMultipartUpload can fail with 200 and an <Error> body.
  if (r->status != 200 || absl::StrContains(r->body, "<Error>")) {
    return abort_upload(S3ErrorStatus("completing a multipart upload", where, r->status, r->body));
  }
  return absl::OkStatus();
}

absl::Status S3Bucket::Read(const std::string& key, const ChunkSink& sink) {
  absl::StatusOr<Response> r = Send("GET", key, "", "", "", &sink);
  if (!r.ok()) return r.status();
  if (r->status < 200 || r->status >= 300) {
    return S3ErrorStatus("reading", UriOf(key) + " at " + endpoint_, r->status, r->body);
  }
  return absl::OkStatus();
}

absl::StatusOr<ObjectListing> S3Bucket::List(const std::string& prefix, bool delimited) {
  ObjectListing listing;
  std::string token;
  for (int page = 0; page < 10000; ++page) {
    std::vector<std::pair<std::string, std::string>> params = {{"list-type", "2"},
                                                               {"prefix", prefix}};
    if (delimited) params.push_back({"delimiter", "/"});
    if (!token.empty()) params.push_back({"continuation-token", token});
    absl::StatusOr<Response> r = Send("GET", "", Query(params), "", "", nullptr);
    if (!r.ok()) return r.status();
    if (r->status != 200) {
      return S3ErrorStatus("listing",
                           absl::StrCat("bucket s3://", options_.bucket, " at ", endpoint_),
                           r->status, r->body);
    }
    for (const std::string& item : XmlAll(r->body, "Contents")) {
      ObjectInfo info;
      info.key = XmlFirst(item, "Key");
      (void)absl::SimpleAtoi(XmlFirst(item, "Size"), &info.bytes);
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

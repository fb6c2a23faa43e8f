#include "common/https_client.h"

#include <curl/curl.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"

namespace profd {
namespace {

struct Sink {
  std::string* body;
  size_t limit;
  bool too_large = false;
};

size_t Collect(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > sink->limit) {
    sink->too_large = true;
    return 0;  // libcurl fails the transfer
  }
  sink->body->append(data, n);
  return n;
}

// libcurl's progress callback: a non-zero answer ends the transfer.
int AbortWhenAsked(void* abort, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(abort)->load() ? 1 : 0;
}

curl_blob Blob(const std::string& text) {
  return curl_blob{const_cast<char*>(text.data()), text.size(), CURL_BLOB_NOCOPY};
}

}  // namespace

absl::StatusOr<HttpsAnswer> SendHttps(const HttpsRequest& request) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) return absl::InternalError("cannot start libcurl");
  CURL* c = curl.get();
  HttpsAnswer answer;
  Sink sink{&answer.body, request.max_answer_bytes};
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, request.allow_plain_http ? "https,http" : "https");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(request.timeout)));
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  if (request.abort != nullptr) {
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &AbortWhenAsked);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(request.abort));
  }
  curl_blob ca = Blob(request.ca_pem), cert = Blob(request.client_cert_pem),
            key = Blob(request.client_key_pem);
  if (!request.ca_pem.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca);
  } else if (!request.ca_file.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
  }
  if (request.insecure_skip_tls_verify) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!request.client_cert_pem.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_slist* h = curl_slist_append(nullptr, "Accept: application/json");
  if (!request.bearer_token.empty()) {
    h = curl_slist_append(h, absl::StrCat("Authorization: Bearer ", request.bearer_token).c_str());
  }
  if (request.method == "POST") {
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(h, &curl_slist_free_all);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());

  const CURLcode rc = curl_easy_perform(c);
  const std::string what = absl::StrCat(request.method, " ", request.url);
  if (sink.too_large) {
    return absl::ResourceExhaustedError(absl::StrCat("the answer to ", what, " is larger than ",
                                                     request.max_answer_bytes, " bytes"));
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK) return absl::CancelledError(what + ": stopped");
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &answer.status);
  return answer;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the Kubernetes token ", path,
                     " (--kubernetes_token_file; in a pod: the service account's token)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

absl::StatusOr<std::string> InClusterApiServer(const std::string& flag) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(absl::StrCat(
        flag,
        " needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set in every pod): "
        "run profd in the cluster, or give the API server's https URL"));
  }
  const std::string h = absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host;
  return absl::StrCat("https://", h, ":", port);
}

std::string KubernetesErrorMessage(const std::string& body) {
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  if (!doc.HasParseError() && doc.IsObject()) {
    auto it = doc.FindMember("message");
    if (it != doc.MemberEnd() && it->value.IsString()) return it->value.GetString();
  }
  return body.substr(0, 200);
}

}  // namespace profd

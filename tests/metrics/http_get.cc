#include "tests/metrics/http_get.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace profd::testing {
namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  std::string body;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl.get(), CURLOPT_ACCEPT_ENCODING, "");  // gzip, as Prometheus asks
  CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) {
    return absl::FailedPreconditionError(absl::StrCat("GET ", url, ": HTTP ", status, ": ", body));
  }
  return body;
}

HttpResult HttpPost(const std::string& url, const std::string& body,
                    const std::vector<std::string>& headers) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> list(nullptr, curl_slist_free_all);
  curl_slist* raw = nullptr;
  for (const std::string& h : headers) raw = curl_slist_append(raw, h.c_str());
  raw = curl_slist_append(raw, "Content-Type: application/json");
  list.reset(raw);
  HttpResult result;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &result.body);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 10000L);
  if (CURLcode rc = curl_easy_perform(curl.get()); rc != CURLE_OK) {
    result.error = absl::StrCat("POST ", url, ": ", curl_easy_strerror(rc));
    return result;
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &result.status);
  return result;
}

absl::StatusOr<rapidjson::Document> PrometheusQuery(const std::string& prometheus_address,
                                                    const std::string& expr) {
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  char* escaped = curl_easy_escape(curl.get(), expr.c_str(), static_cast<int>(expr.size()));
  std::string url = absl::StrCat("http://", prometheus_address, "/api/v1/query?query=", escaped);
  curl_free(escaped);
  std::unique_ptr<CURL, void (*)(CURL*)> get(curl_easy_init(), curl_easy_cleanup);
  std::string body;
  curl_easy_setopt(get.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(get.get(), CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(get.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(get.get(), CURLOPT_TIMEOUT_MS, 10000L);
  if (CURLcode rc = curl_easy_perform(get.get()); rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("query ", expr, ": ", curl_easy_strerror(rc)));
  }
  rapidjson::Document doc;
  doc.Parse(body.c_str());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("status")) {
    return absl::InternalError(absl::StrCat("query ", expr, ": not Prometheus JSON: ", body));
  }
  if (std::string(doc["status"].GetString()) != "success") {
    return absl::InvalidArgumentError(absl::StrCat(
        "query ", expr, ": ", doc.HasMember("error") ? doc["error"].GetString() : body));
  }
  return doc;
}

double SeriesValue(const std::string& exposition, const std::string& family,
                   const std::string& label) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, family + "{") || !absl::StrContains(line, label)) continue;
    return std::stod(std::string(line.substr(line.rfind(' ') + 1)));
  }
  return -1;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace profd::testing

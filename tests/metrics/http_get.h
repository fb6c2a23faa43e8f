// Test support for /metrics tests: a plain HTTP GET (libcurl) and Prometheus' query API.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rapidjson/document.h"

namespace profd::testing {

// The body of a 200 response; any other status or a transport error is an error.
absl::StatusOr<std::string> HttpGet(const std::string& url);

struct HttpResult {
  long status = 0;  // 0: no answer (the error says why)
  std::string body;
  std::string error;
};
// POST `body` to url with the given extra header lines ("Authorization: Bearer ...").
HttpResult HttpPost(const std::string& url, const std::string& body,
                    const std::vector<std::string>& headers);

// GET http://<prometheus>/api/v1/query?query=<expr>. Returns the parsed response; an error when
// Prometheus says "status":"error" (malformed expression...), with its message.
absl::StatusOr<rapidjson::Document> PrometheusQuery(const std::string& prometheus_address,
                                                    const std::string& expr);

// In a /metrics text: the value of the first series of `family` whose labels include `label`
// (e.g. reason="flood"); -1 when there is none.
double SeriesValue(const std::string& exposition, const std::string& family,
                   const std::string& label);

// An unused loopback TCP port (bound, read back, closed).
int FreePort();

}  // namespace profd::testing

// Test support for /metrics tests: a plain HTTP GET (libcurl) and Prometheus' query API.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "rapidjson/document.h"

namespace profd::testing {

// The body of a 200 response; any other status or a transport error is an error.
absl::StatusOr<std::string> HttpGet(const std::string& url);

// GET http://<prometheus>/api/v1/query?query=<expr>. Returns the parsed response; an error when
// Prometheus says "status":"error" (malformed expression...), with its message.
absl::StatusOr<rapidjson::Document> PrometheusQuery(const std::string& prometheus_address,
                                                    const std::string& expr);

// An unused loopback TCP port (bound, read back, closed).
int FreePort();

}  // namespace profd::testing

// One HTTPS exchange with a JSON API (the Kubernetes API server, a kubelet): the only HTTP client
// code of profctl and profd outside the store. Blocks the calling thread until the answer, the
// timeout, or `abort` turning true; never on an I/O thread or a gRPC handler that must not wait.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace profd {

struct HttpsRequest {
  std::string method = "GET";  // or "POST" with `body` (JSON)
  std::string url;
  std::string body;
  std::string bearer_token;  // "": no Authorization header
  // The server's certificate is checked against ca_pem, else ca_file, else the system's CAs.
  std::string ca_pem;
  std::string ca_file;
  bool insecure_skip_tls_verify = false;
  std::string client_cert_pem, client_key_pem;  // a client certificate, both or neither
  // A bearer token never goes in plain text: http:// only where the user's kubeconfig says so.
  bool allow_plain_http = false;
  absl::Duration timeout = absl::Seconds(10);
  size_t max_answer_bytes = size_t{64} << 20;
  const std::atomic<bool>* abort = nullptr;  // true ends a transfer in flight
};

struct HttpsAnswer {
  long status = 0;  // the HTTP status code
  std::string body;
};

// The answer, whatever its status code. Errors are the transport's only: UNAVAILABLE with
// libcurl's words (no connection, TLS refused, timeout), RESOURCE_EXHAUSTED for an answer over
// max_answer_bytes, CANCELLED when `abort` ended it.
absl::StatusOr<HttpsAnswer> SendHttps(const HttpsRequest& request);

// Kubernetes' own helpers for the clients of its API.

// The bearer token in a file (a service account's, which the kubelet rotates: read it again for
// each request), trimmed.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The API server from inside a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
// `flag` names what asked, for the error outside a pod.
absl::StatusOr<std::string> InClusterApiServer(const std::string& flag);

// What a Kubernetes API error says: the "message" of the Status object it answers with, else the
// start of the body.
std::string KubernetesErrorMessage(const std::string& body);

}  // namespace profd

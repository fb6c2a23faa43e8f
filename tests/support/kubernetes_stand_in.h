// Test support: the Kubernetes API server's stand-in (kubernetes_api_stand_in.py) in a child
// process, over HTTPS with a throwaway self-signed certificate made by the openssl CLI, serving a
// recorded PodList and the users of users.json (TokenReview, SubjectAccessReview) from
// tests/fixtures/kubernetes/. It stands in for the API server only: the client under test is
// profd's real one.
#pragma once

#include <memory>
#include <string>

#include "tests/support/subprocess.h"

namespace profd::testing {

class KubernetesApiStandIn {
 public:
  struct Options {
    std::string pods_fixture = "podlist-gpu-node-7.json";  // in tests/fixtures/kubernetes/
    bool forbidden = false;                                // 403 for the pod list (RBAC missing)
  };
  // Empty *error and a null result: openssl or /usr/bin/python3 is missing (callers skip).
  // Non-empty *error: they are there and it did not start (callers fail).
  static std::unique_ptr<KubernetesApiStandIn> Start(const Options& options, std::string* error);
  ~KubernetesApiStandIn();

  int port() const { return port_; }
  std::string Url() const;  // https://127.0.0.1:PORT
  // The pod list of `node`, as profd's --kubernetes_pods=apiserver asks for it.
  std::string PodsUrl(const std::string& node) const;
  const std::string& ca_file() const { return ca_file_; }        // the server's own certificate
  const std::string& token_file() const { return token_file_; }  // holds the accepted token
  // A second self-signed certificate that did not sign the server's.
  const std::string& other_ca_file() const { return other_ca_file_; }
  // One line per request: "GET|POST <path> token-ok|token-bad".
  std::string Requests() const;

 private:
  KubernetesApiStandIn() = default;
  TempDir dir_;
  std::unique_ptr<Subprocess> server_;
  int port_ = 0;
  std::string ca_file_, other_ca_file_, token_file_;
};

}  // namespace profd::testing

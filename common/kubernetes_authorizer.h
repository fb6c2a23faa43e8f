// Who may capture what, decided the Kubernetes way (profd's --kubernetes_authorization, the
// gateway's too: client/gateway.h): a caller shows a bearer token (profctl sends its kubeconfig's),
// which the API server authenticates (TokenReview: who it is, its groups), and each namespace of
// the processes a capture would reach is a question for the cluster's authorizer
// (SubjectAccessReview: may this user "create" "captures.profd.dev" there; "" = cluster-wide, for
// processes in no pod). RBAC grants it like any verb on any resource (deploy/kubernetes/rbac.yaml,
// role profd-capturer). profd needs only the system:auth-delegator role for the two reviews.
//
// Threads: any; a call blocks for one API round trip (a capture's admission, on profd's gRPC
// handler thread or the gateway's HTTP thread). A token's identity is kept for a minute (hashed),
// as the API server's own webhook authenticator caches, so a fleet capture's retries cost no
// review.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace profd {

struct KubernetesCaller {
  std::string user;  // status.user.username, e.g. "alice" or "system:serviceaccount:ns:name"
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
};

class KubernetesAuthorizer {
 public:
  struct Options {
    std::string server;      // https://HOST:PORT of the API server
    std::string token_file;  // profd's own token (the service account's), for the reviews
    std::string ca_file;     // PEM CA of the API server; "": the system's
    absl::Duration timeout = absl::Seconds(5);
    absl::Duration identity_ttl = absl::Minutes(1);
  };
  // The resource a capture is, for RBAC: verb create on captures in API group profd.dev.
  static constexpr char kGroup[] = "profd.dev";
  static constexpr char kResource[] = "captures";
  static constexpr char kVerb[] = "create";

  explicit KubernetesAuthorizer(Options options);

  // The options a --kubernetes_authorization flag gives: "none" or "" (std::nullopt: nothing is
  // asked), "apiserver" (inside a pod: the in-cluster API server) or an https:// URL. `flag` names
  // the flag in the error.
  static absl::StatusOr<std::optional<Options>> FromFlags(const std::string& flag,
                                                          const std::string& source,
                                                          const std::string& token_file,
                                                          const std::string& ca_file);

  // TokenReview. UNAUTHENTICATED when the API server does not know the token; UNAVAILABLE when
  // it cannot be asked (then nothing is allowed).
  absl::StatusOr<KubernetesCaller> Authenticate(const std::string& token);

  // SubjectAccessReview for a capture in `name_space` ("" = cluster-wide). PERMISSION_DENIED
  // with the authorizer's reason when not allowed.
  absl::Status Authorize(const KubernetesCaller& caller, const std::string& name_space);

  const Options& options() const { return options_; }

 private:
  absl::StatusOr<std::string> Review(const std::string& path, const std::string& body);

  const Options options_;
  absl::Mutex mutex_;
  struct Known {
    KubernetesCaller caller;
    absl::Time until;
  };
  std::map<std::string, Known> identities_ ABSL_GUARDED_BY(mutex_);  // by SHA-256 of the token
};

}  // namespace profd

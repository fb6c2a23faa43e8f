// profctl's way to the Kubernetes API server, as kubectl finds it: a kubeconfig (--kubeconfig,
// else the first file of $KUBECONFIG, else ~/.kube/config; its current or --context context) or,
// inside a pod, the service account the kubelet mounts. Only reads: the pods of a workload (a
// label selector, a Deployment's or a Job's, or one pod by name) and the nodes they run on.
//
// One thread: each call blocks until the API server answers or the timeout passes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rapidjson/document.h"

namespace profctl {

// Where the API server is and who profctl is to it.
struct KubeAccess {
  std::string server;  // https://HOST:PORT
  std::string ca_pem;  // verifies the server; empty: the system's CAs
  bool insecure_skip_tls_verify = false;
  std::string client_cert_pem, client_key_pem;  // client certificate
  std::string token;                            // bearer token
  std::string default_namespace;                // the context's namespace, else "default"
  std::string source;                           // where this came from, for messages
};

// kubeconfig: the flag ("" for kubectl's order); context: the flag ("" for current-context).
// The file may be YAML (as kubectl writes it) or JSON. An exec or auth-provider credential
// plugin is not run: the error says what to give instead.
absl::StatusOr<KubeAccess> LoadKubeAccess(const std::string& kubeconfig,
                                          const std::string& context);

// A kubeconfig's text, YAML or JSON, as a JSON document (YAML scalars become strings).
absl::StatusOr<rapidjson::Document> ParseKubeconfig(const std::string& text,
                                                    const std::string& where);

// A pod of the workload, as the API server describes it.
struct WorkloadPod {
  std::string name_space, name;
  std::string node_name;  // spec.nodeName: "" until scheduled
  std::string host_ip;    // status.hostIP: the node's address
  std::string phase;      // status.phase: Pending, Running, Succeeded, Failed, Unknown
};

class KubernetesApi {
 public:
  KubernetesApi(KubeAccess access, absl::Duration timeout);

  // GET path (e.g. /api/v1/namespaces/x/pods): the JSON object answered. A Kubernetes Status
  // (404, 403...) becomes an error carrying its message and what to do.
  absl::StatusOr<rapidjson::Document> Get(const std::string& path) const;

  // The label selector of a Deployment or Job (kind "deployment" or "job"), in the syntax
  // labelSelector takes: matchLabels and matchExpressions both.
  absl::StatusOr<std::string> SelectorOf(const std::string& kind, const std::string& name_space,
                                         const std::string& name) const;
  // One pod by its name (the gateway's "capture this pod"): NOT_FOUND when there is none.
  absl::StatusOr<WorkloadPod> GetPod(const std::string& name_space, const std::string& name) const;
  // The pods a label selector picks in a namespace, every page of the list.
  absl::StatusOr<std::vector<WorkloadPod>> ListPods(const std::string& name_space,
                                                    const std::string& selector) const;

  const KubeAccess& access() const { return access_; }

 private:
  const KubeAccess access_;
  const absl::Duration timeout_;
};

// A label selector from a LabelSelector object ({"matchLabels": {...}, "matchExpressions":
// [...]}); an error for an operator Kubernetes does not have.
absl::StatusOr<std::string> LabelSelectorText(const rapidjson::Value& selector);

}  // namespace profctl

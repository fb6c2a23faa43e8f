// profctl gateway: fleet captures for what cannot run profctl — a browser following the Grafana
// dashboard's "Capture this pod for 5 s" data link, a script with curl. One HTTP(S) listener:
//
//   GET  /capture?namespace=NS&pod=NAME&duration=5s  the page: what will be captured; its script
//                                                    starts the capture (a POST) and follows it
//   POST /api/v1/captures                            {"namespace","pod","duration","reason"}: 202
//   GET  /api/v1/captures/ID                         the capture's state, per node, and its links
//   GET  /captures/ID/report.html                    the stored capture's report (profctl report)
//   GET  /captures/ID/traces/CAPTURE/FILE            a stored trace, as the store keeps it
//
// Who asks is the user, not the gateway: their bearer token (a TokenReview) or, from an
// authenticating proxy the flags name, X-Forwarded-User and X-Forwarded-Groups; whether they may
// is a SubjectAccessReview (create captures.profd.dev in the pod's namespace), as profd's
// --kubernetes_authorization asks it. Each capture asked for is one audit line. The pod is found
// by name through the Kubernetes API (the gateway's own service account) and captured on its node
// by the fleet capture code (client/fleet_capture.h) over mutual TLS; a user's token goes along to
// the node, whose profd checks it again.
//
// Threads: HttpServer's epoll thread calls Handle (admission asks the API server: a few
// milliseconds, cached a minute per token, bounded by --timeout); each capture runs on its own
// thread, which updates its record under mutex_, then waits for the shared store and has a child
// profctl write the report and fetch the traces into --work_dir.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/fleet_capture.h"
#include "client/kubernetes_api.h"
#include "common/http_server.h"
#include "common/kubernetes_authorizer.h"

namespace profctl {

struct GatewayOptions {
  std::string listen = "0.0.0.0:7480";
  std::string tls_cert_file, tls_key_file;  // the gateway's own HTTPS; empty: plain HTTP
  // TokenReview and SubjectAccessReview (required: a gateway lets nobody capture unchecked).
  profd::KubernetesAuthorizer::Options authorization;
  // Peers (IP addresses) whose X-Forwarded-User / X-Forwarded-Groups are believed; none: only
  // bearer tokens.
  std::set<std::string> trusted_proxies;
  // How the gateway reaches the API and the nodes: --kubeconfig/--context (else in-cluster),
  // --node-address, --node-timeout, --lead.
  FleetFlags fleet;
  std::string work_dir;  // reports and traces of recent captures, one folder each
  absl::Duration max_duration = absl::Seconds(60);
  int max_running = 4;  // captures at once; more: 429
  int max_kept = 50;    // finished captures remembered (and their folders kept)
  // The store's upload is asynchronous: how long to wait for every node's capture to be listed.
  absl::Duration store_wait = absl::Seconds(60);
  std::string profctl_path;  // this binary, for the report's child process
};

// One capture asked through the gateway, as the page and the API show it.
struct GatewayCapture {
  std::string id;  // the fleet id
  std::string user, name_space, pod, reason;
  absl::Duration duration;
  // asking (connecting to the node), capturing, storing, reporting, done, failed
  std::string state = "asking";
  std::string error;  // why failed (or what went wrong after capturing)
  struct Node {
    std::string node, address, phase, capture_id, error;
    uint64_t events = 0;
  };
  std::vector<Node> nodes;
  bool report = false;  // report.html is there
  struct Trace {
    std::string capture_id, file;
    uint64_t bytes = 0;
  };
  std::vector<Trace> traces;
  absl::Time created;
};

class CaptureGateway {
 public:
  // g: the TLS flags the nodes' profd trust (--tls-ca/--tls-cert/--tls-key/--tls-server-name),
  // and --timeout for each API call and connection.
  CaptureGateway(const GlobalOptions& g, GatewayOptions options, KubeAccess access);
  ~CaptureGateway();  // waits for the captures in flight

  // Epoll thread.
  profd::HttpResponse Handle(const profd::HttpRequest& request);

 private:
  struct Caller;
  profd::HttpResponse Start(const profd::HttpRequest& request);
  // An authorized caller's capture: the pod found, the capture's thread started.
  profd::HttpResponse Admit(Caller caller, const profd::HttpRequest& request, GatewayCapture c);
  profd::HttpResponse Status(const std::string& id);
  profd::HttpResponse File(const std::string& id, const std::string& rest);
  absl::StatusOr<Caller> Identify(const profd::HttpRequest& request);
  void Audit(const Caller& caller, const profd::HttpRequest& request, const GatewayCapture& c,
             const std::string& result);
  // The capture's thread.
  void Capture(const std::string& id, FleetCapture* fleet, profd::v1::CaptureRequest request,
               const std::string& node_token);
  // Joins finished captures' threads and forgets the oldest past max_kept; the number running.
  int Forget() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StoreAndReport(const std::string& id, const FleetCapture& fleet);
  void SetState(const std::string& id, const std::string& state, const std::string& error = "");
  std::string Folder(const std::string& id) const;

  const GlobalOptions& g_;
  const GatewayOptions options_;
  const KubeAccess access_;  // the gateway's own: pod lookups
  FleetTimes times_;
  profd::KubernetesAuthorizer authorizer_;

  absl::Mutex mutex_;
  std::map<std::string, GatewayCapture> captures_ ABSL_GUARDED_BY(mutex_);
  // A capture's thread and its fleet capture, until it is forgotten (after max_kept others).
  struct Running {
    std::unique_ptr<FleetCapture> fleet;
    std::thread thread;
  };
  std::map<std::string, Running> running_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace profctl

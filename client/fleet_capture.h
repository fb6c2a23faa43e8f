// profctl capture across nodes: a workload's pods (a label selector, a Deployment, a Job) found
// through the Kubernetes API, each node's profd reached over mutual TLS, every node told to start
// at one instant, under one fleet id that each node's capture carries into the store. A node that
// fails or does not answer in time is named with why; the others' captures are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/commands.h"
#include "client/kubernetes_api.h"
#include "client/profd_client.h"
#include "profd/v1/profd.pb.h"

namespace profctl {

struct FleetFlags {
  std::string selector;    // -l
  std::string deployment;  // --deployment
  std::string job;         // --job
  std::string name_space;  // -n ("" : the kubeconfig context's namespace)
  std::string kubeconfig;
  std::string context;
  // Where each node's profd listens: {node_ip} (the pod's status.hostIP) and {node_name}
  // (spec.nodeName) are replaced.
  std::string node_address = "{node_ip}:7465";
  // How long after the window's end a node may take to answer before it is given up on.
  std::string node_timeout = "30s";
  // Without --start-at: how far ahead of the request every node is told to start (all nodes
  // must have the request by then).
  std::string lead = "2s";

  bool wanted() const { return !selector.empty() || !deployment.empty() || !job.empty(); }
};

// The waits of a fleet capture: for a node after the window's end (--node-timeout), before the
// common start (--lead), and for each API call and connection (--timeout).
struct FleetTimes {
  absl::Duration node_timeout, lead, call_timeout = absl::Seconds(10);
};

// --node-address, --node-timeout, --lead and --timeout checked and read into *times: "" when
// they will do, else the message.
std::string ParseFleetTimes(const GlobalOptions& g, const FleetFlags& f, FleetTimes* times);

// One node of a fleet capture and what became of it. Written by its own thread while the capture
// runs (FleetCapture::Run), read by the caller after it returns or inside its progress callback.
struct FleetNode {
  std::string node, address, server_name;
  std::vector<std::string> pods;        // namespace/name
  std::unique_ptr<ProfdClient> client;  // connected before the start instant is chosen
  profd::v1::CaptureInfo last;          // the latest state profd sent
  uint64_t events = 0;                  // events so far, as profd's progress counts them
  bool finished = false;                // profd sent the capture's final state
  std::string error;                    // why this node has no (whole) capture; "" when it has

  // The pods the node was asked for that no captured process belongs to.
  std::vector<std::string> PodsWithoutAgent() const;
};

// A pod that is not captured, and why (not Running, on no node).
struct SkippedPod {
  std::string pod, why;
};

// The running pods grouped by the node they run on, with each node's address and TLS name from
// the patterns (--node-address, --tls-server-name); the others go to *skipped with why.
std::vector<FleetNode> NodesOfPods(const GlobalOptions& g, const std::string& node_address,
                                   const std::vector<WorkloadPod>& pods,
                                   std::vector<SkippedPod>* skipped);

// One capture across nodes: every node connected, one fleet id and one start instant, every
// node's capture run at once, each node's fate recorded in its FleetNode. The CLI (RunFleetCapture)
// and the gateway (client/gateway.h) both drive it.
class FleetCapture {
 public:
  // Called on a node's thread when its phase changes or it fails; never two at once.
  using Progress = std::function<void(const FleetNode& node)>;

  FleetCapture(const GlobalOptions& g, const FleetTimes& times, std::vector<FleetNode> nodes);

  // The fleet id to use (the gateway names a capture before it starts); else Prepare makes one.
  void UseFleetId(std::string id) { fleet_id_ = std::move(id); }
  // Connects to every node (until --timeout), then makes the fleet id and sets the request's
  // common start (its delay or start_at, else now + lead). Blocks.
  void Prepare(profd::v1::CaptureRequest* request);
  // Every node's capture, at once, each asked for its own pods, until each ends or the window's
  // end + node_timeout. bearer_token goes to every node (a profd with --kubernetes_authorization
  // checks it). Blocks.
  void Run(const profd::v1::CaptureRequest& request, const std::string& bearer_token,
           const Progress& progress);

  const std::string& fleet_id() const { return fleet_id_; }
  absl::Time start_at() const { return start_at_; }
  const std::vector<FleetNode>& nodes() const { return nodes_; }
  // First to last process that started capturing, by the nodes' records; false before any did.
  bool StartSkew(int64_t* skew_ns) const;
  // 0 every node captured, kExitPartial some, kExitCaptureFailed none.
  int ExitCode() const;

 private:
  const GlobalOptions& g_;
  const FleetTimes times_;
  std::vector<FleetNode> nodes_;
  std::string fleet_id_;
  absl::Time start_at_, deadline_;
};

// `request` holds what the user asked of each capture (duration, kinds, format, label...); its
// delay or start_at, if any, is the common start. Returns the exit code: 0 every node done,
// kExitPartial some failed (their reasons printed), kExitCaptureFailed none done.
int RunFleetCapture(const GlobalOptions& g, const FleetFlags& f, profd::v1::CaptureRequest request,
                    bool no_progress);

// "{node_ip}:7465" with the node's values put in.
std::string ExpandNodePattern(const std::string& pattern, const std::string& node_name,
                              const std::string& node_ip);

}  // namespace profctl

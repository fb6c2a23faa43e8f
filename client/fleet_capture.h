// profctl capture across nodes: a workload's pods (a label selector, a Deployment, a Job) found
// through the Kubernetes API, each node's profd reached over mutual TLS, every node told to start
// at one instant, under one fleet id that each node's capture carries into the store. A node that
// fails or does not answer in time is named with why; the others' captures are kept.
#pragma once

#include <string>

#include "client/commands.h"
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

// `request` holds what the user asked of each capture (duration, kinds, format, label...); its
// delay or start_at, if any, is the common start. Returns the exit code: 0 every node done,
// kExitPartial some failed (their reasons printed), kExitCaptureFailed none done.
int RunFleetCapture(const GlobalOptions& g, const FleetFlags& f, profd::v1::CaptureRequest request,
                    bool no_progress);

// "{node_ip}:7465" with the node's values put in.
std::string ExpandNodePattern(const std::string& pattern, const std::string& node_name,
                              const std::string& node_ip);

}  // namespace profctl

// profd as a CSI node plugin for inline ephemeral volumes: how an application pod gets the agent
// library, the agent socket and Kineto's socket folder without a hostPath (which Pod Security
// "baseline" forbids). A pod names a `csi` volume of this driver; the kubelet asks profd to
// publish it at a folder under its pod folder, and profd bind-mounts its own folder there:
//   - folder "" (the default): profd's runtime folder (agent.sock, agent/libprofagent.so,
//     kineto.conf), always read-only, whatever the pod asked: every pod on the node loads that
//     library;
//   - folder "kineto": the Kineto socket folder (1777, sticky), writable: Kineto binds its own
//     socket there.
// Sockets bound in those folders are reached through the bind mount, so an agent in the pod
// connects to profd as on the host, and profd still learns its pid and uid from the kernel
// (SO_PEERCRED). Mounting happens only under `target_root` (the kubelet's pod folder), never at
// a path with "." or ".." in it.
//
// Thread-safe: gRPC's handler threads call it; each call is a few syscalls on its own target.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "csi/v1/csi_node.grpc.pb.h"

namespace profd {

struct CsiNodeOptions {
  std::string driver_name = "csi.profd.dev";  // the CSIDriver object's name
  std::string node_id;                        // the node's name (NodeGetInfo)
  std::string runtime_dir;                    // what folder "" mounts, read-only
  std::string kineto_dir;                     // what folder "kineto" mounts ("none": refused)
  std::string target_root = "/var/lib/kubelet/pods";  // targets must be under it
};

// The mounts themselves, apart from gRPC: each returns a status whose message says what was
// refused and why. Any thread.
class CsiVolumePublisher {
 public:
  explicit CsiVolumePublisher(CsiNodeOptions options) : options_(std::move(options)) {}

  // `folder` is the pod's volumeAttributes "folder"; `pod` names the pod for the log.
  absl::Status Publish(const std::string& target_path, const std::string& folder,
                       const std::string& pod);
  absl::Status Unpublish(const std::string& target_path);

  const CsiNodeOptions& options() const { return options_; }

 private:
  absl::Status CheckTarget(const std::string& target_path) const;

  const CsiNodeOptions options_;
};

// The Identity and Node services on one gRPC server (profd_main: --csi_socket).
class CsiIdentityService final : public csi::v1::Identity::Service {
 public:
  explicit CsiIdentityService(const CsiNodeOptions* options) : options_(options) {}
  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* response) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const csi::v1::GetPluginCapabilitiesRequest*,
                                     csi::v1::GetPluginCapabilitiesResponse*) override;
  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* response) override;

 private:
  const CsiNodeOptions* options_;
};

class CsiNodeService final : public csi::v1::Node::Service {
 public:
  explicit CsiNodeService(CsiVolumePublisher* publisher) : publisher_(publisher) {}
  grpc::Status NodePublishVolume(grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest*,
                                 csi::v1::NodePublishVolumeResponse*) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext*, const csi::v1::NodeUnpublishVolumeRequest*,
                                   csi::v1::NodeUnpublishVolumeResponse*) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
                                   csi::v1::NodeGetCapabilitiesResponse*) override;
  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* response) override;

 private:
  CsiVolumePublisher* publisher_;
};

}  // namespace profd

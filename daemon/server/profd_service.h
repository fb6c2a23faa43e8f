// The gRPC service profctl talks to. Handlers run on gRPC's threads; each one reads the registry
// or hands work to the component that owns it and never does slow work itself.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/kubernetes_authorizer.h"
#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/capture/capture_orchestrator.h"
#include "daemon/metrics/gpu_sampler.h"
#include "daemon/metrics/pm_sampler.h"
#include "profd/v1/profd.grpc.pb.h"

namespace profd {

struct AuditRecord;

// Facts about this profd run, fixed at start-up.
struct DaemonIdentity {
  std::string hostname;
  absl::Time started;
  std::string agent_socket;
  std::vector<std::string> grpc_addresses;
  std::string metrics_address;
  std::string alert_address;  // the Alertmanager webhook's listener; empty when off
  std::string store_uri;
};

class ProfdService final : public v1::Profd::Service {
 public:
  ProfdService(const DaemonIdentity* identity, AgentRegistry* registry, AgentChannelServer* channel,
               CaptureOrchestrator* captures, const CaptureTargets* targets);

  // Set before serving; null leaves nvml_available false in GetStatus.
  void set_gpu_sampler(const GpuSampler* gpus) { gpus_ = gpus; }
  // Likewise; null leaves gpu_counters unset.
  void set_counter_sampler(const PmSampler* counters) { counters_ = counters; }
  // --kubernetes_authorization: captures asked for over TCP need a Kubernetes user allowed to
  // create captures in each namespace they reach, and every capture gets an audit line. Null:
  // whoever reaches the listener may capture (mutual TLS decides who can).
  void set_authorizer(KubernetesAuthorizer* authorizer) { authorizer_ = authorizer; }

  grpc::Status ListAgents(grpc::ServerContext* context, const v1::ListAgentsRequest* request,
                          v1::ListAgentsResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::DaemonStatus* response) override;
  // Streams progress until the capture ends; a client that goes away leaves it running.
  grpc::Status Capture(grpc::ServerContext* context, const v1::CaptureRequest* request,
                       grpc::ServerWriter<v1::CaptureProgress>* writer) override;
  grpc::Status GetCapture(grpc::ServerContext* context, const v1::GetCaptureRequest* request,
                          v1::CaptureInfo* response) override;
  grpc::Status ListCaptures(grpc::ServerContext* context, const v1::ListCapturesRequest* request,
                            v1::ListCapturesResponse* response) override;
  grpc::Status CancelCapture(grpc::ServerContext* context, const v1::CancelCaptureRequest* request,
                             v1::CaptureInfo* response) override;
  // Tells the agents of the processes named to turn their flight recorder on or off.
  grpc::Status SetRecorder(grpc::ServerContext* context, const v1::SetRecorderRequest* request,
                           v1::SetRecorderResponse* response) override;

 private:
  // With set_authorizer: who the caller is (the control socket's callers are trusted), and
  // whether they may reach every namespace of the targets; both fill the audit line.
  absl::Status Authenticate(const grpc::ServerContext& context, AuditRecord* audit,
                            std::optional<KubernetesCaller>* caller) const;
  absl::Status Authorize(const std::optional<KubernetesCaller>& caller,
                         const std::vector<CaptureTarget>& targets, AuditRecord* audit) const;
  // Starts the capture if the caller may (set_authorizer), with its audit line.
  absl::StatusOr<std::string> Admit(const grpc::ServerContext& context,
                                    const v1::CaptureRequest& request);

  const DaemonIdentity* const identity_;
  AgentRegistry* const registry_;
  AgentChannelServer* const channel_;
  CaptureOrchestrator* const captures_;
  const CaptureTargets* const targets_;
  const GpuSampler* gpus_ = nullptr;
  const PmSampler* counters_ = nullptr;
  KubernetesAuthorizer* authorizer_ = nullptr;
};

}  // namespace profd

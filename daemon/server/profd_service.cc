#include "daemon/server/profd_service.h"

namespace profd {

ProfdService::ProfdService(const DaemonIdentity* identity, AgentRegistry* registry,
                           const AgentChannelServer* channel)
    : identity_(identity), registry_(registry), channel_(channel) {}

grpc::Status ProfdService::ListAgents(grpc::ServerContext*, const v1::ListAgentsRequest*,
                                      v1::ListAgentsResponse* response) {
  for (v1::AgentInfo& agent : registry_->List()) *response->add_agents() = std::move(agent);
  response->set_hostname(identity_->hostname);
  return grpc::Status::OK;
}

grpc::Status ProfdService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                     v1::DaemonStatus* response) {
  response->set_version(PROFD_VERSION);
  response->set_hostname(identity_->hostname);
  response->set_started_unix_ns(absl::ToUnixNanos(identity_->started));
  response->set_agents_connected(static_cast<uint32_t>(registry_->size()));
  response->set_agent_socket(identity_->agent_socket);
  for (const std::string& address : identity_->grpc_addresses) response->add_grpc_addresses(address);
  response->set_metrics_address(identity_->metrics_address);
  response->set_store_uri(identity_->store_uri);
  response->set_agent_protocol_errors(channel_->protocol_errors());
  if (gpus_ != nullptr) {
    std::shared_ptr<const GpuSnapshot> gpus = gpus_->snapshot();
    response->set_nvml_available(gpus->nvml_available);
    response->set_nvml_error(gpus->nvml_error);
  }
  return grpc::Status::OK;
}

}  // namespace profd

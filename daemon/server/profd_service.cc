#include "daemon/server/profd_service.h"

#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "profd/v1/control_limits.h"

namespace profd {
ProfdService::ProfdService(const DaemonIdentity* identity, AgentRegistry* registry,
                           const AgentChannelServer* channel, CaptureOrchestrator* captures,
                           const CaptureTargets* targets)
    : identity_(identity),
      registry_(registry),
      channel_(channel),
      captures_(captures),
      targets_(targets) {}

namespace {

// Adds entries while the answer stays under kMaxListAnswerBytes, and counts the rest in
// *omitted: a list profctl cannot receive would fail for everyone, and a partial one that says
// so does not.
template <typename Entry, typename Field>
void AddBounded(std::vector<Entry> entries, size_t used, Field* field, uint32_t* omitted) {
  for (Entry& entry : entries) {
    // Each entry costs its size plus a tag and a length prefix of at most 1 + 5 bytes.
    const size_t size = entry.ByteSizeLong() + 6;
    if (used + size > v1::kMaxListAnswerBytes) {
      ++*omitted;
      continue;
    }
    used += size;
    *field->Add() = std::move(entry);
  }
}

}  // namespace

grpc::Status ProfdService::ListAgents(grpc::ServerContext*, const v1::ListAgentsRequest*,
                                      v1::ListAgentsResponse* response) {
  response->set_hostname(identity_->hostname);
  uint32_t omitted = 0;
  AddBounded(targets_->ListInfo(), response->ByteSizeLong() + 16, response->mutable_agents(),
             &omitted);
  response->set_omitted(omitted);
  return grpc::Status::OK;
}

grpc::Status ProfdService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                     v1::DaemonStatus* response) {
  response->set_version(PROFD_VERSION);
  response->set_hostname(identity_->hostname);
  response->set_started_unix_ns(absl::ToUnixNanos(identity_->started));
  response->set_agents_connected(static_cast<uint32_t>(registry_->size()));
  response->set_agent_socket(identity_->agent_socket);
  for (const std::string& address : identity_->grpc_addresses)
    response->add_grpc_addresses(address);
  response->set_metrics_address(identity_->metrics_address);
  response->set_alert_address(identity_->alert_address);
  response->set_store_uri(identity_->store_uri);
  response->set_agent_protocol_errors(channel_->protocol_errors());
  if (const kineto::KinetoIpcServer* kineto = targets_->kineto()) {
    response->set_kineto_socket(kineto->socket_path());
    response->set_kineto_processes(static_cast<uint32_t>(kineto->Clients().size()));
  }
  if (PodDirectory* pods = registry_->pod_directory()) {
    response->set_pods_source(pods->options().url);
    response->set_pods_error(pods->last_error());
  }
  if (gpus_ != nullptr) {
    std::shared_ptr<const GpuSnapshot> gpus = gpus_->snapshot();
    response->set_nvml_available(gpus->nvml_available);
    response->set_nvml_error(gpus->nvml_error);
  }
  if (counters_ != nullptr) {
    const PmSampler::State state = counters_->state();
    v1::GpuCountersStatus* c = response->mutable_gpu_counters();
    c->set_metrics(state.metrics);
    c->set_capture(state.capture);
    c->set_interval_ns(absl::ToInt64Nanoseconds(state.interval));
    c->set_gpus(state.gpus);
    c->set_error(state.error);
  }
  CaptureOrchestrator::Counts counts = captures_->counts();
  response->set_captures_running(counts.running);
  response->set_captures_completed(counts.completed);
  response->set_captures_failed(counts.failed);
  return grpc::Status::OK;
}

grpc::Status ProfdService::Capture(grpc::ServerContext* context, const v1::CaptureRequest* request,
                                   grpc::ServerWriter<v1::CaptureProgress>* writer) {
  absl::StatusOr<std::string> id = captures_->Start(*request);
  if (!id.ok()) return ToGrpcStatus(id.status());
  absl::Time begun = absl::Now();
  uint64_t version = 0;
  v1::CaptureProgress progress;
  while (true) {
    v1::CaptureInfo info;
    if (!captures_->WaitForChange(*id, &version, absl::Milliseconds(250), &info)) break;
    progress.Clear();
    uint64_t events = 0;
    for (const auto& p : info.processes()) events += p.events();
    progress.set_events(events);
    int64_t started = info.started_unix_ns();
    progress.set_elapsed_ms(
        started ? std::max<int64_t>(
                      0, absl::ToInt64Milliseconds(absl::Now() - absl::FromUnixNanos(started)))
                : 0);
    bool done = CaptureOrchestrator::Terminal(info.phase());
    progress.set_final(done);
    *progress.mutable_capture() = std::move(info);
    if (context->IsCancelled() || !writer->Write(progress)) break;  // the capture goes on
    if (done) break;
    if (absl::Now() - begun > absl::Hours(2)) break;
  }
  return grpc::Status::OK;
}

grpc::Status ProfdService::GetCapture(grpc::ServerContext*, const v1::GetCaptureRequest* request,
                                      v1::CaptureInfo* response) {
  std::optional<v1::CaptureInfo> info = captures_->Get(request->capture_id());
  if (!info) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no capture " + request->capture_id() +
                                                         " on this profd (it remembers the "
                                                         "last 256; older ones are in the store)");
  }
  *response = std::move(*info);
  return grpc::Status::OK;
}

grpc::Status ProfdService::ListCaptures(grpc::ServerContext*,
                                        const v1::ListCapturesRequest* request,
                                        v1::ListCapturesResponse* response) {
  uint32_t omitted = 0;
  AddBounded(captures_->List(request->limit()), 16, response->mutable_captures(), &omitted);
  response->set_omitted(omitted);
  return grpc::Status::OK;
}

grpc::Status ProfdService::CancelCapture(grpc::ServerContext*,
                                         const v1::CancelCaptureRequest* request,
                                         v1::CaptureInfo* response) {
  absl::StatusOr<v1::CaptureInfo> info = captures_->Cancel(request->capture_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = std::move(*info);
  return grpc::Status::OK;
}

}  // namespace profd

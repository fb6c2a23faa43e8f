#include "daemon/server/profd_service.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "daemon/log.h"
#include "profd/v1/control_limits.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd {
ProfdService::ProfdService(const DaemonIdentity* identity, AgentRegistry* registry,
                           AgentChannelServer* channel, CaptureOrchestrator* captures,
                           const CaptureTargets* targets)
    : identity_(identity),
      registry_(registry),
      channel_(channel),
      captures_(captures),
      targets_(targets) {}

// One line per capture (or flight recorder change) asked for (--kubernetes_authorization): who,
// from where, which processes and pods, why, and what came of it, as JSON after "audit]".
struct AuditRecord {
  std::string event = "capture";  // or "recorder on", "recorder off"
  std::string user;
  std::vector<std::string> groups;
  std::string peer;
  std::vector<uint32_t> pids;
  std::set<std::string> pods;
  std::string result;  // "started" or why not
  std::string capture_id;
};

namespace {

constexpr char kAuditComponent[] = "audit";

// The bearer token of a call's "authorization: Bearer ..." metadata ("" when none).
std::string BearerToken(const grpc::ServerContext& context) {
  for (auto [it, end] = context.client_metadata().equal_range("authorization"); it != end; ++it) {
    absl::string_view value(it->second.data(), it->second.size());
    if (absl::ConsumePrefix(&value, "Bearer ") || absl::ConsumePrefix(&value, "bearer ")) {
      return std::string(value);
    }
  }
  return "";
}

void WriteAudit(const AuditRecord& a, const std::string& reason, const std::string& fleet_id) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  auto field = [&](const char* key, const std::string& value) {
    w.Key(key);
    w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
  };
  w.StartObject();
  field("event", a.event);
  field("user", a.user);
  w.Key("groups");
  w.StartArray();
  for (const std::string& g : a.groups)
    w.String(g.c_str(), static_cast<rapidjson::SizeType>(g.size()));
  w.EndArray();
  field("peer", a.peer);
  w.Key("pids");
  w.StartArray();
  for (uint32_t pid : a.pids) w.Uint(pid);
  w.EndArray();
  w.Key("pods");
  w.StartArray();
  for (const std::string& p : a.pods)
    w.String(p.c_str(), static_cast<rapidjson::SizeType>(p.size()));
  w.EndArray();
  field("reason", reason);
  field("fleet_id", fleet_id);
  field("result", a.result);
  field("capture_id", a.capture_id);
  w.EndObject();
  LogInfo(kAuditComponent, "%s", buffer.GetString());
}

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
  absl::StatusOr<std::string> id = Admit(*context, *request);
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

absl::Status ProfdService::Authenticate(const grpc::ServerContext& context, AuditRecord* audit,
                                        std::optional<KubernetesCaller>* caller) const {
  audit->peer = context.peer();
  // The control socket is local and guarded by its file mode (--access_group): its callers are
  // root or the group's members, whom no Kubernetes identity describes.
  if (absl::StartsWith(audit->peer, "unix")) {
    audit->user = "(control socket)";
    return absl::OkStatus();
  }
  const std::string token = BearerToken(context);
  absl::StatusOr<KubernetesCaller> who =
      token.empty() ? absl::UnauthenticatedError(
                          "this profd lets Kubernetes users capture (--kubernetes_authorization) "
                          "and the request carries no bearer token: profctl sends the one of "
                          "your kubeconfig's user when it captures by workload (-n/-l, "
                          "--deployment, --job)")
                    : authorizer_->Authenticate(token);
  if (!who.ok()) return who.status();
  audit->user = who->user;
  audit->groups = who->groups;
  *caller = *std::move(who);
  return absl::OkStatus();
}

absl::Status ProfdService::Authorize(const std::optional<KubernetesCaller>& caller,
                                     const std::vector<CaptureTarget>& targets,
                                     AuditRecord* audit) const {
  std::set<std::string> namespaces;
  for (const CaptureTarget& t : targets) {
    audit->pids.push_back(t.info.pid());
    if (!t.info.pod_name().empty()) {
      audit->pods.insert(absl::StrCat(t.info.pod_namespace(), "/", t.info.pod_name()));
    }
    namespaces.insert(t.info.pod_name().empty() ? "" : t.info.pod_namespace());
  }
  if (!caller) return absl::OkStatus();  // the control socket
  for (const std::string& ns : namespaces) {
    if (absl::Status allowed = authorizer_->Authorize(*caller, ns); !allowed.ok()) {
      return allowed;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ProfdService::Admit(const grpc::ServerContext& context,
                                                const v1::CaptureRequest& request) {
  if (authorizer_ == nullptr) return captures_->Start(request);
  AuditRecord audit;
  std::optional<KubernetesCaller> caller;
  absl::Status refused = Authenticate(context, &audit, &caller);
  CaptureOrchestrator::Admission admission;
  if (caller) admission.requested_by = caller->user;
  admission.check = [&](const std::vector<CaptureTarget>& targets) {
    return Authorize(caller, targets, &audit);
  };
  absl::StatusOr<std::string> id = refused.ok() ? captures_->Start(request, admission) : refused;
  audit.result = id.ok() ? "started" : std::string(id.status().message());
  if (id.ok()) audit.capture_id = *id;
  WriteAudit(audit, request.reason(), request.fleet_id());
  return id;
}

grpc::Status ProfdService::SetRecorder(grpc::ServerContext* context,
                                       const v1::SetRecorderRequest* request,
                                       v1::SetRecorderResponse* response) {
  // The processes, named as a capture names them; only agents have a flight recorder.
  v1::CaptureRequest which;
  *which.mutable_pids() = request->pids();
  which.set_all(request->all());
  which.set_pod_name(request->pod_name());
  which.set_pod_namespace(request->pod_namespace());
  which.set_path(v1::CAPTURE_PATH_CUPTI);
  absl::StatusOr<std::vector<CaptureTarget>> targets =
      targets_->Resolve(which, [](uint32_t) { return std::string(); });
  if (!targets.ok()) return ToGrpcStatus(targets.status());
  AuditRecord audit;
  audit.event = request->on() ? "recorder on" : "recorder off";
  std::optional<KubernetesCaller> caller;
  absl::Status allowed = authorizer_ ? Authenticate(*context, &audit, &caller) : absl::OkStatus();
  if (allowed.ok() && authorizer_) allowed = Authorize(caller, *targets, &audit);
  if (!allowed.ok()) {
    audit.result = std::string(allowed.message());
    WriteAudit(audit, "", "");
    return ToGrpcStatus(allowed);
  }
  v1::DaemonMessage message;
  v1::SetRecorder* set = message.mutable_set_recorder();
  set->set_on(request->on());
  set->set_seconds(request->seconds());
  set->set_max_bytes(request->max_bytes());
  set->set_duty_on_ms(request->duty_on_ms());
  set->set_duty_period_ms(request->duty_period_ms());
  for (const CaptureTarget& t : *targets) {
    if (t.connection != 0 && channel_->Send(t.connection, message)) {
      response->add_pids(t.info.pid());
    }
  }
  if (authorizer_) {
    audit.result = "sent";
    WriteAudit(audit, "", "");
  }
  LogInfo("recorder", "flight recorder %s for %d process(es)", request->on() ? "on" : "off",
          response->pids_size());
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

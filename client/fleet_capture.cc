#include "client/fleet_capture.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "analysis/format.h"
#include "analysis/text_table.h"
#include "client/kubernetes_api.h"
#include "common/capture_id.h"
#include "common/printable.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"

namespace profctl {
namespace {

using profd::Printable;
namespace analysis = profd::analysis;

// A node's phase; before its profd has answered, "connecting".
std::string PhaseWord(profd::v1::CapturePhase phase) {
  return phase == profd::v1::CAPTURE_PHASE_UNSPECIFIED ? "connecting" : PhaseName(phase);
}

uint64_t EventsOf(const profd::v1::CaptureInfo& info) {
  uint64_t n = 0;
  for (const auto& p : info.processes()) n += p.events();
  return n;
}

// Opens a node's channel (TCP and TLS handshakes) and waits until it is ready or has failed:
// the start instant is chosen once every node can be asked at once, so that the time the
// handshakes take (1,000 of them, docs/FLEET.md) does not eat into the lead. A node that failed
// is asked anyway, and its call says why.
void ConnectToNode(const GlobalOptions& g, absl::Time deadline, FleetNode* run) {
  TlsOptions tls = g.tls;
  tls.server_name = run->server_name;
  run->client = std::make_unique<ProfdClient>(run->address, tls);
  const std::shared_ptr<grpc::Channel>& channel = run->client->channel();
  for (grpc_connectivity_state s = channel->GetState(/*try_to_connect=*/true);
       s != GRPC_CHANNEL_READY && s != GRPC_CHANNEL_TRANSIENT_FAILURE && s != GRPC_CHANNEL_SHUTDOWN;
       s = channel->GetState(true)) {
    if (!channel->WaitForStateChange(s, absl::ToChronoTime(deadline))) break;
  }
}

// Runs one node's capture to its end, or to the deadline; `progress` hears of each change (its
// caller serializes it). The bearer token goes along: a profd that authorizes captures with
// Kubernetes (--kubernetes_authorization) checks it is the user's and what they may capture.
void CaptureOnNode(const profd::v1::CaptureRequest& request, const std::string& bearer_token,
                   absl::Time deadline, const FleetCapture::Progress& progress, FleetNode* run) {
  ProfdClient& client = *run->client;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  if (!bearer_token.empty()) ctx.AddMetadata("authorization", "Bearer " + bearer_token);
  auto reader = client.stub().Capture(&ctx, request);
  profd::v1::CaptureProgress message;
  profd::v1::CapturePhase shown = profd::v1::CAPTURE_PHASE_UNSPECIFIED;
  while (reader->Read(&message)) {
    run->last = message.capture();
    run->events = message.events();
    if (message.final()) run->finished = true;
    if (run->last.phase() != shown) {
      shown = run->last.phase();
      progress(*run);
    }
  }
  const grpc::Status status = reader->Finish();
  const std::string id = run->last.capture_id();
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      run->error = absl::StrCat(
          "no answer by the deadline (the window's end + --node-timeout): the node is slow or "
          "stuck",
          id.empty() ? "" : absl::StrCat("; its capture ", id, " may still reach the store"));
    } else if (!id.empty() && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                               status.error_code() == grpc::StatusCode::CANCELLED ||
                               status.error_code() == grpc::StatusCode::INTERNAL)) {
      run->error = absl::StrCat("profd stopped or its connection broke during capture ", id, " (",
                                status.error_message(),
                                "); a profd that restarts repairs what it had written");
    } else {
      run->error = client.Explain(status);
    }
  } else if (!run->finished) {
    run->error = "the connection ended before the capture did";
  } else if (run->last.phase() == profd::v1::CAPTURE_PHASE_FAILED) {
    run->error = absl::StrCat("capture ", id, " failed: ", run->last.message());
  }
  if (!run->error.empty()) progress(*run);
}

// profctl capture's progress lines on stderr: a node's phase as it changes, or why it failed.
void PrintProgress(const FleetNode& run) {
  if (!run.error.empty()) {
    std::cerr << "  " << Printable(run.node) << " (" << run.address
              << "): FAILED: " << Printable(run.error) << "\n";
    return;
  }
  std::cerr << "  " << Printable(run.node) << " (" << run.address
            << "): " << PhaseWord(run.last.phase()) << ", capture " << run.last.capture_id() << ", "
            << run.last.processes_size() << " process(es)"
            << (run.events > 0 ? absl::StrCat(", ", analysis::FormatCount(run.events), " events")
                               : "")
            << "\n";
}

// First and last time a process of the fleet started capturing (CUPTI enabled, or the config
// taken through Kineto): the start skew across nodes.
bool StartSpread(const std::vector<FleetNode>& runs, int64_t* first, int64_t* last) {
  *first = INT64_MAX;
  *last = 0;
  for (const FleetNode& r : runs) {
    for (const auto& p : r.last.processes()) {
      if (p.enabled_unix_ns() <= 0) continue;
      *first = std::min(*first, p.enabled_unix_ns());
      *last = std::max(*last, p.enabled_unix_ns());
    }
  }
  return *last > 0;
}

void PrintJsonResult(const std::string& fleet_id, absl::Time start_at,
                     const std::vector<FleetNode>& runs, const std::vector<SkippedPod>& skipped) {
  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buffer);
  w.SetIndent(' ', 1);
  w.StartObject();
  w.Key("fleet_id");
  w.String(fleet_id.c_str());
  w.Key("start_at_unix_ns");
  w.String(std::to_string(absl::ToUnixNanos(start_at)).c_str());
  int64_t first = 0, last = 0;
  if (StartSpread(runs, &first, &last)) {
    w.Key("start_skew_ns");
    w.String(std::to_string(last - first).c_str());
  }
  w.Key("nodes");
  w.StartArray();
  for (const FleetNode& r : runs) {
    w.StartObject();
    w.Key("node");
    w.String(r.node.c_str());
    w.Key("address");
    w.String(r.address.c_str());
    w.Key("pods");
    w.StartArray();
    for (const std::string& p : r.pods) w.String(p.c_str());
    w.EndArray();
    w.Key("capture_id");
    w.String(r.last.capture_id().c_str());
    w.Key("phase");
    w.String(PhaseWord(r.last.phase()).c_str());
    w.Key("events");
    w.String(std::to_string(EventsOf(r.last)).c_str());
    w.Key("ok");
    w.Bool(r.error.empty());
    w.Key("error");
    w.String(r.error.c_str());
    w.Key("pods_without_agent");
    w.StartArray();
    for (const std::string& p : r.PodsWithoutAgent()) w.String(p.c_str());
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("skipped_pods");
  w.StartArray();
  for (const SkippedPod& s : skipped) {
    w.StartObject();
    w.Key("pod");
    w.String(s.pod.c_str());
    w.Key("why");
    w.String(s.why.c_str());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::cout << profd::EscapeJsonLineSeparators(std::string(buffer.GetString(), buffer.GetSize()))
            << "\n";
}

void PrintTextResult(const std::string& fleet_id, const std::vector<FleetNode>& runs,
                     const std::vector<SkippedPod>& skipped) {
  analysis::TextTable table({"NODE", "ADDRESS", "PODS", "STATE", "EVENTS>", "CAPTURE"}, 60);
  size_t ok = 0;
  for (const FleetNode& r : runs) {
    ok += r.error.empty();
    table.AddRow({r.node, r.address, absl::StrJoin(r.pods, ","),
                  r.error.empty() ? PhaseWord(r.last.phase()) : "FAILED",
                  analysis::FormatCount(EventsOf(r.last)),
                  r.last.capture_id().empty() ? "-" : r.last.capture_id()});
  }
  std::cout << "Fleet capture " << fleet_id << ": " << ok << " of " << runs.size()
            << " node(s) captured\n"
            << table.Render("");
  int64_t first = 0, last = 0;
  if (StartSpread(runs, &first, &last)) {
    std::cout << "Started within " << analysis::FormatDuration(static_cast<double>(last - first))
              << " of each other (first to last process, by each node's clock)\n";
  }
  for (const FleetNode& r : runs) {
    if (!r.error.empty()) {
      std::cout << "FAILED " << Printable(r.node) << " (" << r.address
                << "): " << Printable(r.error) << "\n";
    }
    if (std::vector<std::string> missing = r.PodsWithoutAgent(); !missing.empty()) {
      std::cout << "No agent on " << Printable(r.node) << " in " << absl::StrJoin(missing, ", ")
                << " (pods without the agent injected: deploy/kubernetes/"
                   "inference-pod-snippet.yaml)\n";
    }
  }
  for (const SkippedPod& s : skipped) {
    std::cout << "Skipped pod " << Printable(s.pod) << ": " << Printable(s.why) << "\n";
  }
  if (ok > 0) {
    std::cout << "Report: profctl report " << fleet_id
              << " (through any node's profd that sees the shared store)\n";
  }
}

// The flags that name the workload, checked before the API is asked. "" when they will do, else
// the message.
std::string CheckWorkloadFlags(const FleetFlags& f, const profd::v1::CaptureRequest& request) {
  const int given = !f.selector.empty() + !f.deployment.empty() + !f.job.empty();
  if (given > 1) return "-l, --deployment and --job each name a workload: give one";
  if (request.pids_size() > 0 || request.all() || !request.pod_name().empty()) {
    return "-l, --deployment and --job capture a workload across nodes; --pid, --pod and --all "
           "capture on one profd (--target): give one or the other";
  }
  return "";
}

// The workload's pods, as the Kubernetes API lists them.
struct Workload {
  std::string name_space;
  std::string description;  // for messages: "pods matching SELECTOR", "deployment NAME (SELECTOR)"
  std::vector<WorkloadPod> pods;
};

// Finds the pods of -l SELECTOR, --deployment or --job. kExitOk, or the exit code after saying
// why.
int FindWorkload(const FleetFlags& f, const KubeAccess& access, absl::Duration call_timeout,
                 Workload* out) {
  out->name_space = f.name_space.empty() ? access.default_namespace : f.name_space;
  KubernetesApi api(access, call_timeout);
  std::string selector = f.selector;
  out->description = absl::StrCat("pods matching ", f.selector);
  if (selector.empty()) {
    const std::string kind = f.deployment.empty() ? "job" : "deployment";
    const std::string& name = f.deployment.empty() ? f.job : f.deployment;
    absl::StatusOr<std::string> s = api.SelectorOf(kind, out->name_space, name);
    if (!s.ok()) {
      std::cerr << "profctl: " << Printable(std::string(s.status().message())) << "\n";
      return s.status().code() == absl::StatusCode::kNotFound ? kExitNotFound : kExitError;
    }
    selector = *s;
    out->description = absl::StrCat(kind, " ", name, " (", selector, ")");
  }
  absl::StatusOr<std::vector<WorkloadPod>> pods = api.ListPods(out->name_space, selector);
  if (!pods.ok()) {
    std::cerr << "profctl: " << Printable(std::string(pods.status().message())) << "\n";
    return kExitError;
  }
  out->pods = *std::move(pods);
  return kExitOk;
}

}  // namespace

std::string ExpandNodePattern(const std::string& pattern, const std::string& node_name,
                              const std::string& node_ip) {
  return absl::StrReplaceAll(pattern, {{"{node_ip}", node_ip}, {"{node_name}", node_name}});
}

std::string ParseFleetTimes(const GlobalOptions& g, const FleetFlags& f, FleetTimes* times) {
  if (f.node_address.find('{') == std::string::npos) {
    return absl::StrCat("--node-address ", f.node_address,
                        " names no node: use {node_ip} or {node_name}, e.g. '{node_ip}:7465'");
  }
  for (auto [flag, text, out] :
       {std::tuple{"--node-timeout", &f.node_timeout, &times->node_timeout},
        std::tuple{"--lead", &f.lead, &times->lead}}) {
    if (std::string bad = ParseDurationFlag(flag, *text, absl::ZeroDuration(), absl::Hours(1), out);
        !bad.empty()) {
      return bad;
    }
  }
  (void)ParseDurationFlag("--timeout", g.timeout, absl::ZeroDuration(), absl::Hours(24),
                          &times->call_timeout);
  return "";
}

std::vector<std::string> FleetNode::PodsWithoutAgent() const {
  std::vector<std::string> out;
  if (!finished) return out;
  std::set<std::string> seen;
  for (const auto& p : last.processes()) {
    seen.insert(absl::StrCat(p.pod_namespace(), "/", p.pod_name()));
  }
  for (const std::string& pod : pods) {
    if (!seen.count(pod)) out.push_back(pod);
  }
  return out;
}

std::vector<FleetNode> NodesOfPods(const GlobalOptions& g, const std::string& node_address,
                                   const std::vector<WorkloadPod>& pods,
                                   std::vector<SkippedPod>* skipped) {
  std::map<std::string, FleetNode> by_node;
  const bool wants_ip = node_address.find("{node_ip}") != std::string::npos ||
                        g.tls.server_name.find("{node_ip}") != std::string::npos;
  for (const WorkloadPod& p : pods) {
    const std::string pod = absl::StrCat(p.name_space, "/", p.name);
    if (p.phase != "Running") {
      skipped->push_back({pod, absl::StrCat("it is ", p.phase.empty() ? "in no phase" : p.phase,
                                            ", not Running")});
      continue;
    }
    if (p.node_name.empty() || (wants_ip && p.host_ip.empty())) {
      skipped->push_back({pod, "the API names no node (spec.nodeName / status.hostIP) for it"});
      continue;
    }
    FleetNode& run = by_node[p.node_name];
    run.node = p.node_name;
    run.address = ExpandNodePattern(node_address, p.node_name, p.host_ip);
    run.server_name = ExpandNodePattern(g.tls.server_name, p.node_name, p.host_ip);
    run.pods.push_back(pod);
  }
  std::vector<FleetNode> nodes;
  for (auto& [name, run] : by_node) nodes.push_back(std::move(run));
  return nodes;
}

FleetCapture::FleetCapture(const GlobalOptions& g, const FleetTimes& times,
                           std::vector<FleetNode> nodes)
    : g_(g), times_(times), nodes_(std::move(nodes)) {}

void FleetCapture::Prepare(profd::v1::CaptureRequest* request) {
  // Every node's connection first, at once, then one id and one instant.
  const absl::Time connect_by = absl::Now() + times_.call_timeout;
  std::vector<std::thread> threads;
  threads.reserve(nodes_.size());
  for (FleetNode& run : nodes_) {
    threads.emplace_back([this, connect_by, &run] { ConnectToNode(g_, connect_by, &run); });
  }
  for (std::thread& t : threads) t.join();
  const absl::Time now = absl::Now();
  if (fleet_id_.empty()) fleet_id_ = profd::NewFleetId(now);
  start_at_ =
      now + (request->delay_ms() > 0 ? absl::Milliseconds(request->delay_ms()) : times_.lead);
  if (request->start_at_unix_ns() != 0) {
    start_at_ = absl::FromUnixNanos(request->start_at_unix_ns());
  }
  request->set_delay_ms(0);
  request->set_start_at_unix_ns(absl::ToUnixNanos(start_at_));
  request->set_fleet_id(fleet_id_);
  deadline_ =
      std::max(start_at_, now) + absl::Milliseconds(request->duration_ms()) + times_.node_timeout;
}

void FleetCapture::Run(const profd::v1::CaptureRequest& request, const std::string& bearer_token,
                       const Progress& progress) {
  std::mutex progress_mu;
  const Progress serialized = [&](const FleetNode& node) {
    std::lock_guard<std::mutex> lock(progress_mu);
    if (progress) progress(node);
  };
  std::vector<std::thread> threads;
  threads.reserve(nodes_.size());
  for (FleetNode& run : nodes_) {
    profd::v1::CaptureRequest r = request;
    for (const std::string& pod : run.pods) r.add_pods(pod);
    threads.emplace_back([this, r = std::move(r), &bearer_token, &serialized, &run] {
      CaptureOnNode(r, bearer_token, deadline_, serialized, &run);
    });
  }
  for (std::thread& t : threads) t.join();
}

bool FleetCapture::StartSkew(int64_t* skew_ns) const {
  int64_t first = 0, last = 0;
  if (!StartSpread(nodes_, &first, &last)) return false;
  *skew_ns = last - first;
  return true;
}

int FleetCapture::ExitCode() const {
  const size_t failed = std::count_if(nodes_.begin(), nodes_.end(),
                                      [](const FleetNode& r) { return !r.error.empty(); });
  if (failed == nodes_.size()) return kExitCaptureFailed;
  if (failed > 0) return kExitPartial;
  return kExitOk;
}

int RunFleetCapture(const GlobalOptions& g, const FleetFlags& f, profd::v1::CaptureRequest request,
                    bool no_progress) {
  FleetTimes times;
  std::string bad = CheckWorkloadFlags(f, request);
  if (bad.empty()) bad = ParseFleetTimes(g, f, &times);
  if (!bad.empty()) {
    std::cerr << "profctl: " << bad << "\n";
    return kExitUsage;
  }
  const bool progress = !g.json && !no_progress;

  // Which pods, on which nodes: the Kubernetes API.
  absl::StatusOr<KubeAccess> access = LoadKubeAccess(f.kubeconfig, f.context);
  if (!access.ok()) {
    std::cerr << "profctl: " << access.status().message() << "\n";
    return kExitError;
  }
  Workload workload;
  if (int rc = FindWorkload(f, *access, times.call_timeout, &workload); rc != kExitOk) return rc;
  std::vector<SkippedPod> skipped;
  std::vector<FleetNode> nodes = NodesOfPods(g, f.node_address, workload.pods, &skipped);
  if (nodes.empty()) {
    std::cerr << "profctl: no running pod of " << Printable(workload.description)
              << " in namespace " << Printable(workload.name_space) << " (" << workload.pods.size()
              << " pod(s) listed" << (skipped.empty() ? "" : ", none Running on a node")
              << "; from " << Printable(access->source) << ")\n";
    return kExitNotFound;
  }
  size_t pod_count = 0;
  for (const FleetNode& n : nodes) pod_count += n.pods.size();

  FleetCapture fleet(g, times, std::move(nodes));
  fleet.Prepare(&request);
  if (progress) {
    std::cerr << "Fleet capture " << fleet.fleet_id() << " of " << Printable(workload.description)
              << " in " << Printable(workload.name_space) << ": " << pod_count << " pod(s) on "
              << fleet.nodes().size() << " node(s), all starting at "
              << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", fleet.start_at(), absl::UTCTimeZone())
              << " for " << absl::FormatDuration(absl::Milliseconds(request.duration_ms())) << "\n";
  }
  fleet.Run(request, access->token, progress ? FleetCapture::Progress(PrintProgress) : nullptr);

  if (g.json) {
    PrintJsonResult(fleet.fleet_id(), fleet.start_at(), fleet.nodes(), skipped);
  } else {
    PrintTextResult(fleet.fleet_id(), fleet.nodes(), skipped);
  }
  return fleet.ExitCode();
}

}  // namespace profctl

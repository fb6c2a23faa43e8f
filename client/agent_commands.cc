// profctl agents, profctl status: what profd sees on this node.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "analysis/format.h"
#include "analysis/text_table.h"
#include "client/commands.h"
#include "common/printable.h"

namespace profctl {

namespace analysis = profd::analysis;
using profd::Printable;
namespace {

// A label as /metrics and --json have it (namespace, pod, container), "-" when the process has
// none: the same words in the three places, and the POD cell is what --pod takes (with -n).
std::string LabelOf(const std::string& value) { return value.empty() ? "-" : value; }

std::string GpusOf(const profd::v1::AgentInfo& a) {
  if (a.devices().empty()) return "-";
  std::vector<std::string> ids;
  for (const auto& d : a.devices()) ids.push_back(std::to_string(d.ordinal()));
  return absl::StrJoin(ids, ",");
}

// A word for the table; the details go under it when something is not shared.
std::string CuptiOf(const profd::v1::AgentInfo& a) {
  if (!a.has_cupti_sharing()) return "-";
  const profd::v1::CuptiSharing& s = a.cupti_sharing();
  switch (s.mode()) {
    case profd::v1::CUPTI_SHARING_SHARED:
      return s.other_tracing() ? "shared, in use" : "shared";
    case profd::v1::CUPTI_SHARING_WAITING:
      return "not loaded";
    case profd::v1::CUPTI_SHARING_PARTIAL:
      return s.other_tracing() ? "PARTIAL, in use" : "PARTIAL";
    case profd::v1::CUPTI_SHARING_NOT_SHARED:
      return "NOT SHARED";
    case profd::v1::CUPTI_SHARING_OFF:
      return "NOT SHARED (off)";
    default:
      return "-";
  }
}

// How `profctl capture` can reach the process: through Kineto (CPU operators and kernels, what
// torch.profiler records; the default where offered) and/or the agent (CUPTI).
std::string ViaOf(const profd::v1::AgentInfo& a) {
  std::vector<std::string> paths;
  if (a.kineto().polling()) paths.push_back(a.kineto().busy() ? "kineto (busy)" : "kineto");
  if (a.has_agent()) paths.push_back("cupti");
  return paths.empty() ? "-" : absl::StrJoin(paths, ", ");
}

// The flight recorder's line under the table, when it is on: what it holds, or why it waits.
std::string RecorderNote(const profd::v1::AgentInfo& a) {
  const profd::v1::RecorderState& r = a.recorder();
  if (!r.on()) return "";
  std::string note = "flight recorder on (" + std::to_string(r.seconds()) + " s, at most " +
                     analysis::FormatBytes(static_cast<double>(r.max_bytes())) +
                     (r.duty_on_ms() ? ", duty-cycled " + std::to_string(r.duty_on_ms()) + " ms/" +
                                           std::to_string(r.duty_period_ms()) + " ms"
                                     : "") +
                     ")";
  if (r.paused()) return note + ": " + r.detail();
  if (r.covered_since_realtime_ns() > 0) {
    note += ": holds since " + Ago(static_cast<int64_t>(r.covered_since_realtime_ns())) + ", " +
            analysis::FormatBytes(static_cast<double>(r.bytes()));
  }
  if (r.evicted_records() > 0) {
    note += ", " + analysis::FormatCount(r.evicted_records()) + " older records let go";
  }
  return note;
}

int RunAgents(const GlobalOptions& g) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::ListAgentsResponse response;
  grpc::Status status =
      client.stub().ListAgents(WithDeadline(&ctx, g), profd::v1::ListAgentsRequest(), &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  if (response.omitted() > 0) {
    std::cerr << "profctl: " << response.omitted()
              << " more agents not shown: profd's answer is capped at 16 MiB\n";
  }
  if (response.agents().empty() && response.omitted() == 0) {
    std::cout << "No agents connected to profd on " << Printable(response.hostname())
              << ".\nStart the process with CUDA_INJECTION64_PATH=/opt/profd/lib/libprofagent.so "
                 "(where install.sh puts it; lib/ of an unpacked tarball), and PROFD_AGENT_SOCKET "
                 "if profd uses another agent socket. Not listed still: docs/TROUBLESHOOTING.md.\n";
    return kExitOk;
  }
  analysis::TextTable table(
      {"PID>", "NAMESPACE", "POD", "CONTAINER", "GPUS", "CONNECTED", "VIA", "CUPTI", "COMMAND"});
  std::vector<std::string> notes;
  for (const auto& a : response.agents()) {
    table.AddRow({std::to_string(a.pid()), LabelOf(a.pod_namespace()), LabelOf(a.pod_name()),
                  LabelOf(a.container_name()), GpusOf(a), Ago(a.connected_since_unix_ns()),
                  ViaOf(a), CuptiOf(a), a.command_line().empty() ? a.comm() : a.command_line()});
    const profd::v1::CuptiSharing& s = a.cupti_sharing();
    std::string pid = "pid " + std::to_string(a.pid()) + ": ";
    // The pod column is the verified pod where profd checks it; a claim that differs is shown.
    const std::string claimed = a.claimed_pod_namespace() + "/" + a.claimed_pod_name();
    const std::string pod = a.pod_namespace() + "/" + a.pod_name();
    if (a.pod_identity() == profd::v1::POD_IDENTITY_VERIFIED && !a.claimed_pod_name().empty() &&
        (a.claimed_pod_name() != a.pod_name() ||
         (!a.claimed_pod_namespace().empty() && a.claimed_pod_namespace() != a.pod_namespace()))) {
      notes.push_back(pid + "its environment claims pod " + claimed + "; its cgroup puts it in " +
                      pod + " (verified, shown above)");
    } else if (a.pod_identity() == profd::v1::POD_IDENTITY_NOT_IN_A_POD &&
               !a.claimed_pod_name().empty()) {
      notes.push_back(pid + "its environment claims pod " + claimed +
                      "; its cgroup is in no pod (verified)");
    } else if (a.pod_identity() == profd::v1::POD_IDENTITY_UNVERIFIED) {
      notes.push_back(pid + "pod not verified yet: pod UID " + a.pod_uid() +
                      " is not in the pod list profd read (the pod shown is the process's claim)");
    }
    if (s.mode() == profd::v1::CUPTI_SHARING_PARTIAL ||
        s.mode() == profd::v1::CUPTI_SHARING_NOT_SHARED ||
        s.mode() == profd::v1::CUPTI_SHARING_OFF) {
      notes.push_back(pid + s.detail());
      for (const std::string& n : s.not_interposed()) notes.push_back(pid + "  " + n);
    } else if (s.other_tracing()) {
      notes.push_back(pid + s.other_tracer() +
                      " is tracing CUDA activity: captures are refused until it stops");
    }
    if (std::string recorder = RecorderNote(a); !recorder.empty()) notes.push_back(pid + recorder);
  }
  std::cout << table.Render("");
  // The notes quote what each agent reported (the tool holding CUPTI, libraries it saw).
  if (!notes.empty()) {
    std::cout << "\n";
    for (const std::string& n : notes) std::cout << Printable(n) << "\n";
  }
  return kExitOk;
}

// The hardware counters' state: "/metrics, every 10.00 ms on 2 GPU(s)", "for --gpu-metrics
// captures only", and "; unavailable: why" where they cannot be read.
std::string CountersLine(const profd::v1::GpuCountersStatus& c) {
  std::string line = c.metrics() ? "/metrics" : "for --gpu-metrics captures only";
  if (c.interval_ns() > 0) {
    line += std::string(c.capture() ? ", a capture's now" : "") + ", every " +
            analysis::FormatDuration(static_cast<double>(c.interval_ns())) + " on " +
            std::to_string(c.gpus()) + " GPU(s)";
  }
  if (!c.error().empty()) line += (c.interval_ns() > 0 ? "; " : "; unavailable: ") + c.error();
  return Printable(line);
}

int RunStatus(const GlobalOptions& g) {
  ProfdClient client(ResolveTarget(g.target), g.tls);
  grpc::ClientContext ctx;
  profd::v1::DaemonStatus response;
  grpc::Status status =
      client.stub().GetStatus(WithDeadline(&ctx, g), profd::v1::GetStatusRequest(), &response);
  if (!status.ok()) return Fail(client, status);
  if (g.json) {
    PrintJson(response);
    return kExitOk;
  }
  std::cout << "profd " << Printable(response.version()) << " on " << Printable(response.hostname())
            << ", up since " << Ago(response.started_unix_ns()) << "\n"
            << "  agents connected:  " << response.agents_connected() << "\n"
            << "  agent socket:      " << Printable(response.agent_socket()) << "\n"
            << "  Kineto socket:     "
            << (response.kineto_socket().empty() ? std::string("off")
                                                 : Printable(response.kineto_socket()) + " (" +
                                                       std::to_string(response.kineto_processes()) +
                                                       " PyTorch processes polling)")
            << "\n"
            << "  gRPC:              " << Printable(absl::StrJoin(response.grpc_addresses(), ", "))
            << "\n";
  std::cout << "  pods:              "
            << (response.pods_source().empty()
                    ? std::string("as processes claim them (POD_NAME; --kubernetes_pods=none)")
                    : "verified: cgroup pod UID -> " + Printable(response.pods_source()) +
                          (response.pods_error().empty()
                               ? std::string()
                               : "; last list failed: " + Printable(response.pods_error())))
            << "\n";
  if (!response.metrics_address().empty()) {
    std::cout << "  metrics:           http://" << Printable(response.metrics_address())
              << "/metrics\n";
  }
  if (!response.alert_address().empty()) {
    std::cout << "  alerts:            http://" << Printable(response.alert_address())
              << "/alerts (Alertmanager webhook)\n";
  }
  std::cout << "  GPU metrics:       "
            << (response.nvml_available()
                    ? std::string("NVML")
                    : "off: " + (response.nvml_error().empty() ? std::string("NVML not loaded")
                                                               : Printable(response.nvml_error())))
            << "\n"
            << "  GPU counters:      " << CountersLine(response.gpu_counters()) << "\n";
  if (!response.store_uri().empty()) {
    std::cout << "  store:             " << Printable(response.store_uri()) << "\n";
    // What waits for the store, and why: an on-call engineer's first question.
    grpc::ClientContext spool_ctx;
    profd::v1::SpoolStatus spool;
    if (StoreStub(client)
            ->GetSpoolStatus(WithDeadline(&spool_ctx, g), profd::v1::GetSpoolStatusRequest(),
                             &spool)
            .ok()) {
      std::cout << "  uploads:           " << spool.uploaded_total() << " stored, "
                << spool.pending() << " waiting";
      if (!spool.last_error().empty()) {
        std::cout << "; FAILING (" << spool.upload_failures_total()
                  << " failed attempts): " << Printable(spool.last_error());
      }
      std::cout << "\n";
    }
  }
  std::cout << "  captures:          " << response.captures_running() << " running, "
            << response.captures_completed() << " completed, " << response.captures_failed()
            << " failed\n";
  if (response.agent_protocol_errors() > 0) {
    std::cout << "  rejected agent connections: " << response.agent_protocol_errors() << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddAgentCommands(CLI::App& app, const GlobalOptions& g, int* rc) {
  app.add_subcommand("agents", "List the processes that can be profiled")->callback([&g, rc] {
    *rc = RunAgents(g);
  });
  app.add_subcommand("status", "Show profd's state")->callback([&g, rc] { *rc = RunStatus(g); });
}

}  // namespace profctl

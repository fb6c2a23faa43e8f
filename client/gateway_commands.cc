// `profctl gateway`: the flags of the cluster gateway (client/gateway.h), checked before it
// listens, and its life until SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/gateway.h"
#include "common/http_server.h"
#include "daemon/log.h"

namespace profctl {
namespace {

struct GatewayFlags {
  GatewayOptions options;
  std::string authorization = "apiserver";
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::vector<std::string> trusted_proxies;
  std::string max_duration = "60s";
};

// This binary, for the report's child processes.
std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : "profctl";
}

// Every flag checked, *options filled in; "" or what is wrong.
std::string CheckGatewayFlags(const GlobalOptions& g, GatewayFlags* f) {
  GatewayOptions& o = f->options;
  absl::StatusOr<std::optional<profd::KubernetesAuthorizer::Options>> authorization =
      profd::KubernetesAuthorizer::FromFlags("--kubernetes_authorization", f->authorization,
                                             f->token_file, f->ca_file);
  if (!authorization.ok()) return std::string(authorization.status().message());
  if (!authorization->has_value()) {
    return "--kubernetes_authorization=none: the gateway captures only for users the API server "
           "authorizes; give apiserver (in a pod) or the API server's https:// URL";
  }
  o.authorization = **authorization;
  for (const std::string& p : f->trusted_proxies) {
    for (absl::string_view ip : absl::StrSplit(p, ',', absl::SkipWhitespace())) {
      o.trusted_proxies.emplace(ip);
    }
  }
  if (!g.tls.enabled()) {
    return "the gateway reaches each node's profd over mutual TLS: give --tls-ca, --tls-cert and "
           "--tls-key (a client certificate from the CA the nodes trust)";
  }
  if (std::string bad = ParseDurationFlag("--max-duration", f->max_duration, absl::Seconds(1),
                                          absl::Hours(1), &o.max_duration);
      !bad.empty()) {
    return bad;
  }
  FleetTimes times;
  if (std::string bad = ParseFleetTimes(g, o.fleet, &times); !bad.empty()) return bad;
  if (o.work_dir.empty()) return "--work-dir: where the gateway keeps recent reports and traces";
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return absl::StrCat("--work-dir ", o.work_dir, ": ", ec.message());
  o.profctl_path = SelfPath();
  return "";
}

int RunGateway(const GlobalOptions& g, GatewayFlags* f) {
  if (std::string bad = CheckGatewayFlags(g, f); !bad.empty()) {
    std::cerr << "profctl: " << bad << "\n";
    return kExitUsage;
  }
  absl::StatusOr<KubeAccess> access =
      LoadKubeAccess(f->options.fleet.kubeconfig, f->options.fleet.context);
  if (!access.ok()) {
    std::cerr << "profctl: " << access.status().message() << "\n";
    return kExitError;
  }
  // Signals are taken by sigwait below, not by handlers: block them before any thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto gateway = std::make_unique<CaptureGateway>(g, f->options, *std::move(access));
  profd::HttpServer::Options server_options;
  server_options.what = "the gateway";
  server_options.address_flag = "--listen";
  server_options.usual_port = 7480;
  server_options.max_body_bytes = 16 * 1024;
  server_options.tls.cert_file = f->options.tls_cert_file;
  server_options.tls.key_file = f->options.tls_key_file;
  absl::StatusOr<std::unique_ptr<profd::HttpServer>> server = profd::HttpServer::Start(
      f->options.listen, [&gateway](const profd::HttpRequest& r) { return gateway->Handle(r); },
      server_options);
  if (!server.ok()) {
    std::cerr << "profctl: " << server.status().message() << "\n";
    return kExitError;
  }
  profd::LogInfo("gateway", "listening on %s (%s); captures authorized by %s", (*server)->address(),
                 f->options.tls_cert_file.empty() ? "http" : "https",
                 f->options.authorization.server);
  int signal = 0;
  sigwait(&stop, &signal);
  profd::LogInfo("gateway", "stopping (signal %d): waiting for the captures in flight", signal);
  server->reset();
  gateway.reset();
  return kExitOk;
}

}  // namespace

void AddGatewayCommand(CLI::App& app, const GlobalOptions& g, int* rc) {
  auto f = std::make_shared<GatewayFlags>();
  CLI::App* gw = app.add_subcommand(
      "gateway",
      "Serve fleet captures over HTTP(S) for tools that cannot run profctl: the page a Grafana "
      "data link opens (/capture?namespace=NS&pod=NAME&duration=5s) and a JSON API "
      "(/api/v1/captures). Every capture is the user's, authorized by the Kubernetes API server "
      "and audited");
  GatewayOptions& o = f->options;
  gw->add_option("--listen", o.listen, "host:port to serve on (default 0.0.0.0:7480)");
  gw->add_option("--tls-serve-cert", o.tls_cert_file, "Serve HTTPS with this certificate (PEM)");
  gw->add_option("--tls-serve-key", o.tls_key_file, "Private key (PEM) of --tls-serve-cert");
  gw->add_option("--kubernetes_authorization", f->authorization,
                 "Who asks and may they: apiserver (in a pod, default) or the API server's "
                 "https:// URL (TokenReview, SubjectAccessReview)");
  gw->add_option("--kubernetes_token_file", f->token_file,
                 "The gateway's own token, for the reviews (default: its service account's)");
  gw->add_option("--kubernetes_ca_file", f->ca_file,
                 "PEM CA of the API server (default: the service account's)");
  gw->add_option("--trusted_proxy", f->trusted_proxies,
                 "IP address of an authenticating proxy whose X-Forwarded-User and "
                 "X-Forwarded-Groups are believed (repeat, or comma-separated); none by default");
  gw->add_option("--kubeconfig", o.fleet.kubeconfig,
                 "How the gateway finds pods (default: in a pod, its service account)");
  gw->add_option("--context", o.fleet.context, "kubeconfig context (default: current)");
  gw->add_option("--node-address", o.fleet.node_address,
                 "Where a node's profd listens: {node_ip}, {node_name} (default {node_ip}:7465)");
  gw->add_option("--node-timeout", o.fleet.node_timeout,
                 "How long after the window a node may take to answer (default 30s)");
  gw->add_option("--lead", o.fleet.lead, "How far ahead of the request a capture starts (2s)");
  gw->add_option("--work-dir", o.work_dir, "Where the recent captures' reports and traces are kept")
      ->required();
  gw->add_option("--max-duration", f->max_duration, "Longest capture one may ask for (60s)");
  gw->add_option("--max-running", o.max_running, "Captures at once (4)")->check(CLI::Range(1, 64));
  gw->add_option("--max-kept", o.max_kept, "Finished captures kept for their links (50)")
      ->check(CLI::Range(1, 10000));
  gw->callback([&g, rc, f] { *rc = RunGateway(g, f.get()); });
}

}  // namespace profctl

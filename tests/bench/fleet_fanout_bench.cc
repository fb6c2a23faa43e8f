// A fleet capture's fan-out at up to 1,000 nodes, simulated on one machine:
//   fleet_fanout_bench [--nodes=100,250,500,1000] [--pods-per-node=8] [--lead=2s]
// The real profctl (`capture --deployment llm -n sim`, mutual TLS) against the real Kubernetes
// API stand-in (tests/support/kubernetes_api_stand_in.py) serving a Deployment whose N×8 pods run
// on N nodes, and N simulated nodes: one process of this bench serving profd's gRPC service on N
// loopback addresses (127.1.x.y:7465, one TLS certificate, --tls-server-name), whose Capture
// notes when the request came, waits for the common start and the window, and answers as profd
// does. What it shows: command -> every node asked (the last request's arrival), the margin left
// before the start instant, profctl's wall time, CPU and peak memory, the API's pages. What it
// does not: the nodes' own capture work and clocks (each node's profd is measured elsewhere).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"
#include "profd/v1/profd.grpc.pb.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_pki.h"

namespace profd::testing {
namespace {

std::string Address(int node) { return absl::StrCat("127.1.", node / 250, ".", 1 + node % 250); }

// N nodes in one process: profd's Capture as a fleet capture sees it.
class SimulatedNodes final : public v1::Profd::Service {
 public:
  explicit SimulatedNodes(int nodes) : arrivals_(nodes, absl::InfinitePast()) {}

  grpc::Status Capture(grpc::ServerContext*, const v1::CaptureRequest* request,
                       grpc::ServerWriter<v1::CaptureProgress>* writer) override {
    const absl::Time arrived = absl::Now();
    int node = -1;
    if (request->pods_size() > 0) {  // "sim/llm-<node>-<k>"
      std::vector<std::string> parts = absl::StrSplit(request->pods(0), '-');
      if (parts.size() >= 3) (void)absl::SimpleAtoi(parts[parts.size() - 2], &node);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (node >= 0 && node < static_cast<int>(arrivals_.size())) arrivals_[node] = arrived;
      start_at_ = absl::FromUnixNanos(request->start_at_unix_ns());
    }
    const absl::Time start = absl::FromUnixNanos(request->start_at_unix_ns());
    absl::SleepFor(start - absl::Now());
    const int64_t enabled = absl::ToUnixNanos(absl::Now());
    absl::SleepFor(start + absl::Milliseconds(request->duration_ms()) - absl::Now());
    v1::CaptureProgress progress;
    progress.set_final(true);
    v1::CaptureInfo* info = progress.mutable_capture();
    info->set_capture_id(absl::StrCat("20261202T000000Z-sim-node-", node));
    info->set_phase(v1::CAPTURE_PHASE_DONE);
    info->set_fleet_id(request->fleet_id());
    info->set_started_unix_ns(enabled);
    for (int i = 0; i < request->pods_size(); ++i) {
      v1::ProcessCapture* p = info->add_processes();
      p->set_pid(1000 + i);
      std::vector<std::string> ns_name = absl::StrSplit(request->pods(i), '/');
      p->set_pod_namespace(ns_name[0]);
      p->set_pod_name(ns_name.size() > 1 ? ns_name[1] : "");
      p->set_enabled_unix_ns(enabled);
      p->set_events(1000);
    }
    writer->Write(progress);
    return grpc::Status::OK;
  }

  struct Asked {
    absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast(), start_at;
    int nodes = 0;
  };
  Asked Arrivals() {
    std::lock_guard<std::mutex> lock(mu_);
    Asked a;
    for (absl::Time t : arrivals_) {
      if (t == absl::InfinitePast()) continue;
      ++a.nodes;
      a.first = std::min(a.first, t);
      a.last = std::max(a.last, t);
    }
    a.start_at = start_at_;
    return a;
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(arrivals_.begin(), arrivals_.end(), absl::InfinitePast());
  }

 private:
  std::mutex mu_;
  std::vector<absl::Time> arrivals_;
  absl::Time start_at_;
};

// The Deployment's pods, shaped as the API server lists them (the fields profctl reads).
void WriteWorkload(const std::string& dir, int nodes, int pods_per_node) {
  std::ofstream(dir + "/deployment-sim-llm.json")
      << R"({"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"llm","namespace":"sim"},)"
      << R"("spec":{"selector":{"matchLabels":{"app":"llm"}}}})";
  std::ofstream pods(dir + "/pods-sim.json");
  pods << R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[)";
  for (int n = 0; n < nodes; ++n) {
    for (int k = 0; k < pods_per_node; ++k) {
      pods << (n == 0 && k == 0 ? "" : ",")
           << absl::StrCat(
                  R"({"metadata":{"name":"llm-)", n, "-", k,
                  R"(","namespace":"sim","labels":{"app":"llm"}},"spec":{"nodeName":"gpu-node-)", n,
                  R"("},"status":{"phase":"Running","hostIP":")", Address(n), R"("}})");
    }
  }
  pods << "]}";
}

double Seconds(const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; }

int Main(int argc, char** argv) {
  std::vector<int> sizes = {100, 250, 500, 1000};
  int pods_per_node = 8;
  std::string lead = "2s";
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--nodes=")) {
      sizes.clear();
      for (absl::string_view n : absl::StrSplit(a, ',')) sizes.push_back(std::stoi(std::string(n)));
    } else if (absl::ConsumePrefix(&a, "--pods-per-node=")) {
      pods_per_node = std::stoi(std::string(a));
    } else if (absl::ConsumePrefix(&a, "--lead=")) {
      lead = std::string(a);
    }
  }
  const int most = *std::max_element(sizes.begin(), sizes.end());
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);  // profctl inherits it: a connection per node

  TestPki pki(FindProgram("openssl"));
  if (!pki.Ca("ca") || !pki.Leaf("node", "ca", "profd", "subjectAltName=DNS:node.sim\n") ||
      !pki.Leaf("profctl", "ca", "profctl", "extendedKeyUsage=clientAuth\n") ||
      !pki.Leaf("api", "ca", "api", "subjectAltName=IP:127.0.0.1\n")) {
    std::fprintf(stderr, "openssl: %s\n", pki.error().c_str());
    return 1;
  }
  grpc::SslServerCredentialsOptions tls(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  tls.pem_root_certs = ReadFileOrEmpty(pki.File("ca.pem"));
  tls.pem_key_cert_pairs.push_back(
      {ReadFileOrEmpty(pki.File("node.key")), ReadFileOrEmpty(pki.File("node.pem"))});
  SimulatedNodes nodes(most);
  grpc::ServerBuilder builder;
  for (int n = 0; n < most; ++n) {
    builder.AddListeningPort(absl::StrCat(Address(n), ":7465"), grpc::SslServerCredentials(tls));
  }
  builder.RegisterService(&nodes);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::fprintf(stderr, "cannot listen on %d loopback addresses\n", most);
    return 1;
  }

  TempDir dir;
  std::printf("fleet fan-out, simulated nodes, %d pods a node, --lead %s, %ld cores\n",
              pods_per_node, lead.c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  for (int n : sizes) {
    const std::string fixtures = dir.File(absl::StrCat("k8s-", n));
    std::filesystem::create_directories(fixtures);
    WriteWorkload(fixtures, n, pods_per_node);
    const int port = 17000 + n;
    Subprocess api({"/usr/bin/python3", SourcePath("tests/support/kubernetes_api_stand_in.py"),
                    "--fixtures", fixtures, "--cert", pki.File("api.pem"), "--key",
                    pki.File("api.key"), "--token", "sim-token", "--listen",
                    absl::StrCat("127.0.0.1:", port), "--log", dir.File(absl::StrCat("api-", n))},
                   {}, dir.File(absl::StrCat("api-", n, ".out")));
    WaitFor(
        [&] {
          return ReadFileOrEmpty(dir.File(absl::StrCat("api-", n, ".out"))).find("port") !=
                 std::string::npos;
        },
        absl::Seconds(10));
    std::ofstream(dir.File("kubeconfig")) << absl::StrCat(
        R"({"apiVersion":"v1","kind":"Config","current-context":"sim","clusters":[{"name":"sim","cluster":{"server":"https://127.0.0.1:)",
        port, R"(","certificate-authority":")", pki.File("ca.pem"),
        R"("}}],"contexts":[{"name":"sim","context":{"cluster":"sim","user":"u","namespace":"sim"}}],"users":[{"name":"u","user":{"token":"sim-token"}}]})");
    nodes.Reset();
    rusage before{}, after{};
    getrusage(RUSAGE_CHILDREN, &before);
    const absl::Time t0 = absl::Now();
    RunResult r = Run({BuildPath("client/profctl"),
                       "--tls-ca",
                       pki.File("ca.pem"),
                       "--tls-cert",
                       pki.File("profctl.pem"),
                       "--tls-key",
                       pki.File("profctl.key"),
                       "--tls-server-name",
                       "node.sim",
                       "--json",
                       "capture",
                       "--kubeconfig",
                       dir.File("kubeconfig"),
                       "--deployment",
                       "llm",
                       "--duration",
                       "1s",
                       "--lead",
                       lead,
                       "--node-timeout",
                       "60s"},
                      {}, absl::Minutes(5));
    const absl::Duration wall = absl::Now() - t0;
    getrusage(RUSAGE_CHILDREN, &after);
    const SimulatedNodes::Asked asked = nodes.Arrivals();
    absl::Duration lead_time;
    (void)absl::ParseDuration(lead, &lead_time);
    const absl::Time chosen = asked.start_at - lead_time;  // when profctl picked the instant
    const int pages = [&] {
      std::string log = ReadFileOrEmpty(dir.File(absl::StrCat("api-", n)));
      return static_cast<int>(std::count(log.begin(), log.end(), '\n'));
    }();
    const bool ok = r.exit_code == 0;
    std::printf(
        "%5d nodes, %5d pods: exit %d, %d nodes asked; command -> start instant chosen %.3f s "
        "(pods listed, every node connected), -> first node asked %.3f s, -> last %.3f s: "
        "%.3f s before the start; profctl %.2f s wall, %.2f s CPU, peak RSS %.0f MB; %d API "
        "requests\n",
        n, n * pods_per_node, r.exit_code, asked.nodes, absl::ToDoubleSeconds(chosen - t0),
        absl::ToDoubleSeconds(asked.first - chosen), absl::ToDoubleSeconds(asked.last - chosen),
        absl::ToDoubleSeconds(asked.start_at - asked.last), absl::ToDoubleSeconds(wall),
        Seconds(after.ru_utime) + Seconds(after.ru_stime) - Seconds(before.ru_utime) -
            Seconds(before.ru_stime),
        after.ru_maxrss / 1024.0, pages);
    if (!ok) std::printf("  profctl: %s\n", r.err.substr(0, 600).c_str());
    api.Kill();
  }
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return 0;
}

}  // namespace
}  // namespace profd::testing

int main(int argc, char** argv) { return profd::testing::Main(argc, argv); }

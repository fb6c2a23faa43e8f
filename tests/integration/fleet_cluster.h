// Test support for captures across nodes: four real profd "nodes", each in its own network
// namespace with its own address (a veth on a bridge), host name (a UTS namespace) and mTLS
// server certificate, each with replay agents in two "pods" of a Deployment; a shared file://
// store; a Kubernetes API stand-in (tests/support/kubernetes_api_stand_in.py) in a fifth
// namespace (the laptop), where profctl and the gateway run. Needs root (network namespaces);
// without them (or with PROFD_TEST_NO_NETNS set), loopback addresses 127.0.0.11-14 stand in for
// the nodes. Used by fleet_test.cc and gateway_test.cc.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/profd_process.h"
#include "tests/support/test_pki.h"

namespace profd::testing {

constexpr int kNodes = 4;
// The kubeconfig's users (tests/fixtures/kubernetes/users.json): alice may capture in serving
// (group sre), bob only in training.
constexpr char kToken[] = "fleet-test-token-3f9a";
constexpr char kBobToken[] = "bob-token-8c21";
// profd's own (its service account's), for the reviews.
constexpr char kProfdToken[] = "profd-service-account-token-51c7";

inline bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The nodes' network: a bridge in the laptop's namespace, a veth to each node's namespace. The
// addresses are those of the fixtures' pods (status.hostIP 10.77.0.11-14); every namespace is
// private to the test, so they cannot meet the host's. Removed at the end.
class FleetNetwork {
 public:
  FleetNetwork() : prefix_(absl::StrCat("profd-fleet-", getpid())) {}
  ~FleetNetwork() {
    for (const std::string& ns : made_) profd::testing::Run({ip_, "netns", "del", ns});
  }

  // False (with why) when namespaces cannot be made here.
  bool Make(std::string* why) {
    if (std::getenv("PROFD_TEST_NO_NETNS") != nullptr) {
      *why = "PROFD_TEST_NO_NETNS is set";
      return false;
    }
    ip_ = FindProgram("ip");
    if (geteuid() != 0 || ip_.empty()) {
      *why = "not root, or no ip(8)";
      return false;
    }
    if (!Ns(laptop()) || !Do({"-n", laptop(), "link", "add", "br0", "type", "bridge"}) ||
        !Do({"-n", laptop(), "addr", "add", "10.77.0.1/24", "dev", "br0"}) ||
        !Do({"-n", laptop(), "link", "set", "br0", "up"}) ||
        !Do({"-n", laptop(), "link", "set", "lo", "up"})) {
      *why = error_;
      return false;
    }
    for (int i = 1; i <= kNodes; ++i) {
      const std::string n = node(i), port = absl::StrCat("n", i);
      if (!Ns(n) ||
          !Do({"-n", laptop(), "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
               n}) ||
          !Do({"-n", laptop(), "link", "set", port, "master", "br0", "up"}) ||
          !Do({"-n", n, "addr", "add", absl::StrCat(NodeIp(i, true), "/24"), "dev", "eth0"}) ||
          !Do({"-n", n, "link", "set", "eth0", "up"}) ||
          !Do({"-n", n, "link", "set", "lo", "up"})) {
        *why = error_;
        return false;
      }
    }
    return true;
  }

  std::string laptop() const { return prefix_ + "-laptop"; }
  std::string node(int i) const { return absl::StrCat(prefix_, "-node", i); }
  static std::string NodeIp(int i, bool namespaces) {
    return absl::StrCat(namespaces ? "10.77.0." : "127.0.0.", 10 + i);
  }
  const std::string& ip() const { return ip_; }

 private:
  bool Ns(const std::string& name) {
    if (!Do({"netns", "add", name})) return false;
    made_.push_back(name);
    return true;
  }
  bool Do(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    RunResult r = profd::testing::Run(args);
    if (r.exit_code != 0) error_ += absl::StrCat(absl::StrJoin(args, " "), ": ", r.err);
    return r.exit_code == 0;
  }

  const std::string prefix_;
  std::string ip_;
  std::vector<std::string> made_;
  std::string error_;
};

class FleetCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string openssl = FindProgram("openssl");
    python_ = FindProgram("python3");
    if (openssl.empty() || python_.empty()) {
      GTEST_SKIP() << "needs openssl and python3 (scripts/setup.sh)";
    }
    std::string why;
    namespaces_ = network_.Make(&why);
    if (!namespaces_) {
      std::cerr << "network namespaces unavailable (" << why
                << "): the nodes get loopback addresses 127.0.0.11-14 instead\n";
    }
    pki_ = std::make_unique<TestPki>(openssl);
    ASSERT_TRUE(
        pki_->Ca("ca") &&
        pki_->Leaf("profctl", "ca", "on-call engineer", "extendedKeyUsage=clientAuth\n") &&
        pki_->Leaf("apiserver", "ca", "kube-apiserver",
                   absl::StrCat("subjectAltName=IP:", ApiIp(), "\nextendedKeyUsage=serverAuth\n")))
        << pki_->error();
    for (int i = 1; i <= kNodes; ++i) {
      ASSERT_TRUE(pki_->Leaf(
          absl::StrCat("node", i), "ca", absl::StrCat("profd on gpu-node-", i),
          absl::StrCat("subjectAltName=IP:", NodeIp(i), "\nextendedKeyUsage=serverAuth\n")))
          << pki_->error();
    }
    StartApi();
    WriteKubeconfig();
  }

  std::string NodeIp(int i) const { return FleetNetwork::NodeIp(i, namespaces_); }
  std::string ApiIp() const { return namespaces_ ? "10.77.0.1" : "127.0.0.1"; }
  std::string ApiAddress() const { return absl::StrCat(ApiIp(), ":", api_port_); }

  // A command in the laptop's namespace (or here, without namespaces).
  std::vector<std::string> OnLaptop(std::vector<std::string> argv) const {
    if (namespaces_) argv.insert(argv.begin(), {network_.ip(), "netns", "exec", network_.laptop()});
    return argv;
  }

  void StartApi() {
    api_port_ = namespaces_ ? 6443 : 16443 + getpid() % 1000;
    std::vector<std::string> argv = OnLaptop(
        {python_, SourcePath("tests/support/kubernetes_api_stand_in.py"), "--cert",
         pki_->File("apiserver.pem"), "--key", pki_->File("apiserver.key"), "--token", kProfdToken,
         "--users", SourcePath("tests/fixtures/kubernetes/users.json"), "--listen", ApiAddress(),
         // Fewer pods a page than asked for, as the API may answer: profctl must follow continue.
         "--page-size", "3", "--log", dir_.File("api-requests.log")});
    if (!namespaces_) {
      std::vector<std::string> map;
      for (int i = 1; i <= kNodes; ++i) {
        map.push_back(absl::StrCat(FleetNetwork::NodeIp(i, true), "=", NodeIp(i)));
      }
      argv.insert(argv.end(), {"--host-ip-map", absl::StrJoin(map, ",")});
    }
    api_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                        dir_.File("api.log"));
    ASSERT_TRUE(WaitFor([&] { return Has(ReadFileOrEmpty(dir_.File("api.log")), "port "); },
                        absl::Seconds(10)))
        << ReadFileOrEmpty(dir_.File("api.log.err"));
    std::ofstream(dir_.File("profd-token")) << kProfdToken << "\n";
  }

  // As kubectl writes one (YAML), with the API's CA inline and a user's bearer token.
  void WriteKubeconfig(const std::string& file = "kubeconfig", const std::string& token = kToken) {
    std::string ca_base64;
    absl::Base64Escape(ReadFileOrEmpty(pki_->File("ca.pem")), &ca_base64);
    std::ofstream(dir_.File(file)) << absl::StrCat(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: ",
        ca_base64, "\n    server: https://", ApiAddress(),
        "\n  name: gpu-cluster\ncontexts:\n- context:\n    cluster: gpu-cluster\n"
        "    namespace: serving\n    user: oncall\n  name: oncall@gpu-cluster\n"
        "current-context: oncall@gpu-cluster\npreferences: {}\nusers:\n- name: oncall\n  user:\n"
        "    token: ",
        token, "\n");
  }

  // profd on node i: its namespace, its host name, mTLS on its own address, the shared store,
  // captures authorized by the API server.
  void StartNode(int i) {
    auto node = std::make_unique<ProfdProcess>(std::vector<std::string>{
        absl::StrCat("--grpc_address=", NodeIp(i), ":7465"),
        "--grpc_tls_cert=" + pki_->File(absl::StrCat("node", i, ".pem")),
        "--grpc_tls_key=" + pki_->File(absl::StrCat("node", i, ".key")),
        "--grpc_tls_client_ca=" + pki_->File("ca.pem"), "--store=file://" + dir_.File("store"),
        "--upload_retry_initial=100ms",
        absl::StrCat("--kubernetes_authorization=https://", ApiAddress()),
        "--kubernetes_token_file=" + dir_.File("profd-token"),
        "--kubernetes_ca_file=" + pki_->File("ca.pem")});
    std::vector<std::string> launcher;
    if (namespaces_) {
      launcher = {network_.ip(), "netns", "exec", network_.node(i)};
    }
    // Its own host name, as a node has (the store keys captures by it).
    launcher.insert(launcher.end(),
                    {FindProgram("unshare"), "--uts", "--", "/bin/sh", "-c",
                     absl::StrCat("hostname gpu-node-", i, " && exec \"$0\" \"$@\"")});
    node->set_launcher(launcher);
    node->Start();
    nodes_.push_back(std::move(node));
  }

  // The two pods of the Deployment on node i (the fixtures' order), one replay agent each;
  // `straggler` names the pod whose kernels run 3x as long.
  void StartPods(int i, const std::string& straggler) {
    static const char* kSuffixes[] = {"2xkqp", "5hd7w", "8mzrt", "bq4lc",
                                      "dkw9n", "h7vxs", "m2p6f", "tz8jq"};
    for (int k = 0; k < 2; ++k) {
      const std::string pod = absl::StrCat("llm-7f9c5d6b8-", kSuffixes[(i - 1) * 2 + k]);
      std::vector<std::string> argv = {BuildPath("tests/integration/replay_agent"),
                                       SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")};
      if (pod == straggler) argv.push_back("--stretch=3");
      agents_.push_back(std::make_unique<Subprocess>(
          argv,
          std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", nodes_[i - 1]->agent_socket()},
                                             {"POD_NAME", pod},
                                             {"POD_NAMESPACE", "serving"}}));
      pods_.push_back(pod);
    }
  }

  bool AllRegistered() {
    for (const auto& node : nodes_) {
      rapidjson::Document d = node->ProfctlJson({"agents"});
      if (!d.HasMember("agents") || d["agents"].Size() != 2) return false;
    }
    return true;
  }

  // profctl on the laptop, over mTLS to the nodes (the node's certificate names its address).
  std::vector<std::string> Profctl(std::vector<std::string> args) const {
    std::vector<std::string> argv = {BuildPath("client/profctl"),
                                     "--tls-ca",
                                     pki_->File("ca.pem"),
                                     "--tls-cert",
                                     pki_->File("profctl.pem"),
                                     "--tls-key",
                                     pki_->File("profctl.key"),
                                     "--timeout",
                                     "30s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return OnLaptop(argv);
  }
  std::vector<std::string> Capture(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"capture", "--kubeconfig", dir_.File("kubeconfig")};
    argv.insert(argv.end(), args.begin(), args.end());
    return Profctl(argv);
  }

  // The fleet id a capture's --json answer names; fails the test when it is not JSON.
  static std::string FleetId(const RunResult& r, rapidjson::Document* doc) {
    doc->Parse(r.out.c_str());
    EXPECT_FALSE(doc->HasParseError()) << r.out << r.err;
    if (doc->HasParseError() || !doc->HasMember("fleet_id")) return "";
    return (*doc)["fleet_id"].GetString();
  }

  // Waits until the shared store lists `want` captures of the fleet (uploads are asynchronous).
  bool Stored(const std::string& fleet_id, size_t want) {
    return WaitFor(
        [&] {
          RunResult r =
              profd::testing::Run({BuildPath("client/profctl"), "--target", nodes_[0]->target(),
                                   "--json", "list", "--fleet", fleet_id});
          rapidjson::Document d;
          d.Parse(r.out.c_str());
          return !d.HasParseError() && d.HasMember("traces") && d["traces"].Size() == want;
        },
        absl::Seconds(20));
  }

  TempDir dir_;
  FleetNetwork network_;
  bool namespaces_ = false;
  std::string python_;
  std::unique_ptr<TestPki> pki_;
  int api_port_ = 0;
  std::unique_ptr<Subprocess> api_;
  std::vector<std::unique_ptr<ProfdProcess>> nodes_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::vector<std::string> pods_;
};

}  // namespace profd::testing

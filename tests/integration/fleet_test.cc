// A capture across nodes, end to end on this machine: four real profd "nodes", each in its own
// network namespace with its own address (a veth on a bridge), host name (a UTS namespace) and
// mTLS server certificate, each with replay agents in two "pods" of a Deployment; a shared
// file:// store; and the real profctl, in a fifth namespace (the laptop), finding the pods through
// a Kubernetes API stand-in (tests/support/kubernetes_api_stand_in.py: HTTPS, bearer tokens,
// the routes profctl and profd use, answered from tests/fixtures/kubernetes/, shaped as the API
// server answers). One command captures every node under one fleet id; `profctl report FLEET_ID`
// sets the pods side by side and names the straggler; a node killed mid-capture is named, the
// others' traces kept. The nodes authorize captures with Kubernetes: the kubeconfig's user is
// checked with a TokenReview, allowed per namespace with a SubjectAccessReview, and audited. Needs
// root (network namespaces); without them (or with PROFD_TEST_NO_NETNS set), distinct loopback
// addresses 127.0.0.11-14 stand in for the nodes.
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
namespace {

constexpr int kNodes = 4;
// The kubeconfig's users (tests/fixtures/kubernetes/users.json): alice may capture in serving
// (group sre), bob only in training.
constexpr char kToken[] = "fleet-test-token-3f9a";
constexpr char kBobToken[] = "bob-token-8c21";
// profd's own (its service account's), for the reviews.
constexpr char kProfdToken[] = "profd-service-account-token-51c7";

bool Has(const std::string& text, const std::string& part) {
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

class FleetTest : public ::testing::Test {
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

TEST_F(FleetTest, OneCommandCapturesTheWorkloadOnEveryNodeAndNamesTheStraggler) {
  const std::string straggler = "llm-7f9c5d6b8-h7vxs";  // the second pod on node 3
  for (int i = 1; i <= kNodes; ++i) StartNode(i);
  for (int i = 1; i <= kNodes; ++i) StartPods(i, straggler);
  ASSERT_TRUE(WaitFor([&] { return AllRegistered(); }, absl::Seconds(15)));

  // One command, every node, one id, one start.
  const absl::Time before = absl::Now();
  RunResult r =
      profd::testing::Run(Capture({"--json", "--deployment", "llm", "-n", "serving", "--duration",
                                   "1s", "--lead", "1s", "--reason", "INC-4711 p99 latency"}));
  const absl::Duration took = absl::Now() - before;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  rapidjson::Document doc;
  const std::string fleet_id = FleetId(r, &doc);
  ASSERT_FALSE(fleet_id.empty());
  ASSERT_EQ(doc["nodes"].Size(), static_cast<unsigned>(kNodes)) << r.out;
  std::set<std::string> captured_pods;
  for (const auto& node : doc["nodes"].GetArray()) {
    EXPECT_TRUE(node["ok"].GetBool()) << r.out;
    EXPECT_STREQ(node["phase"].GetString(), "done");
    EXPECT_EQ(node["pods"].Size(), 2u);
    EXPECT_EQ(node["pods_without_agent"].Size(), 0u);
    for (const auto& p : node["pods"].GetArray()) captured_pods.insert(p.GetString());
  }
  EXPECT_EQ(captured_pods.size(), 8u);
  // The Deployment's Pending pod is said, not silently dropped; the namespace's redis is no
  // pod of the Deployment.
  ASSERT_EQ(doc["skipped_pods"].Size(), 1u) << r.out;
  EXPECT_TRUE(Has(doc["skipped_pods"][0]["why"].GetString(), "Pending"));
  EXPECT_FALSE(Has(r.out, "redis"));
  // Every node started at the one instant: within 100 ms by the nodes' own records (one clock
  // here; the replay agents wake from a condition variable).
  ASSERT_TRUE(doc.HasMember("start_skew_ns")) << r.out;
  EXPECT_LT(std::stoll(doc["start_skew_ns"].GetString()), 100'000'000) << r.out;
  EXPECT_LT(took, absl::Seconds(15));
  // The API was asked for the Deployment, then its pods page by page (3 a page).
  const std::string requests = ReadFileOrEmpty(dir_.File("api-requests.log"));
  EXPECT_TRUE(Has(requests, "/apis/apps/v1/namespaces/serving/deployments/llm")) << requests;
  EXPECT_TRUE(Has(requests, "continue=")) << requests;

  // Each node checked who asked and wrote one audit line: the user the API server named, the
  // pods, why, what came of it.
  for (const auto& node : nodes_) {
    const std::string log = node->log();
    EXPECT_TRUE(Has(log,
                    "audit] {\"event\":\"capture\",\"user\":\"alice@example.com\","
                    "\"groups\":[\"sre\",\"system:authenticated\"]"))
        << log;
    EXPECT_TRUE(Has(log, "\"pods\":[\"serving/llm-7f9c5d6b8-")) << log;
    EXPECT_TRUE(Has(log, "\"reason\":\"INC-4711 p99 latency\",\"fleet_id\":\"" + fleet_id +
                             "\",\"result\":\"started\""))
        << log;
  }

  // Each node's capture carries the fleet id into the shared store.
  ASSERT_TRUE(Stored(fleet_id, kNodes));

  // The report over every node's traces: a row per pod, the straggler named with its numbers.
  RunResult report = profd::testing::Run(
      Profctl({"--target", absl::StrCat(NodeIp(1), ":7465"), "report", fleet_id}));
  ASSERT_EQ(report.exit_code, 0) << report.out << report.err;
  for (const std::string& pod : pods_) {
    EXPECT_TRUE(Has(report.out, "serving/" + pod + "@gpu-node-")) << pod << "\n" << report.out;
  }
  EXPECT_TRUE(Has(report.out, "ACROSS RANKS")) << report.out;
  EXPECT_TRUE(Has(report.out, "serving/" + straggler + "@gpu-node-3 is the straggler"))
      << report.out;
  RunResult json = profd::testing::Run(
      Profctl({"--target", absl::StrCat(NodeIp(2), ":7465"), "--json", "report", fleet_id}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  rapidjson::Document rd;
  rd.Parse(json.out.c_str());
  ASSERT_FALSE(rd.HasParseError());
  EXPECT_EQ(rd["per_process"].Size(), 8u);
  ASSERT_EQ(rd["across_ranks"]["findings"].Size(), 1u) << json.out;
  const auto& finding = rd["across_ranks"]["findings"][0];
  EXPECT_STREQ(finding["id"].GetString(), "straggler");
  EXPECT_GT(finding["value"].GetDouble(), 2.0);  // 3x the kernel time of the others
  EXPECT_LT(finding["value"].GetDouble(), 4.0);

  // One node's stored capture damaged: that node is left out and named, the others reported.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.File("store"))) {
    const std::string path = entry.path().string();
    if (Has(path, "/gpu-node-2/") && Has(path, "/trace-") && entry.is_regular_file()) {
      std::ofstream(path, std::ios::app) << "damage";
    }
  }
  RunResult damaged = profd::testing::Run(
      Profctl({"--target", absl::StrCat(NodeIp(1), ":7465"), "--json", "report", fleet_id}));
  EXPECT_EQ(damaged.exit_code, 0) << damaged.err;
  EXPECT_TRUE(Has(damaged.err, "checksum mismatch")) << damaged.err;
  EXPECT_TRUE(Has(damaged.err, "node gpu-node-2 (capture ")) << damaged.err;
  rapidjson::Document dd;
  dd.Parse(damaged.out.c_str());
  ASSERT_FALSE(dd.HasParseError()) << damaged.out;
  EXPECT_EQ(dd["per_process"].Size(), 6u);

  // A node dies mid-capture: the others' captures are whole and stored, the dead one is named
  // with why, and the exit code says the result is partial.
  Subprocess capture(Capture({"-l", "app=llm", "--duration", "3s", "--lead", "1s"}), {},
                     dir_.File("capture2.out"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Has(ReadFileOrEmpty(dir_.File("capture2.out.err")),
                   absl::StrCat("gpu-node-4 (", NodeIp(4), ":7465): running"));
      },
      absl::Seconds(15)))
      << ReadFileOrEmpty(dir_.File("capture2.out.err"));
  nodes_[3]->Kill();
  EXPECT_EQ(capture.Wait(absl::Seconds(30)), 7);
  const std::string out = ReadFileOrEmpty(dir_.File("capture2.out"));
  const std::string err = ReadFileOrEmpty(dir_.File("capture2.out.err"));
  EXPECT_TRUE(Has(out, "3 of 4 node(s) captured")) << out << err;
  EXPECT_TRUE(Has(out, absl::StrCat("FAILED gpu-node-4 (", NodeIp(4),
                                    ":7465): profd stopped or "
                                    "its connection broke during capture")))
      << out << err;
  std::string second_id;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "Fleet capture ")) {
      second_id = std::string(line.substr(14, line.find(':') - 14));
    }
  }
  ASSERT_FALSE(second_id.empty()) << out;
  ASSERT_TRUE(Stored(second_id, kNodes - 1));
  RunResult partial = profd::testing::Run(
      Profctl({"--target", absl::StrCat(NodeIp(1), ":7465"), "--json", "report", second_id}));
  ASSERT_EQ(partial.exit_code, 0) << partial.err;
  rapidjson::Document pd;
  pd.Parse(partial.out.c_str());
  ASSERT_FALSE(pd.HasParseError());
  EXPECT_EQ(pd["per_process"].Size(), 6u);  // the pods of nodes 1-3
}

TEST_F(FleetTest, OnlyUsersTheClusterAllowsCaptureAndEveryAttemptIsAudited) {
  for (int i = 1; i <= 2; ++i) StartNode(i);
  for (int i = 1; i <= 2; ++i) StartPods(i, "");
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& node : nodes_) {
          rapidjson::Document d = node->ProfctlJson({"agents"});
          if (!d.HasMember("agents") || d["agents"].Size() != 2) return false;
        }
        return true;
      },
      absl::Seconds(15)));
  // bob may view the namespace but not capture in it: every node refuses, saying who and why,
  // and nothing starts.
  WriteKubeconfig("bob-kubeconfig", kBobToken);
  RunResult bob = profd::testing::Run(
      Profctl({"capture", "--kubeconfig", dir_.File("bob-kubeconfig"), "--deployment", "llm", "-n",
               "serving", "--duration", "1s", "--lead", "500ms", "--node-timeout", "5s"}));
  EXPECT_EQ(bob.exit_code, 5) << bob.out << bob.err;  // no node captured (3 and 4: no profd)
  for (int i = 1; i <= 2; ++i) {
    EXPECT_TRUE(Has(bob.out, absl::StrCat("FAILED gpu-node-", i, " (", NodeIp(i), ":7465)")))
        << bob.out;
  }
  EXPECT_TRUE(Has(bob.out,
                  "bob@example.com may not create captures.profd.dev in namespace "
                  "serving"))
      << bob.out;
  for (const auto& node : nodes_) {
    EXPECT_TRUE(Has(node->log(), "\"user\":\"bob@example.com\"")) << node->log();
    EXPECT_TRUE(Has(node->log(), "\"result\":\"bob@example.com may not create")) << node->log();
  }

  // Without a token (a client certificate alone) a Kubernetes-authorizing profd starts nothing,
  // and says what to send.
  RunResult bare = profd::testing::Run(Profctl(
      {"--target", absl::StrCat(NodeIp(1), ":7465"), "capture", "--all", "--duration", "1s"}));
  EXPECT_NE(bare.exit_code, 0);
  EXPECT_TRUE(Has(bare.err, "carries no bearer token")) << bare.err;
  // The local control socket is root's and its group's: no Kubernetes user, still audited.
  RunResult local = nodes_[0]->Profctl({"capture", "--all", "--duration", "500ms"});
  EXPECT_EQ(local.exit_code, 0) << local.err;
  EXPECT_TRUE(Has(nodes_[0]->log(), "\"user\":\"(control socket)\"")) << nodes_[0]->log();
}

TEST_F(FleetTest, WorkloadsResolveThroughTheApiAndBadInputIsSaidClearly) {
  // No profd answers at the nodes' addresses: the Job's four pods resolve to four nodes, each
  // named as failed, nothing hangs.
  RunResult job =
      profd::testing::Run(Capture({"--job", "trainer", "-n", "training", "--duration", "1s",
                                   "--lead", "200ms", "--node-address", "{node_ip}:1"}));
  EXPECT_EQ(job.exit_code, 5) << job.out << job.err;
  for (int i = 1; i <= kNodes; ++i) {
    EXPECT_TRUE(Has(job.out, absl::StrCat("FAILED gpu-node-", i, " (", NodeIp(i), ":1)")))
        << job.out;
  }
  EXPECT_TRUE(Has(job.err, "4 pod(s) on 4 node(s)")) << job.err;

  RunResult missing = profd::testing::Run(Capture({"--deployment", "nope", "--duration", "1s"}));
  EXPECT_EQ(missing.exit_code, 4);
  EXPECT_TRUE(Has(missing.err, "no deployment nope in namespace serving")) << missing.err;

  RunResult none = profd::testing::Run(Capture({"-l", "app=nothing-here", "--duration", "1s"}));
  EXPECT_EQ(none.exit_code, 4);
  EXPECT_TRUE(Has(none.err, "no running pod of pods matching app=nothing-here")) << none.err;

  // A token the API refuses.
  std::string config = ReadFileOrEmpty(dir_.File("kubeconfig"));
  config.replace(config.find(kToken), strlen(kToken), "stolen");
  std::ofstream(dir_.File("bad-kubeconfig")) << config;
  RunResult refused =
      profd::testing::Run(Profctl({"capture", "--kubeconfig", dir_.File("bad-kubeconfig"), "-l",
                                   "app=llm", "--duration", "1s"}));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Has(refused.err, "answered GET /api/v1/namespaces/serving/pods")) << refused.err;
  EXPECT_TRUE(Has(refused.err, "401")) << refused.err;

  // Two workloads at once, and a workload with --pid, are usage errors.
  EXPECT_EQ(profd::testing::Run(Capture({"-l", "app=llm", "--job", "trainer"})).exit_code, 2);
  EXPECT_EQ(profd::testing::Run(Capture({"-l", "app=llm", "--pid", "1"})).exit_code, 2);
}

}  // namespace
}  // namespace profd::testing

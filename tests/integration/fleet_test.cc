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
#include "tests/integration/fleet_cluster.h"

namespace profd::testing {
namespace {

// The cluster: tests/integration/fleet_cluster.h.
class FleetTest : public FleetCluster {};

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
  ASSERT_TRUE(WaitFor([&] { return AllRegistered(); }, absl::Seconds(15)));
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

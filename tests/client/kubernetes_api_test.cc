// How profctl reads the Kubernetes side of a fleet capture without a cluster: kubeconfigs as
// kubectl writes them (YAML, inline or file credentials, paths relative to the file), the
// selectors of Deployments and Jobs as the API returns them (tests/fixtures/kubernetes/), the
// node address pattern, and fleet ids. The HTTP side is exercised against the API stand-in
// (tests/integration/fleet_test.cc).
#include "client/kubernetes_api.h"

#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/fleet_capture.h"
#include "common/capture_id.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profctl {
namespace {

using profd::testing::ReadFileOrEmpty;
using profd::testing::SourcePath;
using profd::testing::TempDir;

TEST(KubeconfigTest, ReadsKubectlsYamlWithFilesBesideIt) {
  TempDir dir;
  std::ofstream(dir.File("ca.crt")) << "-----BEGIN CERTIFICATE-----\nCA\n";
  std::string cert, key;
  absl::Base64Escape("-----BEGIN CERTIFICATE-----\nME\n", &cert);
  absl::Base64Escape("-----BEGIN PRIVATE KEY-----\nKEY\n", &key);
  std::ofstream(dir.File("config"))
      << "apiVersion: v1\n"
         "kind: Config\n"
         "clusters:\n"
         "- name: prod\n"
         "  cluster:\n"
         "    server: https://10.0.0.1:6443\n"
         "    certificate-authority: ca.crt\n"
         "- name: lab\n"
         "  cluster: {server: 'https://lab:6443', "
         "insecure-skip-tls-verify: true}\n"
         "contexts:\n"
         "- name: prod-admin\n"
         "  context: {cluster: prod, user: admin, namespace: serving}\n"
         "- name: lab\n"
         "  context:\n"
         "    cluster: lab\n"
         "    user: bot\n"
         "current-context: prod-admin\n"
         "users:\n"
         "- name: admin\n"
         "  user:\n"
         "    client-certificate-data: "
      << cert << "\n    client-key-data: " << key << "\n- name: bot\n  user:\n    token: abc.def\n";
  absl::StatusOr<KubeAccess> prod = LoadKubeAccess(dir.File("config"), "");
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(prod->server, "https://10.0.0.1:6443");
  EXPECT_EQ(prod->ca_pem, "-----BEGIN CERTIFICATE-----\nCA\n");
  EXPECT_EQ(prod->client_cert_pem, "-----BEGIN CERTIFICATE-----\nME\n");
  EXPECT_EQ(prod->client_key_pem, "-----BEGIN PRIVATE KEY-----\nKEY\n");
  EXPECT_EQ(prod->default_namespace, "serving");
  EXPECT_FALSE(prod->insecure_skip_tls_verify);

  absl::StatusOr<KubeAccess> lab = LoadKubeAccess(dir.File("config"), "lab");
  ASSERT_TRUE(lab.ok()) << lab.status();
  EXPECT_EQ(lab->token, "abc.def");
  EXPECT_TRUE(lab->insecure_skip_tls_verify);
  EXPECT_EQ(lab->default_namespace, "default");

  absl::StatusOr<KubeAccess> nope = LoadKubeAccess(dir.File("config"), "staging");
  EXPECT_EQ(nope.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(nope.status().message(), "no context 'staging'"));
}

TEST(KubeconfigTest, SaysWhatIsWrongWithABadOne) {
  TempDir dir;
  std::ofstream(dir.File("plugin")) << "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
                                       "contexts: [{name: k, context: {cluster: c, user: u}}]\n"
                                       "current-context: k\n"
                                       "users: [{name: u, user: {exec: {command: "
                                       "gke-gcloud-auth-plugin}}}]\n";
  absl::StatusOr<KubeAccess> plugin = LoadKubeAccess(dir.File("plugin"), "");
  EXPECT_TRUE(absl::StrContains(plugin.status().message(), "plugin (exec or auth-provider)"))
      << plugin.status();
  std::ofstream(dir.File("garbage")) << "clusters: [unclosed\n";
  EXPECT_TRUE(
      absl::StrContains(LoadKubeAccess(dir.File("garbage"), "").status().message(), "is not YAML"));
  EXPECT_TRUE(absl::StrContains(LoadKubeAccess(dir.File("absent"), "").status().message(),
                                "cannot read the kubeconfig"));
  std::ofstream(dir.File("json")) << R"({"clusters": [], "current-context": ""})";
  EXPECT_TRUE(absl::StrContains(LoadKubeAccess(dir.File("json"), "").status().message(),
                                "has no current-context"));
}

TEST(SelectorTest, DeploymentsAndJobsAsTheApiReturnsThem) {
  for (auto [file, want] :
       {std::pair{"deployment-serving-llm.json", "app=llm"},
        std::pair{"job-training-trainer.json",
                  "batch.kubernetes.io/controller-uid=dd6398cd-98ea-aabd-4a6e-9360d3d66dde"}}) {
    rapidjson::Document doc;
    doc.Parse(
        ReadFileOrEmpty(SourcePath(std::string("tests/fixtures/kubernetes/") + file)).c_str());
    ASSERT_FALSE(doc.HasParseError()) << file;
    absl::StatusOr<std::string> s = LabelSelectorText(doc["spec"]["selector"]);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, want) << file;
  }
  rapidjson::Document expr;
  expr.Parse(R"({"matchLabels": {"app": "llm"}, "matchExpressions": [
      {"key": "tier", "operator": "In", "values": ["a", "b"]},
      {"key": "canary", "operator": "DoesNotExist"}, {"key": "gpu", "operator": "Exists"},
      {"key": "zone", "operator": "NotIn", "values": ["x"]}]})");
  EXPECT_EQ(*LabelSelectorText(expr), "app=llm,tier in (a,b),!canary,gpu,zone notin (x)");
  rapidjson::Document empty;
  empty.Parse("{}");
  EXPECT_TRUE(absl::StrContains(LabelSelectorText(empty).status().message(), "every pod"));
}

TEST(FleetIdTest, NewIdsAreFleetIdsAndCaptureIdsAreNot) {
  const absl::Time now = absl::FromUnixSeconds(1764623700);  // 2025-12-01T21:15:00Z
  const std::string id = profd::NewFleetId(now);
  EXPECT_TRUE(absl::StartsWith(id, "20251201T211500Z-fleet-")) << id;
  absl::Time at;
  ASSERT_TRUE(profd::IsFleetId(id, &at));
  EXPECT_EQ(at, now);
  EXPECT_NE(profd::NewFleetId(now), id);
  EXPECT_FALSE(profd::IsFleetId(profd::NewCaptureId("node-1", now)));
  EXPECT_FALSE(profd::IsFleetId("20251201T211500Z-fleet-zzzzzzzz"));
  EXPECT_FALSE(profd::IsFleetId("../../etc/passwd"));
}

TEST(NodeAddressTest, PatternTakesTheNodesNameAndAddress) {
  EXPECT_EQ(ExpandNodePattern("{node_ip}:7465", "gpu-node-1", "10.0.0.5"), "10.0.0.5:7465");
  EXPECT_EQ(ExpandNodePattern("{node_name}.profd.svc:7465", "gpu-node-1", "10.0.0.5"),
            "gpu-node-1.profd.svc:7465");
  EXPECT_EQ(ExpandNodePattern("", "n", "1.2.3.4"), "");
}

}  // namespace
}  // namespace profctl

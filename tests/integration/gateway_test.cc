// The cluster gateway end to end (profctl gateway, client/gateway.h): the real gateway on the
// "laptop" of the fleet cluster (tests/integration/fleet_cluster.h: real profd nodes with replay
// agents in pods, the Kubernetes API stand-in, a shared store), asked over HTTP as a script and
// as a browser would: an authorized user's capture of one pod is stored under one fleet id with
// the pod's traces; a user the SubjectAccessReview refuses gets 403 and nothing is captured; no
// token or a bad one gets 401; every attempt is an audit line. Then headless Chromium opens the
// URL the Grafana dashboard's data link makes, through an authenticating proxy (its stand-in,
// tests/support/auth_proxy_stand_in.py), and the page starts and follows the capture to its
// report and trace links, which are fetched and checked against the store.
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "tests/integration/fleet_cluster.h"

namespace profd::testing {
namespace {

// The gateway's service account (users.json): may capture everywhere, for its proxied users.
constexpr char kGatewayToken[] = "gateway-token-7e4d";
constexpr char kPod[] = "llm-7f9c5d6b8-8mzrt";  // the first pod on node 2
// The authenticating proxy's address toward the gateway, the one --trusted_proxy names.
constexpr char kProxySource[] = "127.0.0.9";

struct HttpResult {
  int code = 0;
  std::string body;
};

class GatewayTest : public FleetCluster {
 protected:
  void StartCluster() {
    for (int i = 1; i <= 2; ++i) StartNode(i);
    for (int i = 1; i <= 2; ++i) StartPods(i, "");
    ASSERT_TRUE(WaitFor([&] { return AllRegistered(); }, absl::Seconds(15)));
    WriteKubeconfig("gateway-kubeconfig", kGatewayToken);
    std::ofstream(dir_.File("gateway-token")) << kGatewayToken << "\n";
    gateway_port_ = 17480 + getpid() % 1000;
    std::vector<std::string> args = {"gateway",
                                     "--listen",
                                     absl::StrCat("0.0.0.0:", gateway_port_),
                                     "--kubernetes_authorization",
                                     absl::StrCat("https://", ApiAddress()),
                                     "--kubernetes_token_file",
                                     dir_.File("gateway-token"),
                                     "--kubernetes_ca_file",
                                     pki_->File("ca.pem"),
                                     "--kubeconfig",
                                     dir_.File("gateway-kubeconfig"),
                                     "--trusted_proxy",
                                     kProxySource,
                                     "--work-dir",
                                     dir_.File("gateway"),
                                     "--lead",
                                     "500ms"};
    gateway_ = std::make_unique<Subprocess>(Profctl(args), std::map<std::string, std::string>{},
                                            dir_.File("gateway.log"));
    ASSERT_TRUE(WaitFor([&] { return Has(GatewayLog(), "listening on"); }, absl::Seconds(10)))
        << GatewayLog();
  }

  std::string GatewayLog() const { return ReadFileOrEmpty(dir_.File("gateway.log.err")); }
  std::string Gateway() const { return absl::StrCat("http://127.0.0.1:", gateway_port_); }

  // curl on the laptop: the status code and the body.
  HttpResult Curl(const std::string& url, std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {FindProgram("curl"),   "-s", "-o",
                                     dir_.File("curl.out"), "-w", "%{http_code}",
                                     "--max-time",          "30"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(url);
    std::filesystem::remove(dir_.File("curl.out"));
    RunResult r = profd::testing::Run(OnLaptop(argv));
    HttpResult out;
    out.code = std::atoi(r.out.c_str());
    out.body = ReadFileOrEmpty(dir_.File("curl.out"));
    return out;
  }
  HttpResult Post(const std::string& body, const std::string& token) {
    std::vector<std::string> args = {"-X",     "POST", "-H", "Content-Type: application/json",
                                     "--data", body};
    if (!token.empty()) args.insert(args.end(), {"-H", "Authorization: Bearer " + token});
    return Curl(Gateway() + "/api/v1/captures", args);
  }

  // Polls the capture until it is done or failed; its last state.
  bool Finished(const std::string& id, rapidjson::Document* doc) {
    return WaitFor(
        [&] {
          HttpResult r = Curl(absl::StrCat(Gateway(), "/api/v1/captures/", id));
          doc->Parse(r.body.c_str());
          if (doc->HasParseError() || !doc->HasMember("state")) return false;
          const std::string state = (*doc)["state"].GetString();
          return state == "done" || state == "failed";
        },
        absl::Seconds(60));
  }

  // The stored capture ids of a fleet id, as profctl lists them.
  std::set<std::string> StoredCaptures(const std::string& fleet_id) {
    RunResult r = profd::testing::Run({BuildPath("client/profctl"), "--target", nodes_[0]->target(),
                                       "--json", "list", "--fleet", fleet_id});
    rapidjson::Document d;
    d.Parse(r.out.c_str());
    std::set<std::string> ids;
    if (d.HasParseError() || !d.HasMember("traces")) return ids;
    for (const auto& t : d["traces"].GetArray()) ids.insert(t["capture_id"].GetString());
    return ids;
  }

  int gateway_port_ = 0;
  std::unique_ptr<Subprocess> gateway_;
};

TEST_F(GatewayTest, AuthorizedUsersCaptureAPodOthersAreRefusedAndAllAreAudited) {
  StartCluster();
  const std::string body = absl::StrCat("{\"namespace\":\"serving\",\"pod\":\"", kPod,
                                        "\",\"duration\":\"1s\",\"reason\":\"INC-4712\"}");
  // No credentials, and a token the API server does not know: 401, nothing asked of a node.
  HttpResult none = Post(body, "");
  EXPECT_EQ(none.code, 401) << none.body;
  EXPECT_TRUE(Has(none.body, "no credentials")) << none.body;
  HttpResult stolen = Post(body, "stolen");
  EXPECT_EQ(stolen.code, 401) << stolen.body;
  EXPECT_TRUE(Has(stolen.body, "does not accept this token")) << stolen.body;
  // A proxy's header from an address the gateway does not trust is not believed.
  HttpResult forged = Curl(Gateway() + "/api/v1/captures",
                           {"-X", "POST", "-H", "Content-Type: application/json", "-H",
                            "X-Forwarded-User: alice@example.com", "--data", body});
  EXPECT_EQ(forged.code, 401) << forged.body;
  // bob may capture only in training: 403 with who and where, nothing captured.
  HttpResult bob = Post(body, kBobToken);
  EXPECT_EQ(bob.code, 403) << bob.body;
  EXPECT_TRUE(Has(bob.body,
                  "bob@example.com may not create captures.profd.dev in namespace "
                  "serving"))
      << bob.body;
  // A form post (no JSON) is refused before anything else.
  EXPECT_EQ(Curl(Gateway() + "/api/v1/captures", {"-X", "POST", "--data", "a=b", "-H",
                                                  "Authorization: Bearer " + std::string(kToken)})
                .code,
            415);
  // An unknown pod: 404 after authorization.
  HttpResult missing = Post(absl::StrReplaceAll(body, {{kPod, "nope"}}), kToken);
  EXPECT_EQ(missing.code, 404) << missing.body;

  // alice (group sre) captures the pod: one fleet id, the pod's node only.
  HttpResult alice = Post(body, kToken);
  ASSERT_EQ(alice.code, 202) << alice.body << GatewayLog();
  rapidjson::Document started;
  started.Parse(alice.body.c_str());
  ASSERT_FALSE(started.HasParseError()) << alice.body;
  const std::string id = started["id"].GetString();
  rapidjson::Document c;
  ASSERT_TRUE(Finished(id, &c)) << GatewayLog();
  ASSERT_STREQ(c["state"].GetString(), "done") << c["error"].GetString() << GatewayLog();
  EXPECT_STREQ(c["user"].GetString(), "alice@example.com");
  ASSERT_EQ(c["nodes"].Size(), 1u);
  EXPECT_STREQ(c["nodes"][0]["node"].GetString(), "gpu-node-2");
  const std::string capture_id = c["nodes"][0]["capture_id"].GetString();
  EXPECT_EQ(StoredCaptures(id), std::set<std::string>{capture_id});
  ASSERT_EQ(c["traces"].Size(), 1u);  // one process in the pod
  HttpResult trace = Curl(absl::StrCat(Gateway(), "/", c["traces"][0]["url"].GetString()));
  EXPECT_EQ(trace.code, 200);
  EXPECT_EQ(trace.body.size(), c["traces"][0]["bytes"].GetUint64());
  HttpResult report = Curl(absl::StrCat(Gateway(), "/", c["report"].GetString()));
  EXPECT_EQ(report.code, 200);
  EXPECT_TRUE(Has(report.body, "<html")) << report.body.substr(0, 200);
  // The user's own token reached the node, whose profd checked it and audited alice.
  EXPECT_TRUE(Has(nodes_[1]->log(), "\"user\":\"alice@example.com\"")) << nodes_[1]->log();
  EXPECT_FALSE(Has(nodes_[0]->log(), "INC-4712")) << "only the pod's node is asked";

  // One audit line per attempt: who, which pod, why, what came of it.
  const std::string log = GatewayLog();
  EXPECT_TRUE(Has(log, absl::StrCat("audit] {\"event\":\"capture\",\"via\":\"gateway\",\"user\":"
                                    "\"alice@example.com\",\"groups\":[\"sre\",\"system:"
                                    "authenticated\"],\"authenticated_by\":\"token\"")))
      << log;
  EXPECT_TRUE(Has(log, absl::StrCat("\"pods\":[\"serving/", kPod,
                                    "\"],\"duration\":\"1s\",\"reason\":\"INC-4712\",\"fleet_id\":"
                                    "\"",
                                    id, "\",\"result\":\"started\"")))
      << log;
  EXPECT_TRUE(Has(log, "\"user\":\"bob@example.com\"")) << log;
  EXPECT_TRUE(Has(log, "\"result\":\"bob@example.com may not create")) << log;
  EXPECT_TRUE(Has(log, "\"result\":\"no credentials")) << log;
}

std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    if (std::string path = FindProgram(name); !path.empty()) return path;
  }
  return "";
}

// The dashboard's data link, as Grafana makes it for a series of (namespace, pod).
std::string DataLink(const std::string& gateway, const std::string& name_space,
                     const std::string& pod) {
  rapidjson::Document dashboard;
  dashboard.Parse(ReadFileOrEmpty(SourcePath("deploy/grafana/profd-dashboard.json")).c_str());
  for (const auto& panel : dashboard["panels"].GetArray()) {
    if (std::string(panel["title"].GetString()) != "GPU utilization per pod") continue;
    const std::string url = panel["fieldConfig"]["defaults"]["links"][0]["url"].GetString();
    return absl::StrReplaceAll(url, {{"${gateway}", gateway},
                                     {"${__field.labels.namespace:percentencode}", name_space},
                                     {"${__field.labels.pod:percentencode}", pod}});
  }
  return "";
}

TEST_F(GatewayTest, TheGrafanaDataLinkOpensAPageThatCapturesThePodInHeadlessChromium) {
  const std::string chromium = FindChromium();
  if (chromium.empty() || FindProgram("curl").empty()) {
    GTEST_SKIP() << "needs chromium and curl (scripts/setup.sh)";
  }
  StartCluster();
  // alice signs in at the proxy; the gateway believes its headers from kProxySource only.
  Subprocess proxy(
      OnLaptop({python_, SourcePath("tests/support/auth_proxy_stand_in.py"), "--upstream",
                absl::StrCat("127.0.0.1:", gateway_port_), "--source", kProxySource, "--user",
                "alice@example.com", "--groups", "sre,system:authenticated"}),
      {}, dir_.File("proxy.log"));
  ASSERT_TRUE(WaitFor([&] { return Has(ReadFileOrEmpty(dir_.File("proxy.log")), "port "); },
                      absl::Seconds(10)));
  const std::string proxy_url =
      absl::StrCat("http://127.0.0.1:", absl::StripAsciiWhitespace(absl::StripPrefix(
                                            ReadFileOrEmpty(dir_.File("proxy.log")), "port ")));
  const std::string link = DataLink(proxy_url, "serving", kPod);
  ASSERT_TRUE(Has(link, "/capture?namespace=serving&pod=")) << link;

  // GET alone starts nothing.
  EXPECT_EQ(Curl(link).code, 200);
  EXPECT_FALSE(Has(GatewayLog(), "audit]")) << GatewayLog();

  // The browser runs the page's script: virtual time runs its timers without waiting, and stops
  // while a request is out, so the page polls until the capture is done.
  RunResult page = profd::testing::Run(
      OnLaptop({chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--user-data-dir=" + dir_.File("chromium"), "--virtual-time-budget=100000000",
                "--dump-dom", link}),
      {}, absl::Seconds(180));
  ASSERT_EQ(page.exit_code, 0) << page.err;
  const std::string& dom = page.out;
  ASSERT_TRUE(Has(dom, "data-state=\"done\"")) << dom << GatewayLog();
  EXPECT_TRUE(Has(dom, "gpu-node-2")) << dom;
  EXPECT_TRUE(Has(GatewayLog(),
                  "\"user\":\"alice@example.com\",\"groups\":[\"sre\",\"system:"
                  "authenticated\"],\"authenticated_by\":\"proxy\""))
      << GatewayLog();

  // The links the page shows: the report and the trace, the stored capture's.
  auto href = [&dom](const std::string& marker) {
    const size_t at = dom.find(marker);
    if (at == std::string::npos) return std::string();
    const size_t start = dom.find("href=\"", at) + 6;
    return dom.substr(start, dom.find('"', start) - start);
  };
  const std::string report = href("id=\"report-link\"");
  const std::string trace = href("class=\"trace-link\"");
  ASSERT_FALSE(report.empty()) << dom;
  ASSERT_FALSE(trace.empty()) << dom;
  const std::string fleet_id = report.substr(strlen("captures/"), report.find("/report") - 9);
  const std::set<std::string> stored = StoredCaptures(fleet_id);
  ASSERT_EQ(stored.size(), 1u) << fleet_id;
  EXPECT_TRUE(Has(trace, *stored.begin())) << trace;
  HttpResult html = Curl(proxy_url + "/" + report);
  EXPECT_EQ(html.code, 200);
  EXPECT_TRUE(Has(html.body, "<html")) << html.body.substr(0, 200);
  HttpResult file = Curl(proxy_url + "/" + trace);
  EXPECT_EQ(file.code, 200);
  // Byte for byte the stored trace, fetched with profctl.
  RunResult got = profd::testing::Run({BuildPath("client/profctl"), "--target", nodes_[0]->target(),
                                       "get", *stored.begin(), "-o", dir_.File("got")});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const std::string name = trace.substr(trace.rfind('/') + 1);
  EXPECT_EQ(file.body, ReadFileOrEmpty(dir_.File("got/" + name)));
}

}  // namespace
}  // namespace profd::testing

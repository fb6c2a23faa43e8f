// Alertmanager -> capture with the real parts: a real profd with a replay agent that launches
// kernels for a few seconds and then stops, a real Prometheus (Debian's) scraping profd with the
// shipped rules (deploy/prometheus/profd-capture-alerts.yml, windows shortened), a real
// Alertmanager (Debian's prometheus-alertmanager) routing with the shipped
// deploy/prometheus/alertmanager.yml (intervals shortened) to profd's webhook with the bearer
// token. The launch-rate rule fires, the alert reaches profd through Alertmanager, and a capture
// of that process is stored with the alert in its manifest, listed by `profctl list --alert`;
// another firing in the group within the cooldown starts nothing; a bad token is refused and
// counted. And over mutual TLS instead of a token: Alertmanager's tls_config client certificate
// is let in, curl without one, with one of another CA, or in plain HTTP is refused and counted.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"
#include "tests/metrics/prometheus_server.h"
#include "tests/support/profd_process.h"
#include "tests/support/test_pki.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kAlertmanager[] = "/usr/bin/prometheus-alertmanager";
constexpr char kAlert[] = "ProfdKernelLaunchRateCollapsed";

// Alertmanager in a temp folder with the shipped routing, no cluster, intervals of a second.
class AlertmanagerServer {
 public:
  AlertmanagerServer(const std::string& webhook_address, const std::string& token_file) {
    std::string config = ReadFileOrEmpty(SourcePath("deploy/prometheus/alertmanager.yml"));
    MustReplace(config, "group_interval: 1m", "group_interval: 1s");
    MustReplace(config, "http://localhost:9478/alerts",
                absl::StrCat("http://", webhook_address, "/alerts"));
    MustReplace(config, "/etc/alertmanager/profd-alert-token", token_file);
    std::ofstream(dir_.File("alertmanager.yml")) << config;
    RunResult check = Run({"/usr/bin/amtool", "check-config", dir_.File("alertmanager.yml")});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    address_ = absl::StrCat("127.0.0.1:", FreePort());
    process_ = std::make_unique<Subprocess>(
        std::vector<std::string>{kAlertmanager, "--config.file=" + dir_.File("alertmanager.yml"),
                                 "--storage.path=" + dir_.File("data"),
                                 "--web.listen-address=" + address_,
                                 "--cluster.listen-address="},  // no gossip port
        std::map<std::string, std::string>{}, dir_.File("alertmanager.log"));
    EXPECT_TRUE(
        WaitFor([&] { return HttpGet("http://" + address_ + "/-/ready").ok(); }, absl::Seconds(20)))
        << log();
  }
  ~AlertmanagerServer() { process_->Kill(); }

  const std::string& address() const { return address_; }
  std::string log() const {
    return ReadFileOrEmpty(dir_.File("alertmanager.log")) +
           ReadFileOrEmpty(dir_.File("alertmanager.log.err"));
  }

 private:
  TempDir dir_;
  std::string address_;
  std::unique_ptr<Subprocess> process_;
};

// The captures `profctl list --alert NAME` shows.
std::vector<std::string> CapturesOf(const ProfdProcess& profd, const std::string& alert) {
  rapidjson::Document listed = profd.ProfctlJson({"list", "--alert", alert});
  std::vector<std::string> ids;
  if (!listed.IsObject() || !listed.HasMember("traces")) return ids;
  for (const auto& t : listed["traces"].GetArray()) ids.push_back(t["capture_id"].GetString());
  return ids;
}

TEST(AlertCaptureTest, AFiringRuleCapturesItsProcessOnceWithTheAlertInTheManifest) {
  if (access(kAlertmanager, X_OK) != 0) {
    GTEST_SKIP() << kAlertmanager << " is missing: scripts/setup.sh installs it";
  }
  TempDir dir;
  const std::string token = "test-token-5f0c2a9e7b1d4c38";
  const std::string token_file = dir.File("alert-token");
  std::ofstream(token_file) << token << "\n";
  chmod(token_file.c_str(), 0600);
  ProfdProcess profd({"--nvml_library=/nonexistent/libnvidia-ml.so.1",
                      "--alert_address=127.0.0.1:0", "--alert_token_file=" + token_file,
                      "--alert_cooldown=10m"});
  profd.Start();
  rapidjson::Document status = profd.ProfctlJson({"status"});
  const std::string webhook = status["alert_address"].GetString();
  const std::string metrics_url =
      absl::StrCat("http://", status["metrics_address"].GetString(), "/metrics");

  // A bad token is refused and counted, and starts nothing.
  HttpResult refused = HttpPost(absl::StrCat("http://", webhook, "/alerts"), "{}",
                                {"Authorization: Bearer not-the-token"});
  EXPECT_EQ(refused.status, 401) << refused.error;
  EXPECT_EQ(SeriesValue(*HttpGet(metrics_url), "profd_alert_webhook_requests_total",
                        "result=\"unauthorized\""),
            1);

  AlertmanagerServer alertmanager(webhook, token_file);
  PrometheusServer prometheus({status["metrics_address"].GetString(),
                               alertmanager.address(),
                               {{"profd-capture-alerts.yml", "[2m]", "[4s]"},
                                {"profd-capture-alerts.yml", "[30m]", "[30s]"},
                                {"profd-capture-alerts.yml", "for: 2m", "for: 0s"},
                                {"profd-capture-alerts.yml", "profd_capture_duration: \"5s\"",
                                 "profd_capture_duration: \"500ms\""}}});

  // Launching until Prometheus has seen it launch, then none: the rule's 4 s rate falls to 0
  // against its 30 s average.
  const std::string stop_launching = dir.File("stop-launching");
  auto agent = StartReplayAgent(profd.agent_socket(), "--launch-until=" + stop_launching);
  const std::string launch_rate =
      absl::StrCat("rate(profd_process_kernel_launches_total{pid=\"", agent->pid(), "\"}[4s]) > 0");
  ASSERT_TRUE(WaitFor([&] { return prometheus.Count(launch_rate) == 1; }, absl::Seconds(20)))
      << prometheus.log();
  std::ofstream(stop_launching).close();

  std::vector<std::string> ids;
  ASSERT_TRUE(WaitFor(
      [&] {
        ids = CapturesOf(profd, kAlert);
        return !ids.empty();
      },
      absl::Seconds(30)))
      << "no capture of the alert; alerts in Prometheus: " << prometheus.Count("ALERTS")
      << "\nprofd:\n"
      << profd.log() << "\nalertmanager:\n"
      << alertmanager.log() << "\nprometheus:\n"
      << prometheus.log();
  ASSERT_EQ(ids.size(), 1u);

  // The manifest holds the alert, and the capture is of the process the alert names.
  rapidjson::Document shown = profd.ProfctlJson({"show", ids[0]});
  const rapidjson::Value& manifest = shown["manifest"];
  ASSERT_TRUE(manifest.HasMember("alert")) << profd.Profctl({"show", ids[0]}).out;
  const rapidjson::Value& alert = manifest["alert"];
  const std::string pid = std::to_string(agent->pid());
  EXPECT_EQ(std::string(alert["name"].GetString()), kAlert);
  EXPECT_EQ(std::string(alert["labels"]["pid"].GetString()), pid);
  EXPECT_THAT(alert["generator_url"].GetString(), HasSubstr("/graph?g0.expr="));
  EXPECT_THAT(alert["group_key"].GetString(), HasSubstr(absl::StrCat("pid=\"", pid, "\"")));
  EXPECT_GT(std::stoll(alert["starts_at_unix_ns"].GetString()), 0);
  ASSERT_EQ(manifest["processes"].Size(), 1u);
  EXPECT_EQ(manifest["processes"][0]["pid"].GetUint(), static_cast<unsigned>(agent->pid()));
  EXPECT_EQ(std::string(manifest["phase"].GetString()), "CAPTURE_PHASE_DONE");
  // And people see it.
  RunResult show = profd.Profctl({"show", ids[0]});
  EXPECT_THAT(show.out, HasSubstr(absl::StrCat("alert      ", kAlert, ", firing since ")));
  EXPECT_THAT(show.out, HasSubstr(absl::StrCat("pid=", pid)));
  EXPECT_THAT(profd.Profctl({"list"}).out, HasSubstr(kAlert));
  EXPECT_TRUE(CapturesOf(profd, "SomeOtherAlert").empty());

  // Another alert of the same group (same alertname, node and process; one more label), sent to
  // Alertmanager as Prometheus would: Alertmanager notifies the group again, and profd, within the
  // cooldown, starts nothing.
  const std::string body =
      absl::StrCat(R"([{"labels": {"alertname": ")", kAlert, R"(", "hostname": ")",
                   alert["labels"]["hostname"].GetString(), R"(", "pid": ")", pid,
                   R"(", "replica": "b"}, "annotations": {"profd_capture_duration": "500ms"},
      "generatorURL": "http://test/graph"}])");
  HttpResult posted =
      HttpPost(absl::StrCat("http://", alertmanager.address(), "/api/v2/alerts"), body, {});
  ASSERT_EQ(posted.status, 200) << posted.error << posted.body;
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string metrics = HttpGet(metrics_url).value_or("");
        return SeriesValue(metrics, "profd_alert_decisions_total", "decision=\"cooled_down\"") +
                   SeriesValue(metrics, "profd_alert_decisions_total",
                               "decision=\"deduplicated\"") >=
               1;
      },
      absl::Seconds(20)))
      << profd.log() << alertmanager.log();
  EXPECT_THAT(profd.log(),
              HasSubstr("decision=cooled_down alertname=\"ProfdKernelLaunchRateCollapsed\""));
  EXPECT_EQ(CapturesOf(profd, kAlert).size(), 1u);
  const std::string metrics = *HttpGet(metrics_url);
  EXPECT_EQ(SeriesValue(metrics, "profd_alert_decisions_total", "decision=\"started\""), 1);
  EXPECT_EQ(SeriesValue(metrics, "profd_alert_webhook_requests_total", "result=\"unauthorized\""),
            1);
}

// Alertmanager sending to profd's webhook over HTTPS with its client certificate, and no token
// (http_config.tls_config): profd requires a certificate its --alert_tls_client_ca signed.
TEST(AlertCaptureTest, MutualTlsLetsAlertmanagerInAndNobodyElse) {
  if (access(kAlertmanager, X_OK) != 0 || FindProgram("openssl").empty() ||
      FindProgram("curl").empty()) {
    GTEST_SKIP() << "needs prometheus-alertmanager, openssl and curl: scripts/setup.sh";
  }
  TestPki pki(FindProgram("openssl"));
  ASSERT_TRUE(pki.Ca("ca") &&
              pki.Leaf("listener", "ca", "profd alerts",
                       "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n") &&
              pki.Leaf("alertmanager", "ca", "alertmanager", "extendedKeyUsage=clientAuth\n") &&
              pki.Ca("other") &&
              pki.Leaf("intruder", "other", "alertmanager", "extendedKeyUsage=clientAuth\n"))
      << pki.error();
  ProfdProcess profd({"--nvml_library=/nonexistent/libnvidia-ml.so.1",
                      "--alert_address=127.0.0.1:0", "--alert_tls_cert=" + pki.File("listener.pem"),
                      "--alert_tls_key=" + pki.File("listener.key"),
                      "--alert_tls_client_ca=" + pki.File("ca.pem"), "--alert_cooldown=10m"});
  profd.Start();
  rapidjson::Document status = profd.ProfctlJson({"status"});
  const std::string url = absl::StrCat("https://", status["alert_address"].GetString(), "/alerts");
  const std::string metrics_url =
      absl::StrCat("http://", status["metrics_address"].GetString(), "/metrics");

  // No certificate, one of another CA, plain HTTP: refused in the handshake, counted.
  const std::vector<std::string> curl = {FindProgram("curl"), "-sS", "--max-time", "5", "--cacert",
                                         pki.File("ca.pem"),  "-d",  "{}"};
  auto post = [&](std::vector<std::string> extra, const std::string& to) {
    std::vector<std::string> argv = curl;
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(to);
    return profd::testing::Run(argv);
  };
  EXPECT_NE(post({}, url).exit_code, 0);
  EXPECT_NE(
      post({"--cert", pki.File("intruder.pem"), "--key", pki.File("intruder.key")}, url).exit_code,
      0);
  EXPECT_NE(
      post({}, absl::StrCat("http://", status["alert_address"].GetString(), "/alerts")).exit_code,
      0);
  EXPECT_TRUE(WaitFor(
      [&] {
        return SeriesValue(HttpGet(metrics_url).value_or(""), "profd_alert_webhook_requests_total",
                           "result=\"tls_refused\"") == 3;
      },
      absl::Seconds(5)))
      << *HttpGet(metrics_url);
  // The right certificate and no token: through TLS to the handler, which needs no token.
  RunResult ours = post({"--cert", pki.File("alertmanager.pem"), "--key",
                         pki.File("alertmanager.key"), "-w", "%{http_code}", "-o", "/dev/null"},
                        url);
  EXPECT_EQ(ours.out, "400") << ours.err;  // "{}" is no notification: the handler said so

  // Alertmanager itself, with its tls_config.
  auto agent = StartReplayAgent(profd.agent_socket());
  ASSERT_TRUE(WaitFor([&] { return Registered(profd, agent->pid()); }, absl::Seconds(10)));
  TempDir dir;
  std::ofstream(dir.File("alertmanager.yml")) << absl::StrCat(
      "route:\n  receiver: profd\n  group_by: [alertname, pid]\n  group_wait: 0s\n"
      "  group_interval: 1s\n  repeat_interval: 4h\nreceivers:\n  - name: profd\n"
      "    webhook_configs:\n      - url: ",
      url, "\n        send_resolved: false\n        http_config:\n          tls_config:\n",
      "            ca_file: ", pki.File("ca.pem"),
      "\n            cert_file: ", pki.File("alertmanager.pem"),
      "\n            key_file: ", pki.File("alertmanager.key"), "\n");
  RunResult check =
      profd::testing::Run({"/usr/bin/amtool", "check-config", dir.File("alertmanager.yml")});
  ASSERT_EQ(check.exit_code, 0) << check.out << check.err;
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  Subprocess alertmanager({kAlertmanager, "--config.file=" + dir.File("alertmanager.yml"),
                           "--storage.path=" + dir.File("data"), "--web.listen-address=" + address,
                           "--cluster.listen-address="},
                          {}, dir.File("alertmanager.log"));
  ASSERT_TRUE(
      WaitFor([&] { return HttpGet("http://" + address + "/-/ready").ok(); }, absl::Seconds(20)));
  const std::string body = absl::StrCat(
      R"([{"labels": {"alertname": "ProfdGpuBusyCollapsed", "hostname": ")",
      status["hostname"].GetString(), R"(", "pid": ")", agent->pid(),
      R"("}, "annotations": {"profd_capture_duration": "500ms"}, "generatorURL": "http://t/g"}])");
  HttpResult posted = HttpPost(absl::StrCat("http://", address, "/api/v2/alerts"), body, {});
  ASSERT_EQ(posted.status, 200) << posted.error << posted.body;
  EXPECT_TRUE(WaitFor([&] { return CapturesOf(profd, "ProfdGpuBusyCollapsed").size() == 1; },
                      absl::Seconds(30)))
      << profd.log() << ReadFileOrEmpty(dir.File("alertmanager.log.err"));
  const std::string metrics = *HttpGet(metrics_url);
  EXPECT_EQ(SeriesValue(metrics, "profd_alert_webhook_requests_total", "result=\"accepted\""), 1);
  EXPECT_EQ(SeriesValue(metrics, "profd_alert_webhook_requests_total", "result=\"tls_refused\""),
            3);
}

}  // namespace
}  // namespace profd::testing

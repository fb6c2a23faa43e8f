#include "tests/metrics/prometheus_server.h"

#include <cmath>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"

namespace profd::testing {

namespace {

// The rule files prometheus-static.yml names.
constexpr const char* kRuleFiles[] = {"profd-rules.yml", "profd-capture-alerts.yml"};

}  // namespace

void MustReplace(std::string& text, const std::string& from, const std::string& to) {
  ASSERT_NE(text.find(from), std::string::npos) << "expected '" << from << "' in:\n" << text;
  text = absl::StrReplaceAll(text, {{from, to}});
}

PrometheusServer::PrometheusServer(const Options& options) {
  std::string config = ReadFileOrEmpty(SourcePath("deploy/prometheus/prometheus-static.yml"));
  MustReplace(config, "scrape_interval: 15s", "scrape_interval: 1s");
  MustReplace(config, "evaluation_interval: 15s", "evaluation_interval: 1s");
  MustReplace(config, "localhost:9477", options.metrics_address);
  if (!options.alertmanager_address.empty()) {
    MustReplace(config, "localhost:9093", options.alertmanager_address);
  }
  std::ofstream(dir_.File("prometheus.yml")) << config;
  for (const char* file : kRuleFiles) {
    std::string rules = ReadFileOrEmpty(SourcePath(absl::StrCat("deploy/prometheus/", file)));
    for (const Options::Edit& edit : options.rule_edits) {
      if (edit.file == file) MustReplace(rules, edit.from, edit.to);
    }
    std::ofstream(dir_.File(file)) << rules;
  }
  RunResult check = Run({"/usr/bin/promtool", "check", "config", dir_.File("prometheus.yml")});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

  address_ = absl::StrCat("127.0.0.1:", FreePort());
  process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{
          "/usr/bin/prometheus", "--config.file=" + dir_.File("prometheus.yml"),
          "--storage.tsdb.path=" + dir_.File("data"), "--web.listen-address=" + address_},
      std::map<std::string, std::string>{}, dir_.File("prometheus.log"));
  bool ready =
      WaitFor([&] { return HttpGet("http://" + address_ + "/-/ready").ok(); }, absl::Seconds(30));
  EXPECT_TRUE(ready) << log();
}

PrometheusServer::~PrometheusServer() { process_->Kill(); }

std::string PrometheusServer::log() const {
  return ReadFileOrEmpty(dir_.File("prometheus.log")) +
         ReadFileOrEmpty(dir_.File("prometheus.log.err"));
}

int PrometheusServer::Count(const std::string& expr) const {
  absl::StatusOr<rapidjson::Document> r = PrometheusQuery(address_, expr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  return static_cast<int>((*r)["data"]["result"].GetArray().Size());
}

double PrometheusServer::Value(const std::string& expr) const {
  absl::StatusOr<rapidjson::Document> r = PrometheusQuery(address_, expr);
  if (!r.ok() || (*r)["data"]["result"].GetArray().Empty()) return std::nan("");
  return std::stod((*r)["data"]["result"][0]["value"][1].GetString());
}

}  // namespace profd::testing

// /metrics of a real profd with a real agent connected: without NVML (what every host without a
// driver sees), with NVML (a fake libnvidia-ml standing in for the driver on CI), and with a bad
// --metrics_address.
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"
#include "tests/metrics/slow_client.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::string MetricsUrl(const ProfdProcess& profd) {
  rapidjson::Document status = profd.ProfctlJson({"status"});
  std::string address = status["metrics_address"].GetString();
  EXPECT_FALSE(address.empty()) << "profctl status shows no metrics_address";
  return "http://" + address + "/metrics";
}

std::string Scrape(const std::string& url) {
  absl::StatusOr<std::string> body = HttpGet(url);
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? *body : "";
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

void ExpectPromtoolAccepts(const std::string& text) {
  TempDir dir;
  std::ofstream(dir.File("metrics.txt")) << text;
  RunResult r =
      profd::testing::Run({"/bin/sh", "-c", "promtool check metrics < " + dir.File("metrics.txt")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool lint findings";
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  // A fixed `hostname` label; profd takes it from NODE_NAME as on Kubernetes.
  void SetUp() override { setenv("NODE_NAME", "node-test", 1); }
};

TEST_F(MetricsEndpointTest, WithoutNvmlProfdRunsSaysSoOnceAndExportsZero) {
  ProfdProcess profd(
      {"--nvml_library=/nonexistent/libnvidia-ml.so.1", "--nvml_sample_interval=100ms"});
  profd.Start();
  auto host = StartAgentHost(
      profd.agent_socket(), {},
      {{"POD_NAME", "llm-7f9c"}, {"POD_NAMESPACE", "serving"}, {"CONTAINER_NAME", "server"}});
  const std::string url = MetricsUrl(profd);
  const std::string pid = absl::StrCat("pid=\"", host->pid(), "\"");
  std::string text;
  ASSERT_TRUE(WaitFor([&] { return Count(text = Scrape(url), pid) > 0; }, absl::Seconds(5)))
      << text << profd.log();

  EXPECT_THAT(text, HasSubstr("\nprofd_nvml_available{hostname=\"node-test\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_agents_connected{hostname=\"node-test\"} 1\n"));
  EXPECT_THAT(text, ContainsRegex("\nprofd_process_info\\{comm=\"agent_host\",container=\"server\","
                                  "hostname=\"node-test\",namespace=\"serving\",pid=\"[0-9]+\","
                                  "pod=\"llm-7f9c\",agent_version=\"[^\"]+\",injected=\"true\","
                                  "launch_counting=\"off\"\\} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("profd_gpu_")));
  ExpectPromtoolAccepts(text);

  rapidjson::Document status = profd.ProfctlJson({"status"});
  EXPECT_FALSE(status["nvml_available"].GetBool());
  EXPECT_THAT(status["nvml_error"].GetString(),
              HasSubstr("cannot load /nonexistent/libnvidia-ml.so.1"));

  // A capture of a process without CUDA fails; /metrics counts it.
  RunResult capture =
      profd.Profctl({"capture", "--pid", std::to_string(host->pid()), "--duration", "200ms"});
  EXPECT_NE(capture.exit_code, 0) << capture.out << capture.err;
  EXPECT_TRUE(WaitFor(
      [&] {
        text = Scrape(url);
        return Count(text,
                     "\nprofd_captures_total{hostname=\"node-test\",result=\"failed\"} 1\n") == 1;
      },
      absl::Seconds(10)))
      << capture.out << capture.err << text;
  EXPECT_THAT(text,
              HasSubstr("\nprofd_capture_duration_seconds_count{hostname=\"node-test\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_captures_running{hostname=\"node-test\"} 0\n"));

  // Ten sample intervals later the log still says it once: no retry loop filling the log.
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Count(profd.log(), "GPU metrics are off"), 1u) << profd.log();
  EXPECT_THAT(profd.log(), HasSubstr("profd_nvml_available is 0"));
  EXPECT_TRUE(host->Running());
}

TEST_F(MetricsEndpointTest, NvmlGpusAndProcessesAreExportedAndProcessesThatExitVanish) {
  TempDir dir;
  const std::string pids_file = dir.File("nvml_pids");
  std::ofstream(pids_file).flush();
  setenv("FAKE_NVML_PIDS_FILE", pids_file.c_str(), 1);
  ProfdProcess profd({"--nvml_library=" + BuildPath("tests/metrics/libfake_nvml.so"),
                      "--nvml_sample_interval=100ms"});
  profd.Start();
  auto host = StartAgentHost(
      profd.agent_socket(), {},
      {{"POD_NAME", "llm-7f9c"}, {"POD_NAMESPACE", "serving"}, {"CONTAINER_NAME", "server"}});
  std::ofstream(pids_file) << host->pid() << " 1\n";
  const std::string url = MetricsUrl(profd);
  const std::string process = absl::StrCat(
      "comm=\"agent_host\",container=\"server\",hostname=\"node-test\",namespace=\"serving\",",
      "pid=\"", host->pid(), "\",pod=\"llm-7f9c\"");
  const std::string on_gpu1 = process + ",gpu=\"1\"";
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = Scrape(url);
        return Count(text, "profd_process_sm_utilization_ratio{" + on_gpu1) > 0 &&
               Count(text, "profd_process_info{" + process) > 0;
      },
      absl::Seconds(5)))
      << text << profd.log();

  const std::string gpu0 =
      "gpu=\"0\",hostname=\"node-test\",model=\"Fake GPU (profd test)\","
      "uuid=\"GPU-00000000-0000-0000-0000-000000000000\"";
  const std::string gpu1 =
      "gpu=\"1\",hostname=\"node-test\",model=\"Fake GPU (profd test)\","
      "uuid=\"GPU-11111111-1111-1111-1111-111111111111\"";
  EXPECT_THAT(text, HasSubstr("\nprofd_nvml_available{hostname=\"node-test\"} 1\n"));
  // The mean of the fake's samples since the sampler's previous read: GPU 0 is a steady 37%
  // (memory 12%); GPU 1 a periodic load, whose 100 ms windows read anything (gpu_sampler_test
  // checks them).
  EXPECT_THAT(text, HasSubstr("\nprofd_gpu_utilization_ratio{" + gpu0 + "} 0.37\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_gpu_utilization_ratio{" + gpu1 + "} "));
  EXPECT_THAT(text,
              HasSubstr("\nprofd_gpu_memory_bandwidth_utilization_ratio{" + gpu0 + "} 0.12\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_gpu_busy_seconds_total{" + gpu1 + "} "));
  EXPECT_THAT(text, HasSubstr("\nprofd_nvml_errors_total{hostname=\"node-test\","
                              "call=\"nvmlDeviceGetSamples\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_gpu_memory_used_bytes{" + gpu0 + "} 10737418240\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_gpu_memory_total_bytes{" + gpu0 + "} 85899345920\n"));
  EXPECT_THAT(text,
              HasSubstr("\nprofd_process_gpu_memory_used_bytes{" + on_gpu1 + "} 1073741824\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_process_sm_utilization_ratio{" + on_gpu1 + "} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("\nprofd_nvml_errors_total{hostname=\"node-test\","
                              "call=\"nvmlDeviceGetUtilizationRates\"} 0\n"));
  ExpectPromtoolAccepts(text);
  rapidjson::Document status = profd.ProfctlJson({"status"});
  EXPECT_TRUE(status["nvml_available"].GetBool());
  EXPECT_STREQ(status["nvml_error"].GetString(), "");
  EXPECT_THAT(profd.log(), HasSubstr("NVML loaded from"));

  // The process exits: the driver forgets it and the agent disconnects; all its series go.
  host->Kill();
  std::ofstream(pids_file).flush();
  const std::string pid = absl::StrCat("pid=\"", host->pid(), "\"");
  EXPECT_TRUE(WaitFor([&] { return Count(text = Scrape(url), pid) == 0; }, absl::Seconds(5)))
      << text;
  EXPECT_THAT(text, HasSubstr("profd_gpu_utilization_ratio{" + gpu1));
}

TEST_F(MetricsEndpointTest, BadMetricsAddressStopsProfdWithAReason) {
  TempDir dir;
  auto profd = [&](const std::string& address) {
    return profd::testing::Run(
        {BuildPath("daemon/profd"), "--runtime_dir=" + dir.path(), "--grpc_address=none",
         "--capture_dir=" + dir.File("captures"), "--spool_dir=" + dir.File("spool"),
         "--store=file://" + dir.File("store"), "--nvml_library=/nonexistent",
         "--metrics_address=" + address},
        {}, absl::Seconds(20));
  };
  RunResult malformed = profd("localhost");
  EXPECT_EQ(malformed.exit_code, 1);
  EXPECT_THAT(malformed.err, HasSubstr("--metrics_address=localhost is not host:port"));

  // A port someone else listens on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  RunResult in_use = profd(taken);
  close(fd);
  EXPECT_EQ(in_use.exit_code, 1);
  EXPECT_THAT(in_use.err, HasSubstr("cannot serve /metrics on " + taken));
  EXPECT_THAT(in_use.err, HasSubstr("Is the port in use"));
}

// Issue 12: two unfinished HTTP requests from the network kept profd's /metrics (civetweb, two
// worker threads) from answering for ~28 s, and renewing them kept it down. Here 200 unfinished
// requests and 20 clients that never read their answers, renewed as fast as profd closes them,
// while Prometheus scrapes: no scrape waits out a slow client's deadline (5 s for a request, 10 s
// for an answer; a loaded sanitizer build has taken over a second for a plain scrape).
TEST_F(MetricsEndpointTest, SlowClientsCannotStarveAScrape) {
  ProfdProcess profd({"--nvml_library=/nonexistent/libnvidia-ml.so.1"});
  profd.Start();
  const std::string url = MetricsUrl(profd);
  const std::string address =
      url.substr(strlen("http://"), url.size() - strlen("http://") - strlen("/metrics"));
  SlowClients attack(address, /*unfinished=*/200, /*non_readers=*/20);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int i = 0; i < 10; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> body = HttpGet(url);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(body.ok()) << body.status() << " (scrape " << i << ")";
    EXPECT_THAT(*body, HasSubstr("\nprofd_agents_connected{hostname=\"node-test\"} 0\n"));
    EXPECT_LT(seconds, 3.0) << "scrape " << i << " waited behind slow clients";
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // The control plane is unaffected too.
  EXPECT_EQ(profd.Profctl({"status"}).exit_code, 0);
}

}  // namespace
}  // namespace profd::testing

// profd's own footprint with many agents (design target: 64 agents, 1 s metrics -> RSS <= 64 MB,
// CPU <= 2 % of one core). Starts a real profd (heartbeats and NVML sampling every second, NVML
// answered by tests/metrics/libfake_nvml.so when it is built), connects N agent processes, scrapes
// /metrics every second the way Prometheus does, and after a warm-up reads profd's RSS (VmRSS
// every second, VmHWM) and CPU (utime + stime from /proc/<pid>/stat over the window).
//
// Agents (--agents_kind):
//   wire    (default) N child processes (this binary again, in agent mode) that speak the real
//           agent channel: Hello with --devices devices, then a Heartbeat with every device's
//           counters each heartbeat interval (what a real agent on an 8-GPU host sends).
//   replay  N real agents (tests/integration/replay_agent: the real agent library, event batches
//           recorded on an H200 instead of CUPTI). No devices (no CUDA here), but captures work;
//           with --capture, `profctl capture --all --duration 5s` runs in the middle of the
//           window and RSS is reported before, during and after it.
//
// Load (--clients=N): through the window, rounds of N concurrent profctl processes (`--json
// agents` and `--json status` in turn; a round starts when the last one ended) next to the
// agents and the scrapes. Every `agents` answer must list every agent (a lost registration
// fails the run); each call's wall time from spawn to exit gives p50/p99.
//
//   profd_footprint_bench [--agents=64] [--devices=8] [--agents_kind=wire|replay] [--capture]
//                         [--clients=0] [--warmup_s=5] [--window_s=30] [--repeat=3]
//                         [--no_fake_nvml]
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "profd/v1/agent_channel.pb.h"
#include "profd/v1/agent_frame.h"
#include "tests/metrics/http_get.h"
#include "tests/support/profd_process.h"

namespace profd {
namespace {

using testing::BuildPath;
using testing::ProfdProcess;
using testing::Subprocess;
using testing::TempDir;

struct Options {
  int agents = 64;
  int devices = 8;
  std::string agents_kind = "wire";
  bool capture = false;
  int clients = 0;
  int warmup_s = 5;
  int window_s = 30;
  int repeat = 3;
  bool fake_nvml = true;
};

// ---- agent mode: one child process, one agent connection ----------------------------------

bool SendFrame(int fd, const v1::AgentMessage& message) {
  std::string frame(v1::kAgentFrameHeaderBytes, '\0');
  message.AppendToString(&frame);
  v1::EncodeFrameHeader(static_cast<uint32_t>(frame.size() - v1::kAgentFrameHeaderBytes),
                        reinterpret_cast<unsigned char*>(frame.data()));
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Runs until profd closes the connection or the parent dies. Counters grow like a busy server's.
int AgentMain(const std::string& socket_path, int index, int devices) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "agent %d: cannot connect to %s: %s\n", index, socket_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  v1::AgentMessage hello_message;
  v1::Hello* hello = hello_message.mutable_hello();
  hello->set_agent_version("0.1.0");
  hello->set_pid(static_cast<uint32_t>(getpid()));
  hello->set_pod_name(absl::StrCat("llm-inference-7f9c6d-", index));
  hello->set_pod_namespace("serving");
  hello->set_container_name("server");
  hello->set_injected(true);
  for (int g = 0; g < devices; ++g) {
    v1::DeviceInfo* d = hello->add_devices();
    d->set_ordinal(static_cast<uint32_t>(g));
    d->set_uuid(absl::StrCat("GPU-", g, "0000000-1111-2222-3333-444444444444"));
    d->set_name("NVIDIA H100 80GB HBM3");
    d->set_global_memory_bytes(80ull << 30);
  }
  if (!SendFrame(fd, hello_message)) return 1;

  int interval_ms = 1000;
  std::string in;
  uint64_t launches = 0;
  auto next = std::chrono::steady_clock::now();
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next) {
      launches += 20000;
      v1::AgentMessage message;
      v1::Heartbeat* hb = message.mutable_heartbeat();
      hb->set_realtime_ns(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
      hb->set_launch_sample_every(10);
      for (int g = 0; g < devices; ++g) {
        v1::DeviceCounters* c = hb->add_devices();
        c->set_device(static_cast<uint32_t>(g));
        c->set_kernel_launches(launches + static_cast<uint64_t>(g));
        c->set_graph_launches(launches / 100);
        c->set_memory_allocated_bytes((30ull << 30) + launches);
        c->set_memory_peak_bytes((35ull << 30) + launches);
      }
      if (!SendFrame(fd, message)) return 0;
      next += std::chrono::milliseconds(interval_ms);
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    int wait_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
    if (poll(&p, 1, wait_ms) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return 0;  // profd closed the connection
    in.append(buf, static_cast<size_t>(n));
    while (in.size() >= v1::kAgentFrameHeaderBytes) {
      uint32_t length = v1::DecodeFrameHeader(reinterpret_cast<const unsigned char*>(in.data()));
      if (in.size() < v1::kAgentFrameHeaderBytes + length) break;
      v1::DaemonMessage m;
      m.ParseFromArray(in.data() + v1::kAgentFrameHeaderBytes, static_cast<int>(length));
      if (m.has_hello_ack() && m.hello_ack().heartbeat_interval_ms() > 0) {
        interval_ms = static_cast<int>(m.hello_ack().heartbeat_interval_ms());
      }
      in.erase(0, v1::kAgentFrameHeaderBytes + length);
    }
  }
}

// ---- /proc readings ----------------------------------------------------------------------

// A "Key:   123 kB" field of /proc/<pid>/status or smaps_rollup, in kB (-1 when absent).
long ProcKb(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    long kb = -1;
    std::istringstream(line.substr(key.size() + 1)) >> kb;
    return kb;
  }
  return -1;
}

// utime + stime of the whole process, in clock ticks.
long CpuTicks(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // comm may hold spaces: the fields after it start past the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  // f[0] is field 3 (state); utime and stime are fields 14 and 15.
  if (f.size() < 13) return -1;
  return std::stol(f[11]) + std::stol(f[12]);
}

double LoadAverage1() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
}

// ---- one run --------------------------------------------------------------------------------

struct RunFigures {
  double rss_peak_mb = 0;  // highest VmRSS sampled in the window
  double rss_end_mb = 0;
  double hwm_mb = 0;  // VmHWM at the end (includes start-up and warm-up)
  double rss_before_capture_mb = 0, rss_capture_peak_mb = 0, rss_after_capture_mb = 0;
  double cpu_percent = 0;  // of one core, over the window
  double scrape_ms_median = 0;
  size_t series = 0;  // samples in the last scrape: says the agents' counters are all there
  int agents_seen = 0;
  long threads = 0;
  std::string smaps;  // smaps_rollup at the end, the lines that say what the RSS is
  double load_before = 0, load_after = 0;
  bool capture_ok = true;
  // --clients
  std::vector<double> client_ms;  // every call's wall time, spawn to exit
  int client_failures = 0;        // exit code not 0, or not JSON
  int fewest_agents_listed = -1;  // smallest `agents` answer (every agent: nothing lost)
};

double Mb(long kb) { return kb / 1024.0; }

std::vector<std::unique_ptr<Subprocess>> StartAgents(const Options& o, const ProfdProcess& profd) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int i = 0; i < o.agents; ++i) {
    if (o.agents_kind == "replay") {
      agents.push_back(std::make_unique<Subprocess>(
          std::vector<std::string>{
              BuildPath("tests/integration/replay_agent"),
              testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
          std::map<std::string, std::string>{{"PROFD_AGENT_SOCKET", profd.agent_socket()}}));
    } else {
      agents.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
          self, "--agent_child=" + profd.agent_socket(), absl::StrCat("--agent_index=", i),
          absl::StrCat("--devices=", o.devices)}));
    }
  }
  return agents;
}

int CountAgents(const ProfdProcess& profd) {
  rapidjson::Document d = profd.ProfctlJson({"agents"});
  return d.HasMember("agents") ? static_cast<int>(d["agents"].Size()) : 0;
}

RunFigures RunOnce(const Options& o) {
  RunFigures r;
  TempDir work;
  std::filesystem::create_directories(work.File("captures"));
  std::vector<std::string> flags = {"--heartbeat_interval=1s", "--nvml_sample_interval=1s",
                                    "--capture_dir=" + work.File("captures"),
                                    "--store=file://" + work.File("store"),
                                    "--spool_dir=" + work.File("spool")};
  const std::string fake_nvml = BuildPath("tests/metrics/libfake_nvml.so");
  const std::string pids_file = work.File("nvml_pids");
  if (o.fake_nvml && std::filesystem::exists(fake_nvml)) {
    setenv("FAKE_NVML_PIDS_FILE", pids_file.c_str(), 1);  // profd inherits it
    flags.push_back("--nvml_library=" + fake_nvml);
  } else {
    flags.push_back("--nvml_library=/nonexistent/libnvidia-ml.so.1");
  }
  ProfdProcess profd(flags);
  profd.Start();
  const pid_t pid = profd.pid();

  auto agents = StartAgents(o, profd);
  {
    std::ofstream pids(pids_file);  // every agent on one of the fake GPUs, as NVML would list it
    for (size_t i = 0; i < agents.size(); ++i) pids << agents[i]->pid() << " " << i % 2 << "\n";
  }
  testing::WaitFor([&] { return CountAgents(profd) >= o.agents; }, absl::Seconds(30));

  rapidjson::Document status = profd.ProfctlJson({"status"});
  const std::string url =
      absl::StrCat("http://", status["metrics_address"].GetString(), "/metrics");
  std::atomic<bool> stop{false};
  std::vector<double> scrape_ms;
  std::atomic<size_t> series{0};
  std::thread scraper([&] {
    auto next = std::chrono::steady_clock::now();
    while (!stop.load()) {
      auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::string> body = testing::HttpGet(url);
      scrape_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      if (body.ok()) {
        size_t samples = 0;
        for (absl::string_view line : absl::StrSplit(*body, '\n')) {
          if (!line.empty() && line[0] != '#') ++samples;
        }
        series = samples;
      } else {
        std::fprintf(stderr, "scrape of %s failed: %s\n", url.c_str(),
                     std::string(body.status().message()).c_str());
      }
      next += std::chrono::seconds(1);
      std::this_thread::sleep_until(next);
    }
  });

  std::this_thread::sleep_for(std::chrono::seconds(o.warmup_s));
  r.agents_seen = CountAgents(profd);
  r.load_before = LoadAverage1();
  const std::string status_file = absl::StrCat("/proc/", pid, "/status");
  const long ticks0 = CpuTicks(pid);
  const auto t0 = std::chrono::steady_clock::now();

  // The capture runs from second 5 of the window on, in the background; RSS is sampled meanwhile.
  std::atomic<bool> capturing{false}, captured{false};
  std::thread capture;
  if (o.capture) {
    capture = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      capturing = true;
      testing::RunResult c = profd.Profctl({"capture", "--all", "--duration", "5s"});
      capturing = false;
      captured = true;
      if (c.exit_code != 0) {
        r.capture_ok = false;
        std::fprintf(stderr, "profctl capture --all failed (exit %d):\n%s%s\n", c.exit_code,
                     c.out.c_str(), c.err.c_str());
      }
    });
  }
  std::atomic<bool> stop_clients{false};
  std::thread clients;
  if (o.clients > 0) {
    clients = std::thread([&] {
      while (!stop_clients.load()) {
        std::vector<double> ms(static_cast<size_t>(o.clients));
        std::vector<int> listed(static_cast<size_t>(o.clients), -1);
        std::vector<int> failed(static_cast<size_t>(o.clients), 0);
        std::vector<std::thread> calls;
        for (int c = 0; c < o.clients; ++c) {
          calls.emplace_back([&, c] {
            const bool agents_call = c % 2 == 0;
            auto start = std::chrono::steady_clock::now();
            testing::RunResult run = profd.Profctl({"--json", agents_call ? "agents" : "status"});
            ms[c] =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
            rapidjson::Document d;
            d.Parse(run.out.c_str());
            if (run.exit_code != 0 || d.HasParseError() || !d.IsObject()) {
              failed[c] = 1;
            } else if (agents_call && d.HasMember("agents") && d["agents"].IsArray()) {
              listed[c] = static_cast<int>(d["agents"].Size());
            }
          });
        }
        for (std::thread& t : calls) t.join();
        for (int c = 0; c < o.clients; ++c) {
          r.client_ms.push_back(ms[c]);
          r.client_failures += failed[c];
          if (listed[c] >= 0 && (r.fewest_agents_listed < 0 || listed[c] < r.fewest_agents_listed))
            r.fewest_agents_listed = listed[c];
        }
      }
    });
  }
  for (int s = 0; s < o.window_s; ++s) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double rss = Mb(ProcKb(status_file, "VmRSS"));
    r.rss_peak_mb = std::max(r.rss_peak_mb, rss);
    if (o.capture && !capturing && !captured) r.rss_before_capture_mb = rss;
    if (capturing) r.rss_capture_peak_mb = std::max(r.rss_capture_peak_mb, rss);
  }
  const long ticks1 = CpuTicks(pid);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (capture.joinable()) capture.join();
  stop_clients = true;
  if (clients.joinable()) clients.join();
  r.cpu_percent = 100.0 * (ticks1 - ticks0) / sysconf(_SC_CLK_TCK) / wall_s;
  r.rss_end_mb = Mb(ProcKb(status_file, "VmRSS"));
  if (o.capture) r.rss_after_capture_mb = r.rss_end_mb;
  r.hwm_mb = Mb(ProcKb(status_file, "VmHWM"));
  r.threads = ProcKb(status_file, "Threads");
  r.load_after = LoadAverage1();
  const std::string rollup = absl::StrCat("/proc/", pid, "/smaps_rollup");
  for (const char* key : {"Rss", "Anonymous", "Private_Dirty", "Shared_Clean", "Private_Clean"}) {
    absl::StrAppend(&r.smaps, key, " ", static_cast<long>(Mb(ProcKb(rollup, key)) + 0.5), " MB  ");
  }
  stop = true;
  scraper.join();
  std::sort(scrape_ms.begin(), scrape_ms.end());
  if (!scrape_ms.empty()) r.scrape_ms_median = scrape_ms[scrape_ms.size() / 2];
  r.series = series.load();
  agents.clear();
  profd.Stop();
  return r;
}

void Summary(const char* what, std::vector<double> v, const char* unit) {
  std::sort(v.begin(), v.end());
  std::printf("%-26s median %7.2f %s   min %7.2f   max %7.2f   (n=%zu)\n", what, v[v.size() / 2],
              unit, v.front(), v.back(), v.size());
}

int Main(int argc, char** argv) {
  Options o;
  std::string agent_child;
  int agent_index = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      std::string prefix = std::string(name) + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--agents"))
      o.agents = std::atoi(v);
    else if (const char* v = value("--devices"))
      o.devices = std::atoi(v);
    else if (const char* v = value("--agents_kind"))
      o.agents_kind = v;
    else if (const char* v = value("--warmup_s"))
      o.warmup_s = std::atoi(v);
    else if (const char* v = value("--window_s"))
      o.window_s = std::atoi(v);
    else if (const char* v = value("--repeat"))
      o.repeat = std::atoi(v);
    else if (const char* v = value("--agent_child"))
      agent_child = v;
    else if (const char* v = value("--agent_index"))
      agent_index = std::atoi(v);
    else if (const char* v = value("--clients"))
      o.clients = std::atoi(v);
    else if (arg == "--capture")
      o.capture = true;
    else if (arg == "--no_fake_nvml")
      o.fake_nvml = false;
    else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of %s)\n", argv[i],
                   __FILE__);
      return 2;
    }
  }
  if (!agent_child.empty()) return AgentMain(agent_child, agent_index, o.devices);
  if (o.capture && o.agents_kind != "replay") {
    std::fprintf(stderr, "--capture needs --agents_kind=replay (wire agents cannot capture)\n");
    return 2;
  }
  if (o.capture && o.window_s < 15) o.window_s = 15;

  std::printf(
      "profd footprint: %d %s agents%s, heartbeats and NVML samples every 1 s, /metrics "
      "scraped every 1 s; warm-up %d s, window %d s, %d run(s); %ld cores\n",
      o.agents, o.agents_kind.c_str(),
      o.agents_kind == "wire" ? absl::StrCat(" x ", o.devices, " devices").c_str() : "", o.warmup_s,
      o.window_s, o.repeat, sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<double> peak, end, hwm, cpu, before, during, after, p50, p99;
  for (int run = 0; run < o.repeat; ++run) {
    RunFigures r = RunOnce(o);
    std::printf(
        "run %d: agents %d, RSS peak %.1f MB, end %.1f MB, VmHWM %.1f MB, CPU %.2f %% of a "
        "core, threads %ld, scrape median %.1f ms (%zu series), load %.2f -> %.2f\n",
        run + 1, r.agents_seen, r.rss_peak_mb, r.rss_end_mb, r.hwm_mb, r.cpu_percent, r.threads,
        r.scrape_ms_median, r.series, r.load_before, r.load_after);
    if (o.capture) {
      std::printf(
          "       capture --all 5s%s: RSS before %.1f MB, during (peak) %.1f MB, after "
          "%.1f MB\n",
          r.capture_ok ? "" : " (FAILED)", r.rss_before_capture_mb, r.rss_capture_peak_mb,
          r.rss_after_capture_mb);
    }
    if (o.clients > 0) {
      std::vector<double> v = r.client_ms;
      std::sort(v.begin(), v.end());
      auto at = [&](double q) {
        return v.empty() ? 0.0 : v[static_cast<size_t>(q * (v.size() - 1))];
      };
      std::printf(
          "       %zu profctl calls in rounds of %d: p50 %.0f ms, p99 %.0f ms, max %.0f ms; "
          "%d failed; fewest agents listed %d of %d%s\n",
          v.size(), o.clients, at(0.5), at(0.99), v.empty() ? 0.0 : v.back(), r.client_failures,
          r.fewest_agents_listed, o.agents,
          r.fewest_agents_listed == o.agents && r.client_failures == 0 ? "" : "  LOST OR FAILED");
      p50.push_back(at(0.5));
      p99.push_back(at(0.99));
    }
    std::printf("       smaps_rollup at the end: %s\n", r.smaps.c_str());
    std::fflush(stdout);
    peak.push_back(r.rss_peak_mb);
    end.push_back(r.rss_end_mb);
    hwm.push_back(r.hwm_mb);
    cpu.push_back(r.cpu_percent);
    before.push_back(r.rss_before_capture_mb);
    during.push_back(r.rss_capture_peak_mb);
    after.push_back(r.rss_after_capture_mb);
  }
  Summary("RSS peak in window", peak, "MB");
  Summary("RSS at the end", end, "MB");
  Summary("VmHWM", hwm, "MB");
  Summary("CPU (% of one core)", cpu, "% ");
  if (o.capture) {
    Summary("RSS before capture", before, "MB");
    Summary("RSS during capture (peak)", during, "MB");
    Summary("RSS after capture", after, "MB");
  }
  if (o.clients > 0) {
    Summary("profctl call p50", p50, "ms");
    Summary("profctl call p99", p99, "ms");
  }
  std::printf("target (design.md §5): RSS <= 64 MB, CPU <= 2 %% of a core\n");
  return 0;
}

}  // namespace
}  // namespace profd

int main(int argc, char** argv) { return profd::Main(argc, argv); }

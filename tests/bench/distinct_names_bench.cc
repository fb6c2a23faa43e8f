// profd's memory against the number of distinct names it is sent, and `profctl report`'s time and
// memory on a trace of millions of them (docs/RELIABILITY.md, "Distinct names"):
//
//  agent    a real profd and an agent (the agent channel's real framing from this process,
//           tests/support/raw_agent.h) that names every kernel differently: N distinct names
//           (630 k fill the 64 MiB of names profd 0.1 let one process send), one kernel each,
//           batches of 4,096. profd's peak RSS during the capture (VmRSS every 20 ms, VmHWM), its
//           RSS once the capture is done, and its CPU time for the capture.
//  kineto   the same profd capturing, through Kineto's daemon protocol, fake_pytorch (a stand-in
//           PyTorch process, tests/integration/fake_pytorch.cc, root only) whose trace is one the
//           bench generates: M kernels of M distinct names (~210 bytes of JSON each, as a Kineto
//           trace writes them). profd's peak RSS, RSS after, CPU time.
//  report   `profctl report` of that trace file: wall time and peak RSS (/usr/bin/time).
//
// Medians and min-max over --repeat runs, a fresh profd each run.
//
//   distinct_names_bench [--names=70000,300000,630000] [--kineto_names=2000000] [--repeat=3]
//                        [--parts=agent,kineto,report]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/fixtures.h"
#include "tests/support/profd_process.h"
#include "tests/support/raw_agent.h"
#include "tests/support/subprocess.h"

namespace profd::testing {
namespace {

constexpr int kNamesPerBatch = 4096;

struct Measure {
  double peak_mib = 0;      // max of VmRSS sampled and VmHWM
  double after_mib = 0;     // VmRSS 1 s after the capture returned
  double baseline_mib = 0;  // VmRSS before the capture
  double cpu_s = 0;         // profd's CPU time during the capture
  double wall_s = 0;        // the capture command, start to end
  std::string outcome;      // the capture's phase, and why when it did not finish
};

// Samples profd's RSS until stopped.
class PeakSampler {
 public:
  explicit PeakSampler(pid_t pid)
      : thread_([this, pid] {
          while (!stop_) {
            peak_ = std::max(peak_.load(), ProcessMemoryMiB(pid, "VmRSS"));
            usleep(20000);
          }
        }) {}
  double Stop() {
    stop_ = true;
    thread_.join();
    return peak_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<double> peak_{0};
  std::thread thread_;
};

std::string Outcome(const RunResult& r) {
  rapidjson::Document d;
  d.Parse(r.out.c_str());
  if (!d.IsObject() || !d.HasMember("phase")) return "exit " + std::to_string(r.exit_code);
  std::string out = d["phase"].GetString();
  if (d.HasMember("message") && d["message"].GetStringLength() > 0) {
    out += std::string(": ") + d["message"].GetString();
  }
  return out;
}

std::unique_ptr<ProfdProcess> StartProfd(const TempDir& dir) {
  auto profd = std::make_unique<ProfdProcess>(std::vector<std::string>{
      "--capture_dir=" + dir.File("captures"), "--store=file://" + dir.File("store"),
      "--spool_dir=" + dir.File("spool"), "--max_capture_duration=600s"});
  profd->Start();
  return profd;
}

Measure AgentCapture(int names) {
  TempDir dir;
  std::unique_ptr<ProfdProcess> owned = StartProfd(dir);
  ProfdProcess& profd = *owned;
  RawAgent agent(profd.agent_socket());
  if (!agent.Register(RawAgent::DefaultHello("bench"))) {
    std::fprintf(stderr, "profd did not accept the agent\n%s\n", profd.log().c_str());
    std::exit(1);
  }
  usleep(500000);
  Measure run;
  run.baseline_mib = ProcessMemoryMiB(profd.pid(), "VmRSS");
  const double cpu_before = ProcessCpuSeconds(profd.pid());
  PeakSampler sampler(profd.pid());
  const absl::Time start = absl::Now();
  RunResult capture;
  std::thread capturing([&] {
    capture = testing::Run({BuildPath("client/profctl"), "--target", profd.target(), "--json",
                            "capture", "--pid", std::to_string(getpid()), "--duration", "600s"},
                           {}, absl::Hours(1));
  });
  const std::string id = agent.AwaitStartCapture(absl::Seconds(10));
  if (id.empty()) {
    capturing.join();
    std::fprintf(stderr, "no StartCapture: %s\n%s\n", capture.err.c_str(), profd.log().c_str());
    std::exit(1);
  }
  agent.SendMessage(Status(id, v1::CAPTURE_STATE_STARTED));
  const uint64_t t0 = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  for (int first = 0; first < names; first += kNamesPerBatch) {
    const int n = std::min(kNamesPerBatch, names - first);
    v1::AgentMessage m;
    v1::EventBatch* b = m.mutable_events();
    b->set_capture_id(id);
    for (int i = 0; i < n; ++i) {
      const uint32_t name = static_cast<uint32_t>(first + i + 1);
      v1::StringDef* d = b->add_strings();
      d->set_id(name);
      // 23 bytes, as short as real kernel names get: the most names per MiB of string table.
      d->set_value(absl::StrCat("distinct_kernel_", absl::Dec(name, absl::kZeroPad7)));
      v1::Kernel* k = b->add_kernels();
      const uint64_t t = t0 + 2000ull * name;
      k->set_start_ns(t);
      k->set_end_ns(t + 1000);
      k->set_stream(7);
      k->set_correlation(name);
      k->set_name_id(name);
      k->set_grid_x(1);
      k->set_grid_y(1);
      k->set_grid_z(1);
      k->set_block_x(128);
      k->set_block_y(1);
      k->set_block_z(1);
    }
    // Past its string budget the process's capture ends, and profd closes a connection that
    // goes on sending capture-sized frames: the rest is not sent.
    if (!agent.SendMessage(m, absl::Seconds(120))) break;
  }
  v1::AgentMessage done = Status(id, v1::CAPTURE_STATE_FINISHED);
  done.mutable_capture_status()->set_events(static_cast<uint64_t>(names));
  agent.SendMessage(done, absl::Seconds(120));
  capturing.join();
  run.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  run.peak_mib = std::max(sampler.Stop(), ProcessMemoryMiB(profd.pid(), "VmHWM"));
  run.cpu_s = ProcessCpuSeconds(profd.pid()) - cpu_before;
  usleep(1000000);
  run.after_mib = ProcessMemoryMiB(profd.pid(), "VmRSS");
  run.outcome = Outcome(capture);
  return run;
}

// A Kineto trace of `names` kernels, each named differently, as torch.profiler writes them.
void GenerateKinetoTrace(const std::string& path, int names) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fputs(
      "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA "
      "H200\", \"totalGlobalMem\": 150109880320, \"computeMajor\": 9, \"computeMinor\": 0, "
      "\"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048, \"regsPerBlock\": "
      "65536, \"warpSize\": 32, \"sharedMemPerBlock\": 49152, \"numSms\": 132}],\n"
      "  \"baseTimeNanoseconds\": 1700000000000000000,\n  \"traceEvents\": [\n",
      f);
  for (int i = 0; i < names; ++i) {
    std::fprintf(f,
                 "%s  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"void "
                 "distinct_kernel<%07d>(float*, int)\", \"pid\": 0, \"tid\": 7, \"ts\": %d.%03d, "
                 "\"dur\": 1.500, \"args\": {\"External id\": %d, \"device\": 0, \"stream\": 7, "
                 "\"correlation\": %d, \"grid\": [1, 1, 1], \"block\": [128, 1, 1]}}",
                 i ? ",\n" : "", i, 1000 + 2 * i, i % 1000, i + 1, i + 1);
  }
  std::fputs("\n  ],\n  \"traceName\": \"distinct_names_bench\"\n}\n", f);
  std::fclose(f);
}

Measure KinetoCapture(const std::string& trace, uint64_t trace_bytes) {
  TempDir dir;
  std::unique_ptr<ProfdProcess> owned = StartProfd(dir);
  ProfdProcess& profd = *owned;
  const std::string socket_dir = profd.runtime_dir() + "/kineto";
  Subprocess pytorch({BuildPath("tests/integration/fake_pytorch"), trace, "--tmp-mib",
                      std::to_string((trace_bytes >> 20) + 64)},
                     {{"KINETO_IPC_SOCKET_DIR", socket_dir}}, dir.File("fake_pytorch.out"));
  const bool polling = WaitFor(
      [&] {
        rapidjson::Document agents = profd.ProfctlJson({"agents"});
        for (const auto& a : agents["agents"].GetArray()) {
          if (a["pid"].GetInt() == pytorch.pid() && a.HasMember("kineto")) return true;
        }
        return false;
      },
      absl::Seconds(10));
  if (!polling) {
    std::fprintf(stderr, "fake_pytorch is not polling profd (root?)\n%s\n",
                 ReadFileOrEmpty(dir.File("fake_pytorch.out.err")).c_str());
    std::exit(1);
  }
  usleep(500000);
  Measure run;
  run.baseline_mib = ProcessMemoryMiB(profd.pid(), "VmRSS");
  const double cpu_before = ProcessCpuSeconds(profd.pid());
  PeakSampler sampler(profd.pid());
  const absl::Time start = absl::Now();
  RunResult capture =
      testing::Run({BuildPath("client/profctl"), "--target", profd.target(), "--json", "capture",
                    "--pid", std::to_string(pytorch.pid()), "--duration", "1s"},
                   {}, absl::Hours(1));
  run.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  run.peak_mib = std::max(sampler.Stop(), ProcessMemoryMiB(profd.pid(), "VmHWM"));
  run.cpu_s = ProcessCpuSeconds(profd.pid()) - cpu_before;
  usleep(1000000);
  run.after_mib = ProcessMemoryMiB(profd.pid(), "VmRSS");
  run.outcome = Outcome(capture);
  return run;
}

// profctl report of the file, timed by /usr/bin/time: {wall s, peak RSS MiB}.
Measure Report(const std::string& trace) {
  RunResult r =
      testing::Run({"/usr/bin/time", "-f", "TIME %e %M %U %S", BuildPath("client/profctl"),
                    "--target", "unix:/nonexistent/profd.sock", "report", trace},
                   {}, absl::Hours(1));
  Measure run;
  const size_t at = r.err.rfind("TIME ");
  double kib = 0, user = 0, sys = 0;
  if (at != std::string::npos) {
    std::vector<std::string> f = absl::StrSplit(r.err.substr(at + 5), ' ');
    if (f.size() >= 4) {
      (void)absl::SimpleAtod(f[0], &run.wall_s);
      (void)absl::SimpleAtod(f[1], &kib);
      (void)absl::SimpleAtod(f[2], &user);
      (void)absl::SimpleAtod(absl::StripAsciiWhitespace(f[3]), &sys);
    }
  }
  run.peak_mib = kib / 1024;
  run.cpu_s = user + sys;
  run.outcome = r.exit_code == 0 ? "exit 0" : "exit " + std::to_string(r.exit_code);
  return run;
}

struct Spread {
  double median, min, max;
};
Spread Of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

void Print(const std::string& what, const std::vector<Measure>& runs) {
  std::vector<double> peak, after, base, cpu, wall;
  for (const Measure& r : runs) {
    peak.push_back(r.peak_mib);
    after.push_back(r.after_mib);
    base.push_back(r.baseline_mib);
    cpu.push_back(r.cpu_s);
    wall.push_back(r.wall_s);
  }
  Spread p = Of(peak), a = Of(after), b = Of(base), c = Of(cpu), w = Of(wall);
  std::printf(
      "%-26s peak %7.1f (%7.1f-%7.1f) MiB  after %6.1f (%6.1f-%6.1f)  baseline %5.1f  "
      "cpu %6.2f (%6.2f-%6.2f) s  wall %6.2f (%6.2f-%6.2f) s  [%s]\n",
      what.c_str(), p.median, p.min, p.max, a.median, a.min, a.max, b.median, c.median, c.min,
      c.max, w.median, w.min, w.max, runs.back().outcome.substr(0, 160).c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace profd::testing

int main(int argc, char** argv) {
  using namespace profd::testing;
  std::vector<int> names = {70'000, 300'000, 630'000};
  int kineto_names = 2'000'000;
  int repeat = 3;
  std::string parts = "agent,kineto,report";
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--names=")) {
      names.clear();
      for (absl::string_view s : absl::StrSplit(a, ',')) {
        int v = 0;
        if (absl::SimpleAtoi(s, &v)) names.push_back(v);
      }
    } else if (absl::ConsumePrefix(&a, "--kineto_names=")) {
      (void)absl::SimpleAtoi(a, &kineto_names);
    } else if (absl::ConsumePrefix(&a, "--repeat=")) {
      (void)absl::SimpleAtoi(a, &repeat);
    } else if (absl::ConsumePrefix(&a, "--parts=")) {
      parts = std::string(a);
    }
  }
  auto want = [&](const char* part) { return absl::StrContains(parts, part); };
  if (want("agent")) {
    for (int n : names) {
      std::vector<Measure> runs;
      for (int r = 0; r < repeat; ++r) runs.push_back(AgentCapture(n));
      Print(absl::StrCat("agent, ", n, " names"), runs);
    }
  }
  if (want("kineto") || want("report")) {
    TempDir dir;
    const std::string trace = dir.File("kineto_distinct_names.json");
    GenerateKinetoTrace(trace, kineto_names);
    const uint64_t bytes = std::filesystem::file_size(trace);
    std::printf("Kineto trace: %d kernels of distinct names, %.0f MB of JSON\n", kineto_names,
                bytes / 1e6);
    if (want("kineto")) {
      std::vector<Measure> runs;
      for (int r = 0; r < repeat; ++r) runs.push_back(KinetoCapture(trace, bytes));
      Print("kineto capture", runs);
    }
    if (want("report")) {
      std::vector<Measure> runs;
      for (int r = 0; r < repeat; ++r) runs.push_back(Report(trace));
      Print("profctl report", runs);
    }
  }
  return 0;
}

// profd's memory and finishing time against the size of a capture: a real profd, and an agent
// (the agent channel's real framing from this process, tests/support/raw_agent.h) that streams a
// launch-bound loop — one cudaLaunchKernel and one kernel per launch, 50 kernel names — at the
// pace of a real capture window (events spread evenly over --seconds), then says the capture has
// finished. Reported per size: profd's peak RSS during the capture (VmRSS every 50 ms and VmHWM),
// its RSS after, and the time from the agent's end of capture to `profctl capture` returning.
// Median, min and max over --repeat runs; a fresh profd each run.
//
//   capture_memory_bench [--events=1000000,10000000,50000000] [--seconds=10] [--repeat=3]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

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

constexpr int kNames = 50;
constexpr int kLaunchesPerBatch = 8192;  // 16,384 events: a real agent's batches are ~this size

// VmRSS or VmHWM of a process in MiB; 0 once it is gone.
double MemoryMiB(pid_t pid, const char* field) {
  std::string status = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, field)) continue;
    absl::ConsumePrefix(&line, ":");
    double kb = 0;
    if (absl::SimpleAtod(absl::StripSuffix(absl::StripAsciiWhitespace(line), "kB"), &kb)) {
      return kb / 1024;
    }
  }
  return 0;
}

v1::AgentMessage Batch(const std::string& capture_id, uint64_t first_launch, int launches,
                       uint64_t t0_ns, double gap_ns) {
  v1::AgentMessage m;
  v1::EventBatch* b = m.mutable_events();
  b->set_capture_id(capture_id);
  if (first_launch == 0) {
    v1::StringDef* launch = b->add_strings();
    launch->set_id(1);
    launch->set_value("cudaLaunchKernel");
    for (int k = 0; k < kNames; ++k) {
      v1::StringDef* d = b->add_strings();
      d->set_id(2 + k);
      d->set_value(absl::StrCat("_Z12bench_kernelILi", k, "EEvPf"));
    }
  }
  for (int i = 0; i < launches; ++i) {
    const uint64_t n = first_launch + i;
    const uint64_t t = t0_ns + static_cast<uint64_t>(n * gap_ns);
    v1::ApiCall* a = b->add_api_calls();
    a->set_start_ns(t);
    a->set_end_ns(t + 2500);
    a->set_tid(100);
    a->set_correlation(static_cast<uint32_t>(n + 1));
    a->set_domain(v1::API_DOMAIN_RUNTIME);
    a->set_cbid(211);
    a->set_name_id(1);
    v1::Kernel* k = b->add_kernels();
    k->set_start_ns(t + 4000);
    k->set_end_ns(t + 4000 + 1500 + n % 1000);
    k->set_device(0);
    k->set_stream(7);
    k->set_correlation(static_cast<uint32_t>(n + 1));
    k->set_name_id(static_cast<uint32_t>(2 + n % kNames));
    k->set_grid_x(128);
    k->set_grid_y(1);
    k->set_grid_z(1);
    k->set_block_x(256);
    k->set_block_y(1);
    k->set_block_z(1);
    k->set_registers_per_thread(32);
  }
  return m;
}

struct CaptureRun {
  double peak_mib = 0;      // VmRSS sampled during the capture
  double hwm_mib = 0;       // VmHWM at the end
  double after_mib = 0;     // VmRSS once the capture is done
  double baseline_mib = 0;  // VmRSS before it
  double finish_s = 0;      // agent's end of capture -> profctl returned
  double send_s = 0;        // how long the agent took to send it all (paced)
  uint64_t events = 0;      // as `profctl capture` counted them
};

CaptureRun OneCapture(uint64_t events, double seconds) {
  TempDir dir;
  ProfdProcess profd({"--capture_dir=" + dir.File("captures"),
                      "--store=file://" + dir.File("store"), "--spool_dir=" + dir.File("spool"),
                      "--max_capture_duration=3600s",
                      "--max_capture_events=" + std::to_string(events + 1000)});
  profd.Start();
  CaptureRun run;
  RawAgent agent(profd.agent_socket());
  if (!agent.Register(RawAgent::DefaultHello("bench"))) {
    std::fprintf(stderr, "profd did not accept the agent\n%s\n", profd.log().c_str());
    std::exit(1);
  }
  usleep(500000);
  run.baseline_mib = MemoryMiB(profd.pid(), "VmRSS");
  RunResult capture;
  std::atomic<bool> returned{false};
  absl::Time returned_at;
  std::thread capturing([&] {
    capture = testing::Run({BuildPath("client/profctl"), "--target", profd.target(), "--json",
                            "capture", "--pid", std::to_string(getpid()), "--duration",
                            absl::StrCat(static_cast<int>(seconds) + 600, "s")},
                           {}, absl::Hours(1));
    returned_at = absl::Now();
    returned = true;
  });
  const std::string id = agent.AwaitStartCapture(absl::Seconds(10));
  if (id.empty()) {
    capturing.join();
    std::fprintf(stderr, "no StartCapture: %s\n%s\n", capture.err.c_str(), profd.log().c_str());
    std::exit(1);
  }
  agent.SendMessage(Status(id, v1::CAPTURE_STATE_STARTED));
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      run.peak_mib = std::max(run.peak_mib, MemoryMiB(profd.pid(), "VmRSS"));
      usleep(50000);
    }
  });
  const uint64_t launches = events / 2;
  const double gap_ns = seconds * 1e9 / static_cast<double>(launches);
  const uint64_t t0 = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  const absl::Time start = absl::Now();
  for (uint64_t first = 0; first < launches; first += kLaunchesPerBatch) {
    const int n = static_cast<int>(std::min<uint64_t>(kLaunchesPerBatch, launches - first));
    // Sent when its last event is over, as an agent's flush would.
    const absl::Time due = start + absl::Nanoseconds(static_cast<int64_t>((first + n) * gap_ns));
    if (absl::Now() < due) absl::SleepFor(due - absl::Now());
    std::string frame = RawAgent::Frame(Batch(id, first, n, t0, gap_ns).SerializeAsString());
    if (!agent.Send(frame, absl::Seconds(120))) {
      std::fprintf(stderr, "profd stopped reading\n%s\n", profd.log().c_str());
      std::exit(1);
    }
  }
  run.send_s = absl::ToDoubleSeconds(absl::Now() - start);
  v1::AgentMessage done = Status(id, v1::CAPTURE_STATE_FINISHED);
  done.mutable_capture_status()->set_events(launches * 2);
  agent.SendMessage(done, absl::Seconds(120));
  const absl::Time ended = absl::Now();
  capturing.join();
  sampling = false;
  sampler.join();
  run.finish_s = absl::ToDoubleSeconds(returned_at - ended);
  run.hwm_mib = MemoryMiB(profd.pid(), "VmHWM");
  usleep(500000);
  run.after_mib = MemoryMiB(profd.pid(), "VmRSS");
  if (capture.exit_code != 0) {
    std::fprintf(stderr, "capture failed: %s\n%s\n", capture.err.c_str(), profd.log().c_str());
    std::exit(1);
  }
  const size_t at = capture.out.find("\"events\": \"");
  if (at != std::string::npos) run.events = std::stoull(capture.out.substr(at + 11));
  return run;
}

struct Spread {
  double median, min, max;
};
Spread Of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace
}  // namespace profd::testing

int main(int argc, char** argv) {
  using namespace profd::testing;
  std::vector<uint64_t> sizes = {1'000'000, 10'000'000, 50'000'000};
  double seconds = 10;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--events=")) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(a, ',')) {
        uint64_t v = 0;
        if (absl::SimpleAtoi(s, &v)) sizes.push_back(v);
      }
    } else if (absl::ConsumePrefix(&a, "--seconds=")) {
      (void)absl::SimpleAtod(a, &seconds);
    } else if (absl::ConsumePrefix(&a, "--repeat=")) {
      (void)absl::SimpleAtoi(a, &repeat);
    }
  }
  std::printf("%-11s %-10s %-26s %-26s %-22s %-26s\n", "events", "counted",
              "peak RSS MiB (med/min/max)", "RSS after MiB", "baseline MiB",
              "finish s (med/min/max)");
  for (uint64_t events : sizes) {
    std::vector<double> peak, after, base, finish;
    uint64_t counted = 0;
    for (int r = 0; r < repeat; ++r) {
      CaptureRun run = OneCapture(events, seconds);
      peak.push_back(std::max(run.peak_mib, run.hwm_mib));
      after.push_back(run.after_mib);
      base.push_back(run.baseline_mib);
      finish.push_back(run.finish_s);
      counted = run.events;
      std::fprintf(stderr, "  %llu events: sent in %.1f s, peak %.1f MiB, finish %.3f s\n",
                   static_cast<unsigned long long>(events), run.send_s,
                   std::max(run.peak_mib, run.hwm_mib), run.finish_s);
    }
    Spread p = Of(peak), a = Of(after), b = Of(base), f = Of(finish);
    std::printf(
        "%-11llu %-10llu %6.1f %6.1f %6.1f        %6.1f %6.1f %6.1f  %6.1f %6.1f %6.1f  %6.3f "
        "%6.3f %6.3f\n",
        static_cast<unsigned long long>(events), static_cast<unsigned long long>(counted), p.median,
        p.min, p.max, a.median, a.min, a.max, b.median, b.min, b.max, f.median, f.min, f.max);
    std::fflush(stdout);
  }
  return 0;
}

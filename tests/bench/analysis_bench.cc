// Benchmark of the bottleneck analysis on a large synthetic Kineto trace (GPT-2-like, the same
// generator as the test fixture): read + analyze, plain and gzip, medians over several runs.
//
//   build/tests/bench/analysis_bench [--events 2000000] [--runs 3] [--dir /tmp]
//
// Prints, per format, events/s and MB/s of JSON (and of the compressed file for gzip) for the
// reader alone and for read + analyze. Not a ctest test: it takes tens of seconds and its
// numbers depend on the machine.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "analysis/trace_reader.h"
#include "tests/analysis/synthetic_trace.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Spread {
  double median, min, max;
};

Spread Of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t target_events = 2'000'000;
  int runs = 3;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--events")) target_events = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  namespace a = profd::analysis;
  a::testing::SyntheticOptions o;
  o.steps = static_cast<int>(std::max<uint64_t>(1, target_events / 528));  // ~528 events/step
  std::string base = dir + "/profd_analysis_bench_" + std::to_string(::getpid());
  std::printf("generating %d steps of the GPT-2-like trace ...\n", o.steps);
  uint64_t events = 0;
  for (const char* ext : {".json", ".json.gz"}) {
    events = a::testing::WriteGpt2LikeTrace(o, base + ext);
  }
  std::printf("%llu events; plain %.1f MB, gzip %.1f MB; %d runs each, median [min, max]\n\n",
              static_cast<unsigned long long>(events), FileSize(base + ".json") / 1e6,
              FileSize(base + ".json.gz") / 1e6, runs);

  int rc = 0;
  for (const char* ext : {".json", ".json.gz"}) {
    std::string path = base + ext;
    std::vector<double> read_s, total_s;
    uint64_t json_bytes = 0;
    for (int r = 0; r < runs; ++r) {
      auto t0 = Clock::now();
      a::Trace trace;
      absl::Status s = a::ReadTraceFile(path, &trace);
      auto t1 = Clock::now();
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        rc = 1;
        break;
      }
      a::Report report = a::Analyze(trace);
      auto t2 = Clock::now();
      json_bytes = trace.files[0].bytes_read;
      read_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      total_s.push_back(std::chrono::duration<double>(t2 - t0).count());
      if (report.kernel_count == 0) rc = 1;
    }
    if (read_s.empty()) continue;
    Spread rd = Of(read_s), tot = Of(total_s);
    double file_mb = FileSize(path) / 1e6, json_mb = json_bytes / 1e6;
    std::printf("%-8s read only:      %6.2f s [%.2f, %.2f]  %6.2f M events/s  %7.1f MB/s JSON",
                ext + 1, rd.median, rd.min, rd.max, events / rd.median / 1e6, json_mb / rd.median);
    if (file_mb != json_mb) std::printf("  %6.1f MB/s gzip", file_mb / rd.median);
    std::printf("\n%-8s read + analyze: %6.2f s [%.2f, %.2f]  %6.2f M events/s  %7.1f MB/s JSON",
                ext + 1, tot.median, tot.min, tot.max, events / tot.median / 1e6,
                json_mb / tot.median);
    if (file_mb != json_mb) std::printf("  %6.1f MB/s gzip", file_mb / tot.median);
    std::printf("\n");
  }
  for (const char* ext : {".json", ".json.gz"}) std::remove((base + ext).c_str());
  return rc;
}

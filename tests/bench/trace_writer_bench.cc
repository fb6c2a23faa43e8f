// Trace conversion in profd: event batches recorded from a real H200 capture (tests/fixtures/)
// replayed many times through the ChromeTraceWriter (JSON + gzip) and the summary, on one
// thread. Prints events per second and compressed bytes per event: median, min, max of 5 runs.
//   trace_writer_bench [copies=200] [gzip_level=1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "daemon/trace/capture_summary.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

int main(int argc, char** argv) {
  using namespace profd;
  int copies = argc > 1 ? std::atoi(argv[1]) : 200;
  int level = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  testing::TempDir dir;
  std::vector<double> rates, sizes;
  for (int run = 0; run < 5; ++run) {
    TraceProcess process;
    process.pid = 1;
    process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());
    auto writer = ChromeTraceWriter::Create(dir.File("bench.json.gz"), process, level);
    StringTable names;
    CaptureSummaryBuilder summary;
    auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < copies; ++c) {
      for (const auto& b : batches) {
        if (c == 0) names.Add(b);
        (void)(*writer)->Write(b, names);
        summary.Add(1, b, names);
      }
    }
    (void)(*writer)->Finish({});
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back((*writer)->events() / s);
    sizes.push_back(static_cast<double>((*writer)->compressed_bytes()) / (*writer)->events());
  }
  std::sort(rates.begin(), rates.end());
  std::sort(sizes.begin(), sizes.end());
  std::printf("trace conversion (JSON + gzip level %d + summary), %d x fixture:\n", level, copies);
  std::printf("  events/s on one core: median %.2f M, min %.2f M, max %.2f M\n", rates[2] / 1e6,
              rates[0] / 1e6, rates[4] / 1e6);
  std::printf("  compressed bytes per event: median %.1f (min %.1f, max %.1f)\n", sizes[2],
              sizes[0], sizes[4]);
  return 0;
}

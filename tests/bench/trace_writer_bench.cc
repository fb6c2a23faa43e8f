// Trace conversion in profd: event batches recorded from a real H200 capture (tests/fixtures/)
// replayed many times on one thread. Prints events per second and compressed bytes per event,
// median, min and max of 5 runs, for:
//   - the ChromeTraceWriter alone (JSON + gzip): what a capture's trace file costs;
//   - its compressor alone (GzipStream, ISA-L), at the same level, over the JSON that writer
//     produced (in 256 KiB pieces, as the writer hands it over), and zlib's deflate level 1 (what
//     the writer used before 2026-12-01) on the same pieces;
//   - the capture's streaming analysis alone (CaptureAnalysis), and writer + analysis (everything
//     profd does per batch);
//   - the PerfettoTraceWriter (protobuf + gzip), alone and with the analysis, on the same batches.
//   Each copy of the fixture is shifted after the previous one, so the
//     analysis sees one long capture in time order, as from an agent.
//   trace_writer_bench [copies=200] [gzip_level=1] [perfetto: that writer alone]
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/gzip_stream.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/trace_writer.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

// One run: returns events and compressed bytes (0 when the stage writes none).
struct RunResult {
  uint64_t events = 0;
  uint64_t bytes = 0;
};

// Returns the median events/s.
double Report(const char* what, const std::function<RunResult()>& run) {
  std::vector<double> rates, sizes;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    RunResult r = run();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(r.events) / s);
    sizes.push_back(static_cast<double>(r.bytes) / static_cast<double>(r.events));
  }
  std::sort(rates.begin(), rates.end());
  std::sort(sizes.begin(), sizes.end());
  std::printf("  %-44s median %5.2f M events/s (min %5.2f, max %5.2f)", what, rates[2] / 1e6,
              rates[0] / 1e6, rates[4] / 1e6);
  if (sizes[2] > 0) std::printf(", %.1f B/event", sizes[2]);
  std::printf("\n");
  return rates[2];
}

}  // namespace
}  // namespace profd

int main(int argc, char** argv) {
  using namespace profd;
  int copies = argc > 1 ? std::atoi(argv[1]) : 200;
  int level = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<v1::EventBatch> batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  StringTable names;
  for (const auto& b : batches) names.Add(b);
  testing::TempDir dir;
  const std::string path = dir.File("bench.json.gz");
  TraceProcess process;
  process.pid = 1;
  process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());

  // The copies, one after the other in time.
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& b : batches) {
    for (const auto& a : b.api_calls()) first = std::min<uint64_t>(first, a.start_ns());
    for (const auto& k : b.kernels()) last = std::max<uint64_t>(last, k.end_ns());
  }
  std::vector<v1::EventBatch> timeline;
  for (int c = 0; c < copies; ++c) {
    const uint64_t shift = static_cast<uint64_t>(c) * (last - first + 1000);
    for (v1::EventBatch b : batches) {
      auto move = [&](auto* events) {
        for (auto& e : *events) {
          e.set_start_ns(e.start_ns() + shift);
          e.set_end_ns(e.end_ns() + shift);
        }
      };
      move(b.mutable_kernels());
      move(b.mutable_memcpys());
      move(b.mutable_memsets());
      move(b.mutable_api_calls());
      move(b.mutable_syncs());
      if (c > 0) b.clear_strings();
      timeline.push_back(std::move(b));
    }
  }

  // The writer and the analysis each take the batches as profd's pipeline hands them over.
  auto convert = [&](int gzip_level, bool write, bool analyse, const std::string& file,
                     TraceFormat format = TraceFormat::kChromeJson) {
    RunResult r;
    std::unique_ptr<TraceWriter> writer;
    if (write) writer = std::move(*TraceWriter::Create(format, file, process, gzip_level));
    CaptureAnalysis analysis(process.base_time_ns);
    const size_t p = analysis.AddProcess(process.pid, file);
    for (const auto& b : timeline) {
      if (write) (void)writer->Write(b, names);
      if (analyse) analysis.AddBatch(p, b, names);
      if (!write)
        r.events += b.kernels_size() + b.memcpys_size() + b.memsets_size() + b.api_calls_size() +
                    b.syncs_size() + b.markers_size() + b.memory_ops_size() + b.overheads_size();
    }
    if (analyse) (void)analysis.Finish();
    if (write) {
      (void)writer->Finish({});
      r.events = writer->events();
      r.bytes = writer->compressed_bytes();
    }
    return r;
  };

  std::printf("trace conversion, %d x tests/fixtures/burst_1000_kernels.batches.pb, one thread:\n",
              copies);
  if (argc > 3 && std::string(argv[3]) == "perfetto") {  // that writer alone (for a profiler)
    Report("Perfetto writer alone", [&] {
      return convert(level, true, false, dir.File("bench.pftrace.gz"), TraceFormat::kPerfetto);
    });
    return 0;
  }
  char what[64];
  std::snprintf(what, sizeof(what), "writer alone (JSON + gzip level %d)", level);
  const double writer_rate = Report(what, [&] { return convert(level, true, false, path); });

  // The compressors alone over the JSON of that same run, in the writer's pieces.
  const std::string json = testing::ReadGzip(path);
  const uint64_t events = convert(level, true, false, path).events;
  std::snprintf(what, sizeof(what), "GzipStream alone (ISA-L level %d, that JSON)", level);
  const double gzip_rate = Report(what, [&] {
    RunResult r{events, 0};
    GzipStream gzip(level);
    for (size_t at = 0; at < json.size(); at += 256 << 10) {
      const size_t n = std::min<size_t>(256 << 10, json.size() - at);
      (void)gzip.Compress(std::string_view(json).substr(at, n), at + n == json.size(),
                          [&](std::string_view bytes) {
                            r.bytes += bytes.size();
                            return absl::OkStatus();
                          });
    }
    return r;
  });
  std::string out(64 << 10, '\0');
  Report("zlib deflate level 1 alone (that JSON)", [&] {
    z_stream zs{};
    deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    RunResult r{events, 0};
    for (size_t at = 0; at < json.size(); at += 256 << 10) {
      size_t n = std::min<size_t>(256 << 10, json.size() - at);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(json.data() + at));
      zs.avail_in = static_cast<uInt>(n);
      const int flush = at + n == json.size() ? Z_FINISH : Z_NO_FLUSH;
      do {
        zs.next_out = reinterpret_cast<Bytef*>(out.data());
        zs.avail_out = static_cast<uInt>(out.size());
        deflate(&zs, flush);
        r.bytes += out.size() - zs.avail_out;
      } while (zs.avail_out == 0);
    }
    deflateEnd(&zs);
    return r;
  });
  std::printf(
      "  (JSON: %.1f bytes/event before gzip; the writer's time per event less the\n"
      "   compressor's: %.0f ns: formatting, file writes, and sharing one core's caches)\n",
      static_cast<double>(json.size()) / static_cast<double>(events),
      1e9 * (1 / writer_rate - 1 / gzip_rate));

  Report("streaming analysis alone (CaptureAnalysis)",
         [&] { return convert(level, false, true, path); });
  std::snprintf(what, sizeof(what), "writer + analysis (JSON + gzip %d + report)", level);
  Report(what, [&] { return convert(level, true, true, path); });

  // The Perfetto protobuf writer (profctl capture --format perfetto) on the same batches.
  const std::string pb_path = dir.File("bench.pftrace.gz");
  std::snprintf(what, sizeof(what), "Perfetto writer alone (protobuf + gzip %d)", level);
  Report(what, [&] { return convert(level, true, false, pb_path, TraceFormat::kPerfetto); });
  const std::string pb = testing::ReadGzip(pb_path);
  std::printf("  (Perfetto: %.1f bytes/event before gzip)\n",
              static_cast<double>(pb.size()) / static_cast<double>(events));
  std::snprintf(what, sizeof(what), "Perfetto writer + analysis (gzip %d + report)", level);
  Report(what, [&] { return convert(level, true, true, pb_path, TraceFormat::kPerfetto); });
  return 0;
}

// libFuzzer target: a trace file as `profctl report FILE` and `profctl import FILE` (on profd's
// gRPC thread) read it, JSON or gzip, then the analysis and every renderer. The same bytes go
// through the three ways a trace is read: from memory (gzip detected from the content), gzip-
// compressed by the harness (so JSON mutations also cross the inflate path), and from a file
// through zlib's gzFile as the commands do. All three must agree.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "analysis/report_diff.h"
#include "analysis/trace_reader.h"
#include "tests/fuzz/capture_pipeline.h"

namespace {

using profd::fuzz::Check;
namespace analysis = profd::analysis;

std::string Gzip(std::string_view data) {
  z_stream z{};
  deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  Check(rc == Z_STREAM_END, "deflate of the input");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The input as a file, for ReadTraceFile: a memfd, rewritten per input.
std::string AsFile(std::string_view data) {
  static int fd = memfd_create("profd-fuzz-input", 0);
  Check(fd >= 0, "memfd_create");
  Check(ftruncate(fd, 0) == 0, "ftruncate");
  Check(pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()), "pwrite");
  return absl::StrCat("/proc/self/fd/", fd);
}

bool SameTrace(const analysis::Trace& a, const analysis::Trace& b) {
  return a.gpu.size() == b.gpu.size() && a.host.size() == b.host.size() &&
         a.window_start_ns == b.window_start_ns && a.window_end_ns == b.window_end_ns &&
         a.files.size() == b.files.size() &&
         (a.files.empty() || (a.files[0].events == b.files[0].events &&
                              a.files[0].invalid_events == b.files[0].invalid_events));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  analysis::Trace trace;
  absl::Status read = analysis::ReadTraceBuffer(input, "fuzz.json", &trace);

  analysis::Trace from_file;
  absl::Status file_read = analysis::ReadTraceFile(AsFile(input), &from_file);
  Check(read.ok() == file_read.ok(), "memory and file readers agree on validity");
  if (read.ok()) Check(SameTrace(trace, from_file), "memory and file readers read the same");

  const bool is_gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!is_gzip) {
    analysis::Trace from_gzip;
    absl::Status gzip_read = analysis::ReadTraceBuffer(Gzip(input), "fuzz.json.gz", &from_gzip);
    Check(read.ok() == gzip_read.ok(), "plain and gzip readers agree on validity");
    if (read.ok()) Check(SameTrace(trace, from_gzip), "plain and gzip readers read the same");
  }
  if (!read.ok()) return 0;

  analysis::Report report = analysis::Analyze(trace);
  profd::fuzz::CheckReport(report);
  // profctl diff A A: every delta and percentage of a report against itself.
  analysis::ReportDiff diff = analysis::DiffReports(report, report);
  analysis::RenderDiffText(diff, "a", "b", 25);
  analysis::DiffToJson(diff, "a", "b");
  return 0;
}

// The trace writer and the capture's report, fed with event batches recorded from a real capture on
// an H200 (tests/fixtures/README.md): 1000 launches of profd_test_kernel, 8 MiB each way, a memset.
#include "daemon/trace/chrome_trace_writer.h"

#include <map>

#include "daemon/trace/capture_analysis.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::ReadGzipJson;
using testing::ReadRecordedBatches;
using testing::SourcePath;
using testing::TempDir;

constexpr char kFixture[] = "tests/fixtures/burst_1000_kernels.batches.pb";

struct Replayed {
  rapidjson::Document trace;
  analysis::Report report;
  uint64_t first_ts = UINT64_MAX;
};

Replayed Replay(const TempDir& dir) {
  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& b : batches) {
    for (const auto& k : b.kernels()) {
      lo = std::min<uint64_t>(lo, k.start_ns());
      hi = std::max<uint64_t>(hi, k.end_ns());
    }
  }
  TraceProcess process;
  process.pid = 465;
  process.comm = "cuda_workload";
  process.capture_id = "fixture";
  process.base_time_ns = static_cast<int64_t>(lo / 1000000 * 1000000);
  auto writer = ChromeTraceWriter::Create(dir.File("trace.json.gz"), process);
  EXPECT_TRUE(writer.ok()) << writer.status();
  StringTable names;
  CaptureAnalysis analysis(process.base_time_ns);
  const size_t p = analysis.AddProcess(465, dir.File("trace.json.gz"));
  for (const auto& b : batches) {
    names.Add(b);
    EXPECT_TRUE((*writer)->Write(b, names).ok());
    analysis.AddBatch(p, b, names);
  }
  ChromeTraceWriter::Footer footer;
  footer.devices = batches.front().devices().empty()
                       ? std::vector<v1::DeviceInfo>{}
                       : std::vector<v1::DeviceInfo>(batches.front().devices().begin(),
                                                     batches.front().devices().end());
  EXPECT_TRUE((*writer)->Finish(footer).ok());
  Replayed r{ReadGzipJson(dir.File("trace.json.gz")), analysis.Finish(), lo};
  return r;
}

TEST(ChromeTraceWriterTest, RealCaptureBecomesKinetoStyleJson) {
  TempDir dir;
  Replayed r = Replay(dir);
  const rapidjson::Value& events = r.trace["traceEvents"];
  std::map<std::string, int> by_cat;
  std::map<std::string, uint64_t> copy_bytes;
  int flows_start = 0, flows_end = 0, test_kernels = 0, launches = 0;
  for (const auto& e : events.GetArray()) {
    std::string ph = e["ph"].GetString();
    if (ph == "s") ++flows_start;
    if (ph == "f") {
      ++flows_end;
      EXPECT_STREQ(e["bp"].GetString(), "e");
    }
    if (ph != "X") continue;
    std::string cat = e["cat"].GetString();
    ++by_cat[cat];
    std::string name = e["name"].GetString();
    if (cat == "kernel") {
      EXPECT_EQ(name, "profd_test_kernel(int*, int)");  // demangled
      ++test_kernels;
      EXPECT_TRUE(e["args"].HasMember("grid"));
      EXPECT_TRUE(e["args"].HasMember("registers per thread"));
      EXPECT_EQ(e["pid"].GetInt(), 0);  // GPU rows: pid = device
    }
    if (cat == "gpu_memcpy")
      copy_bytes[e["args"]["copy kind"].GetString()] += e["args"]["bytes"].GetUint64();
    if (cat == "cuda_runtime") {
      EXPECT_EQ(name.find("_v"), std::string::npos) << name;  // no CUPTI version suffix
      launches += name == "cudaLaunchKernel";
      EXPECT_EQ(e["pid"].GetInt(), 465);
    }
  }
  EXPECT_EQ(test_kernels, 1000);
  EXPECT_EQ(launches, 1000);
  EXPECT_EQ(copy_bytes["HtoD"], 8u << 20);
  EXPECT_EQ(copy_bytes["DtoH"], 8u << 20);
  EXPECT_EQ(by_cat["gpu_memset"], 1);
  EXPECT_EQ(by_cat["cuda_sync"], 1);
  // Each kernel, copy and memset ends an arrow its launch call started.
  EXPECT_EQ(flows_end, 1003);
  EXPECT_EQ(flows_start, 1003);
  EXPECT_EQ(r.trace["profd"]["dropped_records"].GetUint64(), 0u);
  EXPECT_EQ(r.trace["deviceProperties"][0]["name"], "NVIDIA H200");
  EXPECT_EQ(r.trace["deviceProperties"][0]["numSms"].GetUint(), 132u);
}

TEST(ChromeTraceWriterTest, TimestampsAreExactToTheNanosecond) {
  TempDir dir;
  Replayed r = Replay(dir);
  int64_t base = r.trace["baseTimeNanoseconds"].GetInt64();
  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  // The first kernel of the recording, found again in the JSON by its correlation id.
  const v1::Kernel* k = nullptr;
  for (const auto& b : batches) {
    if (b.kernels_size() > 0) {
      k = &b.kernels(0);
      break;
    }
  }
  ASSERT_NE(k, nullptr);
  bool found = false;
  for (const auto& e : r.trace["traceEvents"].GetArray()) {
    if (std::string(e["ph"].GetString()) != "X" || std::string(e["cat"].GetString()) != "kernel") {
      continue;
    }
    if (e["args"]["correlation"].GetUint() != k->correlation()) continue;
    // ts is µs with three decimals: ts * 1000 is exact in a double at this magnitude.
    int64_t ts_ns = static_cast<int64_t>(std::llround(e["ts"].GetDouble() * 1000));
    int64_t dur_ns = static_cast<int64_t>(std::llround(e["dur"].GetDouble() * 1000));
    EXPECT_EQ(base + ts_ns, static_cast<int64_t>(k->start_ns()));
    EXPECT_EQ(dur_ns, static_cast<int64_t>(k->end_ns() - k->start_ns()));
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST(ChromeTraceWriterTest, ReportOfTheRealCapture) {
  TempDir dir;
  Replayed r = Replay(dir);
  ASSERT_EQ(r.report.top_kernels.size(), 1u);
  const analysis::KernelRow& k = r.report.top_kernels[0];
  EXPECT_EQ(k.name, "profd_test_kernel(int*, int)");
  EXPECT_EQ(k.stats.count, 1000u);
  EXPECT_GT(k.stats.min_ns, 0);
  EXPECT_LE(k.stats.min_ns, k.stats.avg_ns);
  EXPECT_LE(k.stats.avg_ns, k.stats.max_ns);
  ASSERT_EQ(r.report.gpus.size(), 1u);
  EXPECT_EQ(r.report.gpus[0].kernels, 1000u);
  uint64_t copied = 0;
  for (const analysis::CopyRow& c : r.report.copies) copied += c.kind == "Memset" ? 0 : c.bytes;
  EXPECT_EQ(copied, 16u << 20);
  EXPECT_GT(r.report.gpus[0].busy_ratio, 0.0);
  EXPECT_LE(r.report.gpus[0].busy_ratio, 1.0);
  EXPECT_EQ(r.report.events, 2008u);
}

TEST(ChromeTraceWriterTest, UnwritableFolderIsAClearError) {
  TraceProcess p;
  auto writer = ChromeTraceWriter::Create("/nonexistent-dir/trace.json.gz", p);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(std::string(writer.status().message()).find("cannot create trace file"),
            std::string::npos);
}

}  // namespace
}  // namespace profd

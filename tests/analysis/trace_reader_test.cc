// TraceReader: both layouts of the top object, gzip and plain, files and memory, the odd shapes
// real traces have, and errors that say what went wrong.
#include "analysis/trace_reader.h"

#include <zlib.h>

#include <string>

#include "absl/strings/match.h"
#include "analysis/analysis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/kineto_trace_builder.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using testing::KernelShape;
using testing::KinetoTraceBuilder;
using testing::WriteFile;

KinetoTraceBuilder SmallTrace() {
  KinetoTraceBuilder b;
  b.CpuOp("aten::linear", 0, 100);
  b.Launch("gemm", 10, 5, 20, 30, 0, 7, KernelShape{{264, 1, 1}, {256, 1, 1}, 64, 0});
  b.Copy("HtoD", "Pageable", "Device", 60, 2, 62, 4, 4096);
  b.Memset(70, 1, 256);
  b.SyncRecord("Stream Sync", 80, 10);
  b.DeviceProperties(0, 66);
  return b;
}

void ExpectSmallTrace(const Trace& t) {
  ASSERT_EQ(t.gpu.size(), 3u);
  ASSERT_EQ(t.host.size(), 3u);  // launch, memcpy call, sync record
  EXPECT_EQ(t.window_start_ns, 0);
  EXPECT_EQ(t.window_end_ns, 100'000);
  const GpuActivity& k = t.gpu[0];
  EXPECT_EQ(k.type, GpuActivity::Type::kKernel);
  EXPECT_EQ(t.names.Name(k.name), "gemm");
  EXPECT_EQ(k.start_ns, 20'000);
  EXPECT_EQ(k.dur_ns, 30'000);
  EXPECT_EQ(k.stream, 7);
  const LaunchConfig& c = t.launch_configs[k.launch_config];
  EXPECT_EQ(c.grid[0], 264u);
  EXPECT_EQ(c.block[0], 256u);
  EXPECT_EQ(c.registers_per_thread, 64u);
  const GpuActivity& m = t.gpu[1];
  EXPECT_EQ(m.type, GpuActivity::Type::kMemcpy);
  EXPECT_EQ(m.copy_kind, CopyKind::kHtoD);
  EXPECT_EQ(m.src_kind, MemoryKind::kPageable);
  EXPECT_EQ(m.dst_kind, MemoryKind::kDevice);
  EXPECT_EQ(m.bytes, 4096u);
  EXPECT_EQ(t.gpu[2].type, GpuActivity::Type::kMemset);
  EXPECT_EQ(t.host[0].correlation, k.correlation);
  EXPECT_EQ(t.names.Name(t.host[0].name), "cudaLaunchKernel");
  EXPECT_EQ(t.host[2].type, HostCall::Type::kSync);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].num_sms, 66u);
  EXPECT_EQ(t.devices[0].max_threads_per_sm, 2048u);
  ASSERT_EQ(t.files.size(), 1u);
  EXPECT_EQ(t.files[0].host_pid, 100);
  EXPECT_EQ(t.files[0].events, 7u);
}

TEST(TraceReaderTest, ReadsTraceEventsFirstOrLastPlainOrGzip) {
  profd::testing::TempDir dir;
  KinetoTraceBuilder b = SmallTrace();
  for (bool last : {false, true}) {
    for (bool gzip : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "events_last=" << last << " gzip=" << gzip);
      std::string path = dir.File(gzip ? "t.json.gz" : "t.json");
      b.Write(path, gzip, last);
      Trace t;
      ASSERT_TRUE(ReadTraceFile(path, &t).ok());
      ExpectSmallTrace(t);
      EXPECT_EQ(t.files[0].gzip, gzip);
      EXPECT_EQ(t.files[0].bytes_read, b.Json(last).size());
    }
  }
}

TEST(TraceReaderTest, ReadsBuffersGzipOrPlain) {
  std::string json = SmallTrace().Json();
  Trace plain;
  ASSERT_TRUE(ReadTraceBuffer(json, "mem", &plain).ok());
  ExpectSmallTrace(plain);

  profd::testing::TempDir dir;
  WriteFile(dir.File("t.gz"), json, true);
  std::string gz = profd::testing::ReadFileOrEmpty(dir.File("t.gz"));
  ASSERT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
  Trace unzipped;
  ASSERT_TRUE(ReadTraceBuffer(gz, "mem.gz", &unzipped).ok());
  ExpectSmallTrace(unzipped);
  EXPECT_TRUE(unzipped.files[0].gzip);
}

TEST(TraceReaderTest, ReadsLargeTracesAcrossManyChunks) {
  // More than the reader's 1 MiB chunks several times over, so events straddle chunk edges.
  KinetoTraceBuilder b;
  for (int i = 0; i < 30000; ++i)
    b.Launch("k" + std::to_string(i % 7), i * 10.0, 2, i * 10.0 + 3, 5);
  std::string json = b.Json();
  ASSERT_GT(json.size(), 8u << 20);
  Trace t;
  ASSERT_TRUE(ReadTraceBuffer(json, "big", &t).ok());
  EXPECT_EQ(t.gpu.size(), 30000u);
  EXPECT_EQ(t.host.size(), 30000u);
  EXPECT_EQ(t.names.size(), 8u);  // 7 kernels + cudaLaunchKernel
  EXPECT_EQ(t.gpu.back().start_ns, 299'993'000);
}

TEST(TraceReaderTest, ReadsBareEventArrayAndOddValues) {
  std::string json = R"([
    {"ph":"X","cat":"Kernel","name":"k","pid":"GPU 0","tid":"stream 7","ts":1000,"dur":2.5,
     "args":{"device":0,"stream":7,"correlation":9,"grid":[2,1,1],"block":[64,1,1],
             "nested":{"a":[1,{"b":2}]},"flag":true,"nothing":null}},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":5,"tid":6,"ts":998.5,"dur":1,
     "args":{"correlation":9}},
    {"ph":"i","cat":"gpu_memory","name":"[memory]","pid":0,"tid":0,"ts":5000},
    {"ph":"M","name":"process_name","pid":0,"args":{"name":"GPU 0"}},
    {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":5,"tid":6,"ts":990,"dur":20,},
  ])";
  Trace t;
  absl::Status s = ReadTraceBuffer(json, "array", &t);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(t.gpu.size(), 1u);
  EXPECT_EQ(t.gpu[0].dur_ns, 2500);
  EXPECT_EQ(t.gpu[0].device, 0);
  EXPECT_EQ(t.gpu[0].stream, 7);
  EXPECT_EQ(t.launch_configs[t.gpu[0].launch_config].block[0], 64u);
  EXPECT_EQ(t.window_start_ns, 990'000);
  EXPECT_EQ(t.window_end_ns, 1'010'000);  // instants and metadata do not widen it
}

TEST(TraceReaderTest, SkipsUnknownTopLevelKeysOfAnyShape) {
  std::string json = R"({"a":{"traceEvents":[{"ph":"X","cat":"kernel","ts":1,"dur":1}]},
    "b":[[1,2],{"c":"d"}],"deviceProperties":[{"id":0,"numSms":10,"extra":{"x":[1]}}],
    "traceEvents":[{"ph":"X","cat":"kernel","name":"real","ts":5,"dur":1,"args":{"device":1}}],
    "z":"end"})";
  Trace t;
  ASSERT_TRUE(ReadTraceBuffer(json, "keys", &t).ok());
  ASSERT_EQ(t.gpu.size(), 1u);
  EXPECT_EQ(t.names.Name(t.gpu[0].name), "real");
  EXPECT_EQ(t.gpu[0].device, 1);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].num_sms, 10u);
}

TEST(TraceReaderTest, ErrorsSayWhatIsWrong) {
  Trace t;
  absl::Status missing = ReadTraceFile("/nonexistent/trace.json.gz", &t);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("/nonexistent/trace.json.gz"));

  absl::Status bad = ReadTraceBuffer("{\"traceEvents\":[{\"ph\":\"X\",}", "bad.json", &t);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("bad.json: not a valid JSON trace"));
  EXPECT_THAT(std::string(bad.message()), HasSubstr("at byte"));

  absl::Status no_events = ReadTraceBuffer("{\"foo\":1}", "empty.json", &t);
  EXPECT_EQ(no_events.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_events.message()), HasSubstr("no \"traceEvents\""));

  // A gzip file cut in the middle.
  profd::testing::TempDir dir;
  KinetoTraceBuilder b;
  for (int i = 0; i < 2000; ++i) b.Launch("k", i * 10.0, 2, i * 10.0 + 3, 5);
  WriteFile(dir.File("full.gz"), b.Json(), true);
  std::string gz = profd::testing::ReadFileOrEmpty(dir.File("full.gz"));
  WriteFile(dir.File("cut.gz"), gz.substr(0, gz.size() / 2), false);
  absl::Status cut = ReadTraceFile(dir.File("cut.gz"), &t);
  EXPECT_FALSE(cut.ok());
  EXPECT_THAT(std::string(cut.message()), HasSubstr("cut.gz"));
}

TEST(TraceReaderTest, FilesOfOneCaptureKeepCorrelationsApartAndShareOneClock) {
  profd::testing::TempDir dir;
  // Two processes, both using correlation 1, their ts relative to different bases 1 ms apart.
  KinetoTraceBuilder a, b;
  a.Launch("ka", 0, 2, 5, 10, 0, 7, {}, /*pid=*/11, 11);
  b.Launch("kb", 0, 2, 5, 10, 0, 7, {}, /*pid=*/22, 22);
  std::string json_b = b.Json();
  size_t pos = json_b.find("1700000000000000000");
  json_b.replace(pos, 19, "1700000000001000000");
  WriteFile(dir.File("a.json"), a.Json(), false);
  WriteFile(dir.File("b.json"), json_b, false);
  absl::StatusOr<Trace> t = ReadTraceFiles({dir.File("a.json"), dir.File("b.json")});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->gpu.size(), 2u);
  EXPECT_NE(t->gpu[0].correlation, t->gpu[1].correlation);
  EXPECT_EQ(t->gpu[1].start_ns, 1'000'000 + 5'000);
  EXPECT_EQ(t->window_end_ns, 1'000'000 + 15'000);
  Report r = Analyze(*t);
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].pid, 11);
  EXPECT_EQ(r.gpus[1].pid, 22);
  EXPECT_EQ(r.gpus[0].kernels_with_launch, 1u);
  EXPECT_EQ(r.gpus[1].kernels_with_launch, 1u);
}

}  // namespace
}  // namespace profd::analysis

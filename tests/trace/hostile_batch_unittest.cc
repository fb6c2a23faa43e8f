// Event batches no real agent sends, as any local process can send them: string ids at 2^32 - 1
// and 50,000,000, strings past every size, bytes that are not UTF-8, timestamps of 2^64 - 1.
// The string table, the trace writer and the summary must stay small, write valid JSON that the
// analysis reads back, and say what they dropped.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "analysis/analysis.h"
#include "analysis/render.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "daemon/trace/string_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFileOrEmpty;
using testing::TempDir;

// Resident memory of this process, from /proc/self/statm (pages).
size_t ResidentBytes() {
  std::string statm = ReadFileOrEmpty("/proc/self/statm");
  size_t pages = 0, resident = 0;
  std::sscanf(statm.c_str(), "%zu %zu", &pages, &resident);
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

v1::EventBatch Strings(std::initializer_list<std::pair<uint32_t, std::string>> defs) {
  v1::EventBatch b;
  for (const auto& [id, value] : defs) {
    v1::StringDef* d = b.add_strings();
    d->set_id(id);
    d->set_value(value);
  }
  return b;
}

TEST(StringTableTest, IdAtTheTopOfUint32IsOneEntry) {
  // resize(id + 1) wrapped to resize(0), then wrote text_[0xFFFFFFFF]: SIGSEGV.
  StringTable t;
  t.Add(Strings({{0xFFFFFFFFu, "_Z6kernelv"}, {1, "cudaLaunchKernel"}}));
  EXPECT_TRUE(t.status().ok());
  EXPECT_EQ(t.Text(0xFFFFFFFFu), "kernel()");
  EXPECT_EQ(t.Quoted(0xFFFFFFFFu), "\"kernel()\"");
  EXPECT_EQ(t.Text(1), "cudaLaunchKernel");
  EXPECT_EQ(t.Text(0xFFFFFFFEu), "");
  EXPECT_EQ(t.Quoted(2), "\"\"");
  EXPECT_EQ(t.size(), 2u);
  EXPECT_LT(t.bytes(), 1024u);
}

TEST(StringTableTest, FarIdCostsNoMoreThanANearOne) {
  // A 30-byte message with id 50,000,000 made profd allocate 3.1 GB (two vectors of strings).
  const size_t before = ResidentBytes();
  StringTable t;
  t.Add(Strings({{50'000'000u, "x"}}));
  const size_t grown = ResidentBytes() - std::min(before, ResidentBytes());
  EXPECT_LT(grown, 16u << 20) << "the table took " << grown << " bytes for one string";
  EXPECT_EQ(t.Text(50'000'000u), "x");
  EXPECT_LT(t.bytes(), 1024u);
}

TEST(StringTableTest, TotalSizeIsBoundedAndTheOverflowIsSaid) {
  StringTable t(/*max_bytes=*/1 << 20);
  v1::EventBatch b;
  for (uint32_t id = 1; id <= 64; ++id) {
    v1::StringDef* d = b.add_strings();
    d->set_id(id);
    d->set_value(std::string(60 << 10, 'a'));  // 64 x 60 KiB = 3.75 MiB
  }
  t.Add(b);
  absl::Status s = t.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("string table full:"));
  EXPECT_THAT(s.message(), HasSubstr("of 1048576 bytes; their events get an empty name"));
  EXPECT_LE(t.bytes(), 1u << 20);
  EXPECT_GT(t.rejected(), 40u);
  EXPECT_EQ(t.size() + t.rejected(), 64u);
  EXPECT_EQ(t.Text(64), "");  // a rejected one: empty, not garbage
  // Replacing an existing id with a smaller text still works when full.
  t.Add(Strings({{1, "short"}}));
  EXPECT_EQ(t.Text(1), "short");
}

TEST(StringTableTest, LongStringsAreCutAndLongManglingIsNotDemangled) {
  StringTable t;
  t.Add(Strings({{1, std::string(1 << 20, 'n')}}));
  EXPECT_EQ(t.Text(1).size(), StringTable::kMaxStringBytes);
  // A deeply nested mangled name: the demangler's work grows with it. Kept as it came.
  std::string mangled = "_Z1fI";
  while (mangled.size() < StringTable::kMaxDemangleBytes + 10) mangled += "St6vectorI";
  EXPECT_EQ(StringTable::Demangle(mangled), mangled);
}

TEST(StringTableTest, QuotedIsValidJsonForAnyBytes) {
  std::string bytes;
  for (int c = 0; c < 256; ++c) bytes += static_cast<char>(c);
  bytes += "\xE2\x82\xAC";  // € (valid)
  bytes += "\xF0\x9F\x98";  // truncated 4-byte sequence
  bytes += "\xED\xA0\x80";  // a UTF-16 surrogate, not allowed in UTF-8
  bytes += "\xC0\xAF";      // overlong '/'
  std::string quoted = StringTable::JsonQuote(bytes);
  std::string doc = "[" + quoted + "]";
  rapidjson::Document d;
  d.Parse<rapidjson::kParseValidateEncodingFlag>(doc.c_str());
  ASSERT_FALSE(d.HasParseError()) << rapidjson::GetParseError_En(d.GetParseError()) << " at "
                                  << d.GetErrorOffset() << " in " << quoted;
  std::string back(d[0].GetString(), d[0].GetStringLength());  // it starts with a NUL
  EXPECT_THAT(back, HasSubstr("\xE2\x82\xAC"));
  EXPECT_THAT(back, HasSubstr("\xEF\xBF\xBD"));        // U+FFFD for what was not UTF-8
  EXPECT_EQ(back.substr(0, 32), bytes.substr(0, 32));  // control characters round-trip
}

TEST(ChromeTraceWriterTest, ImpossibleTimestampsAreSkippedAndCounted) {
  TempDir dir;
  TraceProcess process;
  process.pid = 42;
  process.capture_id = "hostile";
  process.base_time_ns = 1'000'000'000;
  auto writer = ChromeTraceWriter::Create(dir.File("trace.json.gz"), process);
  ASSERT_TRUE(writer.ok()) << writer.status();
  v1::EventBatch b = Strings({{1, "k"}, {2, "cudaLaunchKernel"}});
  auto kernel = [&](uint64_t start, uint64_t end, int32_t grid_x = 1) {
    v1::Kernel* k = b.add_kernels();
    k->set_name_id(1);
    k->set_start_ns(start);
    k->set_end_ns(end);
    k->set_grid_x(grid_x);
    k->set_block_x(256);
  };
  kernel(2'000'000'000, 2'000'001'000);  // the real one
  kernel(UINT64_MAX, UINT64_MAX);        // (int64)ns - base was a signed overflow
  kernel(0, UINT64_MAX);                 // 2^64 - 1 ns long
  kernel(uint64_t{1} << 63, (uint64_t{1} << 63) + 10);
  // End before start, before the base: kept (zero length). Its grid is int32 on the wire and
  // negative: written as it came, rejected when the trace is read.
  kernel(500, 400, -5);
  v1::ApiCall* a = b.add_api_calls();
  a->set_name_id(2);
  a->set_start_ns(UINT64_MAX - 5);
  a->set_end_ns(UINT64_MAX);
  v1::MemoryOp* m = b.add_memory_ops();
  m->set_timestamp_ns(UINT64_MAX);
  StringTable names;
  names.Add(b);
  ASSERT_TRUE((*writer)->Write(b, names).ok());
  EXPECT_EQ((*writer)->events(), 2u);
  EXPECT_EQ((*writer)->invalid_events(), 5u);
  ASSERT_TRUE((*writer)->Finish({}).ok());

  rapidjson::Document trace = testing::ReadGzipJson(dir.File("trace.json.gz"));
  EXPECT_EQ(trace["profd"]["invalid_events"].GetUint64(), 5u);
  int kernels = 0;
  for (const auto& e : trace["traceEvents"].GetArray()) {
    if (std::string(e["ph"].GetString()) != "X") continue;
    ++kernels;
    EXPECT_GE(e["dur"].GetDouble(), 0.0);
    EXPECT_LT(std::fabs(e["ts"].GetDouble()), 1e10) << "µs after the base";
  }
  EXPECT_EQ(kernels, 2);

  // The capture's report, made from the batch, is the analysis of the file just written.
  CaptureAnalysis streamed(process.base_time_ns);
  streamed.AddBatch(streamed.AddProcess(42, dir.File("trace.json.gz")), b, names);
  analysis::Report s = streamed.Finish();
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeTraceFiles({dir.File("trace.json.gz")});
  ASSERT_TRUE(r.ok()) << r.status();
  for (const analysis::Report* report : {&s, &*r}) {
    EXPECT_EQ(report->kernel_count, 1u);  // the negative grid is rejected on reading
    EXPECT_EQ(report->invalid_events, 1u);
    EXPECT_EQ(report->events, 2u);
    ASSERT_EQ(report->top_kernels.size(), 1u);
    EXPECT_EQ(report->top_kernels[0].stats.max_ns, 1000);
  }
  std::string text = analysis::RenderText(*r);
  EXPECT_THAT(text, Not(HasSubstr("-9223372036")));
  EXPECT_THAT(text, HasSubstr("1 events skipped: impossible numbers"));
}

}  // namespace
}  // namespace profd

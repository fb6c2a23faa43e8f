// Traces no profiler writes: each number the analysis reads set to what crashed it or printed
// garbage (a block of 2^37 threads, JSON nested 100,000 deep, NaN and 1e300 times, durations that
// sum past INT64_MAX, ids past 2^32). Each must give a report or a clear error, never a crash,
// an overflow (the ASan+UBSan build runs these too) or an impossible number in the output.
#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "analysis/occupancy.h"
#include "analysis/render.h"
#include "analysis/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The 118-byte trace that killed profd (import) and profctl (report) with SIGFPE.
constexpr char kHugeBlock[] =
    R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":0,"dur":1,"args":{"grid":[1,1,1],"block":[65536,65536,32]}}]})";

std::string Kernel(const std::string& ts, const std::string& dur, const std::string& args = "") {
  return absl::StrCat(R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":)", ts,
                      R"(,"dur":)", dur, R"(,"args":{"device":0,"stream":7)", args, "}}");
}

std::string Events(const std::vector<std::string>& events, const std::string& top = "") {
  std::string out = "{" + top + R"("traceEvents":[)";
  for (size_t i = 0; i < events.size(); ++i) out += (i ? "," : "") + events[i];
  return out + "]}";
}

// Whether word occurs in text as a word of its own ("nan" in "-nan %", not in "dominant").
bool HasWord(const std::string& text, const std::string& word) {
  auto letter = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    bool before = at > 0 && letter(text[at - 1]);
    bool after = at + word.size() < text.size() && letter(text[at + word.size()]);
    if (!before && !after) return true;
  }
  return false;
}

// What a user may never see in a report: wrapped times, NaN, infinities.
void ExpectNoImpossibleNumbers(const Report& r) {
  std::string text = RenderText(r);
  std::string json = ReportToJson(r);
  std::string html = RenderHtml(r, "hostile");  // its axes multiply the window (UBSan build)
  for (const std::string* out : {&text, &json, &html}) {
    EXPECT_FALSE(HasWord(*out, "nan")) << *out;
    EXPECT_FALSE(HasWord(*out, "inf")) << *out;
    EXPECT_THAT(*out, Not(HasSubstr("-9223372036"))) << *out;
  }
  EXPECT_GE(r.window_ns, 0);
  EXPECT_GE(r.kernel_time_ns, 0);
  EXPECT_GE(r.api_time_ns, 0);
  for (const GpuRow& g : r.gpus) {
    EXPECT_GE(g.busy_ns, 0);
    EXPECT_GE(g.idle_ns, 0);
    EXPECT_TRUE(std::isfinite(g.busy_ratio));
  }
  for (const KernelRow& k : r.top_kernels) {
    EXPECT_GE(k.stats.total_ns, 0);
    EXPECT_TRUE(std::isfinite(k.est_occupancy));
    EXPECT_TRUE(std::isfinite(k.theoretical_occupancy));
    EXPECT_TRUE(std::isfinite(k.time_ratio));
  }
}

Report ReadAndAnalyze(const std::string& json) {
  Trace t;
  absl::Status s = ReadTraceBuffer(json, "hostile.json", &t);
  EXPECT_TRUE(s.ok()) << s;
  return Analyze(t);
}

TEST(HostileTraceTest, BlockOfTwoToThe37ThreadsIsReportedNotDividedByZero) {
  ASSERT_EQ(sizeof(kHugeBlock) - 1, 118u);
  Report r = ReadAndAnalyze(kHugeBlock);
  ASSERT_EQ(r.top_kernels.size(), 1u);
  EXPECT_EQ(r.kernel_count, 1u);  // the kernel ran (busy time counts), only occupancy is unknown
  EXPECT_EQ(r.top_kernels[0].est_occupancy, -1);
  EXPECT_EQ(r.impossible_launches, 1u);
  EXPECT_THAT(RenderText(r), HasSubstr("1 kernel launches have a launch configuration no GPU can "
                                       "run (e.g. k: block [65536,65536,32] has 137438953472 "
                                       "threads, the device allows 1024 per block)"));
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, OccupancyRejectsEveryLaunchNoDeviceCanRun) {
  OccupancyEstimate e;
  LaunchConfig c;
  c.grid[0] = c.grid[1] = c.grid[2] = 1;
  // 2^32 x 2^32 x 2^32 threads wrapped a 64-bit product to 0 before it saturated.
  c.block[0] = c.block[1] = c.block[2] = UINT32_MAX;
  EXPECT_EQ(c.ThreadsPerBlock(), UINT64_MAX);
  EXPECT_FALSE(EstimateOccupancy(c, DefaultDeviceProperties(0), &e));
  c.block[0] = 2048;  // more than any block, fewer than an SM could hold
  c.block[1] = c.block[2] = 1;
  EXPECT_FALSE(EstimateOccupancy(c, DefaultDeviceProperties(0), &e));
  EXPECT_EQ(LaunchConfigProblem(c, DefaultDeviceProperties(0)),
            "block [2048,1,1] has 2048 threads, the device allows 1024 per block");
  // A device whose SM holds fewer threads than a warp: 0 warps per SM was a division by zero.
  DeviceProperties tiny = DefaultDeviceProperties(0);
  tiny.max_threads_per_sm = 16;
  tiny.max_threads_per_block = 16;
  EXPECT_EQ(DevicePropertiesProblem(tiny), "maxThreadsPerMultiprocessor 16 below warpSize 32");
  c.block[0] = 16;
  ASSERT_TRUE(EstimateOccupancy(c, tiny, &e));  // estimated for the assumed device instead
  EXPECT_TRUE(std::isfinite(e.theoretical));
  EXPECT_GT(e.max_warps_per_sm, 0u);
  // Registers and shared memory at their 32-bit maximum.
  c.block[0] = 256;
  c.registers_per_thread = UINT32_MAX;
  c.shared_memory_bytes = UINT32_MAX;
  ASSERT_TRUE(EstimateOccupancy(c, DefaultDeviceProperties(0), &e));
  EXPECT_EQ(e.active_blocks_per_sm, 0u);
  EXPECT_EQ(e.theoretical, 0);
}

TEST(HostileTraceTest, ImpossibleDevicePropertiesAreIgnoredWithANote) {
  std::string json = Events(
      {Kernel("0", "10", R"(,"grid":[264,1,1],"block":[256,1,1],"registers per thread":64)")},
      R"("deviceProperties":[{"id":0,"numSms":0,"warpSize":4096,"maxThreadsPerMultiprocessor":3}],)");
  Report r = ReadAndAnalyze(json);
  EXPECT_THAT(RenderText(r), HasSubstr("deviceProperties of device 0 are impossible (warpSize "
                                       "4096 (more than 1024)): they are ignored."));
  ASSERT_EQ(r.top_kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(r.top_kernels[0].est_occupancy, 0.25);  // the assumed H100's answer
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, JsonNested100000DeepIsAnErrorNotAStackOverflow) {
  std::string deep = R"({"traceEvents":[{"ph":"X","args":)";
  for (int i = 0; i < 100'000; ++i) deep += "[";
  for (int i = 0; i < 100'000; ++i) deep += "]";
  deep += "}]}";
  Trace t;
  absl::Status s = ReadTraceBuffer(deep, "deep.json", &t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("deep.json: JSON nested deeper than 64 levels at byte 95. A "
                                     "Chrome trace-event file nests about 6 levels"));
  // Objects as well as arrays, and a bare array at the root.
  std::string objects = "[";
  for (int i = 0; i < 100'000; ++i) objects += R"({"a":)";
  EXPECT_THAT(ReadTraceBuffer(objects, "objects.json", &t).message(),
              HasSubstr("nested deeper than 64 levels"));
}

TEST(HostileTraceTest, ImpossibleTimesAreSkippedAndCounted) {
  // NaN and Infinity are accepted by the reader (kParseNanAndInfFlag: Kineto writes them).
  std::string json = Events({
      Kernel("10", "5"),          // the one real kernel
      Kernel("NaN", "5"),         // llround(NaN) was INT64_MIN: "-9223372036.85 s"
      Kernel("Infinity", "5"),    //
      Kernel("1e300", "5"),       // past 2^62 ns
      Kernel("-1e300", "5"),      //
      Kernel("20", "NaN"),        //
      Kernel("20", "-Infinity"),  //
      Kernel("20", "-5"),         // negative duration
      Kernel("20", "1e18"),       // 31,000 years
      Kernel("1e16", "1e15"),     // ts 1e19 ns: past INT64_MAX
      R"({"ph":"X","cat":"cpu_op","name":"op","ts":NaN,"dur":1})",  // would widen the window
  });
  Report r = ReadAndAnalyze(json);
  EXPECT_EQ(r.kernel_count, 1u);
  EXPECT_EQ(r.invalid_events, 10u);
  EXPECT_EQ(r.window_ns, 5'000);
  EXPECT_EQ(r.kernel_time_ns, 5'000);
  EXPECT_THAT(RenderText(r), HasSubstr("10 events skipped: impossible numbers"));
  rapidjson::Document d;
  d.Parse(ReportToJson(r).c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_EQ(d["invalid_events"].GetUint64(), 10u);
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, DurationsSummingPastInt64MaxSaturate) {
  // 16 kernels of 2^60 ns (the longest allowed) on 16 streams: 2^64 ns of kernel time, in a
  // window of 2^60. The sums were signed overflows (UBSan) and printed negative totals.
  std::vector<std::string> events;
  const std::string dur = absl::StrCat(static_cast<double>(int64_t{1} << 60) / 1000);
  for (int i = 0; i < 16; ++i) {
    events.push_back(absl::StrCat(R"({"ph":"X","cat":"kernel","name":"k","ts":0,"dur":)", dur,
                                  R"(,"args":{"device":0,"stream":)", i, "}}"));
    events.push_back(
        absl::StrCat(R"({"ph":"X","cat":"cuda_runtime","name":"cudaDeviceSynchronize")",
                     R"(,"pid":1,"tid":)", i, R"(,"ts":0,"dur":)", dur, "}"));
    events.push_back(
        absl::StrCat(R"j({"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pageable -> Device)")j",
                     R"(,"ts":0,"dur":)", dur, R"(,"args":{"device":0,"stream":)", i,
                     R"(,"bytes":9223372036854775807}})"));
  }
  Report r = ReadAndAnalyze(Events(events));
  EXPECT_EQ(r.invalid_events, 0u);
  EXPECT_EQ(r.kernel_count, 16u);
  EXPECT_EQ(r.kernel_time_ns, INT64_MAX);
  EXPECT_EQ(r.api_time_ns, INT64_MAX);
  ASSERT_EQ(r.top_kernels.size(), 1u);
  EXPECT_EQ(r.top_kernels[0].stats.total_ns, INT64_MAX);
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].sync_ns, INT64_MAX);  // 16 threads each blocked the whole window
  ASSERT_FALSE(r.copies.empty());
  EXPECT_EQ(r.copies[0].bytes, UINT64_MAX);
  EXPECT_EQ(r.copies[0].total_ns, INT64_MAX);
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, IdsAndSizesThatDoNotFitAreSkipped) {
  std::string json = Events({
      Kernel("0", "1"),
      Kernel("0", "1", R"(,"correlation":1099511627776)"),  // 2^40: collides across files
      Kernel("0", "1", R"(,"grid":[-1,1,1])"),
      Kernel("0", "1", R"(,"block":[4294967296,1,1])"),
      Kernel("0", "1", R"(,"registers per thread":1e30)"),
      Kernel("0", "1", R"(,"shared memory":2.5)"),
      R"({"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","ts":0,"dur":1,"args":{"bytes":-4}})",
      // tids past int64 in the strings PyTorch sometimes writes: the digit loop overflowed.
      R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":"stream 99999999999999999999999","ts":0,"dur":1})",
      R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4294967296,"tid":1,"ts":0,"dur":1})",
      R"({"ph":"X","cat":"kernel","name":"k","ts":0,"dur":1,"args":{"device":2147483648}})",
  });
  Report r = ReadAndAnalyze(json);
  EXPECT_EQ(r.kernel_count, 1u);
  EXPECT_EQ(r.invalid_events, 9u);
  EXPECT_TRUE(r.apis.empty());
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, BaseTimeThatIsNoTimeIsAnError) {
  Trace t;
  absl::Status s =
      ReadTraceBuffer(Events({Kernel("0", "1")}, R"("baseTimeNanoseconds":1e300,)"), "b.json", &t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("b.json: baseTimeNanoseconds 1e+300 is not a Unix time in ns "
                                     "(expected an integer from 0 to 4611686018427387904)"));
  s = ReadTraceBuffer(Events({Kernel("0", "1")}, R"("baseTimeNanoseconds":-5,)"), "b.json", &t);
  EXPECT_THAT(s.message(), HasSubstr("baseTimeNanoseconds -5 is not a Unix time"));
}

TEST(HostileTraceTest, WhatATraceMayMakeUsHoldIsBounded) {
  // A small gzip file inflates to gigabytes of JSON; profd analyses imports in its own memory.
  std::vector<std::string> events;
  for (int i = 0; i < 20; ++i) events.push_back(Kernel(absl::StrCat(i), "1"));
  Trace t;
  ReadLimits limits;
  limits.max_events = 10;
  absl::Status s = ReadTraceBuffer(Events(events), "many.json", &t, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("many.json: more than 10 GPU and CUDA API events, the most "
                                     "one analysis holds at byte "));
  EXPECT_THAT(s.message(), HasSubstr("Analyse a shorter capture, or fewer files at once."));
  EXPECT_LE(t.gpu.size(), 10u);

  events.clear();
  for (int i = 0; i < 20; ++i) {
    events.push_back(absl::StrCat(R"({"ph":"X","cat":"kernel","name":")", std::string(100, 'a' + i),
                                  R"(","ts":0,"dur":1})"));
  }
  // Names past the NameTable's limits share one name: the trace still reads, in bounded memory.
  Trace names;
  names.names = NameTable({.max_names = 1 << 16, .max_bytes = 1000});
  ASSERT_TRUE(ReadTraceBuffer(Events(events), "names.json", &names).ok());
  EXPECT_LE(names.names.bytes(), 1000u);
  EXPECT_EQ(names.gpu.size(), 20u);
  EXPECT_EQ(names.names.folded(), 10u);  // 10 names of 100 bytes fit in 1000
  Report r = Analyze(names);
  EXPECT_EQ(r.kernel_count, 20u);
  EXPECT_EQ(r.folded_kernels, 10u);
  EXPECT_EQ(r.top_kernels[0].name, NameTable::kOtherName);
}

TEST(HostileTraceTest, FilesACenturyApartDropWhatLeavesTheClock) {
  // The second file's base is 2^62 ns after the first's: its events shift past the model's limit.
  Trace t;
  ASSERT_TRUE(
      ReadTraceBuffer(Events({Kernel("0", "1")}, R"("baseTimeNanoseconds":0,)"), "a", &t).ok());
  ASSERT_TRUE(
      ReadTraceBuffer(Events({Kernel("1e9", "1")}, R"("baseTimeNanoseconds":4611686018427387904,)"),
                      "b", &t)
          .ok());
  Report r = Analyze(t);
  EXPECT_EQ(r.kernel_count, 1u);
  EXPECT_EQ(r.invalid_events, 1u);
  ExpectNoImpossibleNumbers(r);
}

TEST(HostileTraceTest, NamesCannotDriveTheTerminal) {
  // A kernel name that clears the screen and forges a finding line, and a C1 CSI (U+009B).
  std::string json = Events(
      {R"({"ph":"X","cat":"kernel","name":"evil\u001b[2J\n  1. [CRITICAL] forged\u009b31m","ts":0,"dur":1,"args":{}})"});
  Report r = ReadAndAnalyze(json);
  std::string text = RenderText(r);
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(text, Not(HasSubstr("\xc2\x9b")));
  EXPECT_THAT(text, Not(HasSubstr("\n  1. [CRITICAL] forged")));
  EXPECT_THAT(text, HasSubstr("evil\\x1b[2J\\n  1. [CRITICAL] forged\\u{009b}31m"));
}

TEST(HostileTraceTest, ATraceBuiltInMemoryIsCheckedToo) {
  // Analyze() is public: a Trace filled by other code gets the same limits as one read from JSON.
  Trace t;
  t.names.Intern("k");
  GpuActivity ok;
  ok.start_ns = 0;
  ok.dur_ns = 10;
  GpuActivity bad = ok;
  bad.start_ns = INT64_MAX;
  bad.dur_ns = INT64_MAX;
  GpuActivity bad_name = ok;
  bad_name.name = 7;  // no such name
  GpuActivity bad_config = ok;
  bad_config.launch_config = 99;
  t.gpu = {ok, bad, bad_name, bad_config};
  HostCall call;
  call.start_ns = INT64_MIN;
  call.dur_ns = -1;
  t.host = {call};
  t.window_start_ns = INT64_MIN;
  t.window_end_ns = INT64_MAX;
  Report r = Analyze(t);
  EXPECT_EQ(r.kernel_count, 1u);
  EXPECT_EQ(r.invalid_events, 4u);
  ExpectNoImpossibleNumbers(r);
}

}  // namespace
}  // namespace profd::analysis

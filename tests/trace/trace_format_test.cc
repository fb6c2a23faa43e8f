// The table of trace formats (daemon/trace/trace_format.h): every entry's names find it again, and
// what its writer writes its reader streams back, whole or repaired after a cut — through the
// table alone, as the capture pipeline, recovery and profctl use it.
#include "daemon/trace/trace_format.h"

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "analysis/trace_reader.h"
#include "daemon/trace/trace_repair.h"
#include "daemon/trace/trace_writer.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::TempDir;

struct CountingSink : analysis::TraceEventSink {
  void Add(const analysis::GpuActivity&) override { ++gpu; }
  void Add(const analysis::HostCall&) override { ++host; }
  void Add(const analysis::CpuOp&) override {}
  void Add(const analysis::CounterSample&) override {}
  uint64_t gpu = 0, host = 0;
};

TEST(TraceFormatTest, EveryFormatIsFoundByEachOfItsNames) {
  std::set<std::string_view> names, manifests, suffixes;
  for (const TraceFormatInfo& f : TraceFormats()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_EQ(&TraceFormatOf(f.format), &f);
    EXPECT_EQ(TraceFormatNamed(f.name), &f);
    EXPECT_EQ(TraceFormatOfManifest(f.manifest_format), &f);
    EXPECT_FALSE(f.description.empty());
    ASSERT_FALSE(f.suffixes.empty());
    EXPECT_EQ(f.suffixes.front(), f.capture_suffix);
    for (std::string_view suffix : f.suffixes) {
      EXPECT_EQ(TraceFormatOfName("rank0" + std::string(suffix)), &f) << suffix;
      EXPECT_TRUE(suffixes.insert(suffix).second) << suffix << " names two formats";
    }
    EXPECT_TRUE(names.insert(f.name).second);
    EXPECT_TRUE(manifests.insert(f.manifest_format).second);

    const std::string file = TraceFileName(4242, f.format);
    uint32_t pid = 0;
    TraceFormat format{};
    ASSERT_TRUE(ParseTraceFileName(file, &pid, &format)) << file;
    EXPECT_EQ(pid, 4242u);
    EXPECT_EQ(format, f.format);
    EXPECT_NE(TraceFormatChoices().find(f.name), std::string::npos);
  }
  EXPECT_EQ(TraceFormats().front().format, TraceFormat::kChromeJson);  // the default
  EXPECT_EQ(TraceFormatChoices(), "json or perfetto");
  EXPECT_EQ(TraceFormatOfManifest(kKinetoTraceManifestFormat)->format, TraceFormat::kChromeJson);
  EXPECT_EQ(TraceFormatNamed("JSON"), nullptr);
  EXPECT_EQ(TraceFormatOfManifest("parquet"), nullptr);
  EXPECT_EQ(TraceFormatOfName("summary.txt"), nullptr);
  uint32_t pid = 0;
  TraceFormat format{};
  for (const char* not_a_trace :
       {"trace-.json.gz", "trace-12x.json.gz", "trace--1.json.gz", "trace-99999999999.json.gz",
        "summary.json", "trace-7.json", "xtrace-7.json.gz", "trace-7.pftrace"}) {
    EXPECT_FALSE(ParseTraceFileName(not_a_trace, &pid, &format)) << not_a_trace;
  }
}

TEST(TraceFormatTest, WhatEachWriterWritesItsReaderStreamsBackWholeOrRepaired) {
  const auto batches = testing::ReadRecordedBatches(
      testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  uint64_t on_gpu = 0;  // kernels, copies and memsets
  for (const v1::EventBatch& b : batches) {
    on_gpu += b.kernels_size() + b.memcpys_size() + b.memsets_size();
  }
  ASSERT_GE(on_gpu, 1000u);
  for (const TraceFormatInfo& f : TraceFormats()) {
    SCOPED_TRACE(std::string(f.name));
    TempDir dir;
    TraceProcess process;
    process.pid = 465;
    process.capture_id = "fixture";
    const std::string path = dir.File(TraceFileName(process.pid, f.format));
    auto writer = f.create_writer(path, process, 1, nullptr);
    ASSERT_TRUE(writer.ok()) << writer.status();
    StringTable names;
    for (const v1::EventBatch& b : batches) {
      names.Add(b);
      ASSERT_TRUE((*writer)->Write(b, names).ok());
    }
    ASSERT_TRUE((*writer)->Finish({}).ok());
    EXPECT_EQ(&TraceFormatOfFile(path), &f);

    analysis::Trace tables;
    CountingSink whole;
    ASSERT_TRUE(f.stream(path, &tables, &whole).ok());
    EXPECT_EQ(whole.gpu, on_gpu);
    auto untouched = f.repair(path, process, "killed", 1);
    ASSERT_TRUE(untouched.ok()) << untouched.status();
    EXPECT_FALSE(untouched->repaired);

    // Cut as a kill would leave it: the repaired file reads, with some of the kernels.
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 5);
    auto repaired = f.repair(path, process, "killed", 1);
    ASSERT_TRUE(repaired.ok()) << repaired.status();
    EXPECT_TRUE(repaired->repaired);
    analysis::Trace cut_tables;
    CountingSink cut;
    ASSERT_TRUE(f.stream(path, &cut_tables, &cut).ok());
    EXPECT_GT(cut.gpu, 0u);
    EXPECT_LT(cut.gpu, on_gpu);
  }
}

}  // namespace
}  // namespace profd

// Whole traces: the committed synthetic GPT-2-like fixture (and that it still matches its
// generator), a trace written by profd's own ChromeTraceWriter, and any real GPU capture
// committed under tests/fixtures/.
#include <dirent.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "analysis/analysis.h"
#include "analysis/render.h"
#include "analysis/trace_reader.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/synthetic_trace.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using ::testing::Contains;

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return "";
  std::string out;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  gzclose(f);
  return out;
}

std::vector<std::string> FindingIds(const Report& r) {
  std::vector<std::string> ids;
  for (const Finding& f : r.findings) ids.push_back(f.id);
  return ids;
}

const std::string kFixture = "tests/analysis/fixtures/gpt2_synthetic.json.gz";

TEST(FixtureTest, SyntheticGpt2FixtureMatchesItsGenerator) {
  std::string committed = Gunzip(profd::testing::SourcePath(kFixture));
  std::string generated;
  testing::GenerateGpt2LikeTrace({}, [&](const std::string& s) { generated += s; });
  EXPECT_TRUE(committed == generated)
      << "regenerate with: build/tests/analysis/make_synthetic_trace " << kFixture;
}

TEST(FixtureTest, SyntheticGpt2ReportReadsLikeTheSeeds) {
  absl::StatusOr<Report> r = AnalyzeTraceFiles({profd::testing::SourcePath(kFixture)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->events, 5280u);
  EXPECT_EQ(r->kernel_count, 10u * (3 + 12 * 14 + 3));
  EXPECT_EQ(r->distinct_kernels, 8u);
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].pid, 4242);
  EXPECT_GT(r->gpus[0].busy_ratio, 0.3);
  EXPECT_LT(r->gpus[0].busy_ratio, 0.8);
  EXPECT_GT(r->gpus[0].idle.host_wait_ns, r->gpus[0].idle.kernel_wait_ns);
  EXPECT_THAT(r->top_kernels[0].name, ::testing::StartsWith("sm90_xmma_gemm"));
  EXPECT_FALSE(r->devices[0].assumed);
  std::vector<std::string> ids = FindingIds(*r);
  EXPECT_THAT(ids, Contains("launch_bound"));
  EXPECT_THAT(ids, Contains("pageable_memory"));
  EXPECT_THAT(ids, Contains("dominant_kernels"));
  EXPECT_THAT(ids, Contains("low_occupancy"));
  EXPECT_THAT(ids, ::testing::Not(Contains("copies_hot_path")));
}

// profd's writer, fed with an EventBatch the way the capture pipeline feeds it.
TEST(FixtureTest, ReadsTracesWrittenByProfd) {
  profd::testing::TempDir dir;
  TraceProcess process;
  process.pid = 777;
  process.comm = "python3";
  process.capture_id = "20260101T000000Z-test-00000001";
  process.base_time_ns = 1'700'000'000'000'000'000;
  auto writer = ChromeTraceWriter::Create(dir.File("trace-777.json.gz"), process);
  ASSERT_TRUE(writer.ok()) << writer.status();
  v1::EventBatch batch;
  auto* s1 = batch.add_strings();
  s1->set_id(1);
  s1->set_value("_Z4gemmPfS_");
  auto* s2 = batch.add_strings();
  s2->set_id(2);
  s2->set_value("cudaLaunchKernel");
  auto* s3 = batch.add_strings();
  s3->set_id(3);
  s3->set_value("cudaMemcpyAsync");
  const uint64_t base = process.base_time_ns;
  auto* api = batch.add_api_calls();
  api->set_start_ns(base + 1'000);
  api->set_end_ns(base + 6'000);
  api->set_tid(778);
  api->set_correlation(5);
  api->set_name_id(2);
  auto* k = batch.add_kernels();
  k->set_start_ns(base + 10'000);
  k->set_end_ns(base + 30'000);
  k->set_device(0);
  k->set_stream(7);
  k->set_correlation(5);
  k->set_name_id(1);
  k->set_grid_x(264);
  k->set_grid_y(1);
  k->set_grid_z(1);
  k->set_block_x(256);
  k->set_block_y(1);
  k->set_block_z(1);
  k->set_registers_per_thread(64);
  auto* copy_api = batch.add_api_calls();
  copy_api->set_start_ns(base + 31'000);
  copy_api->set_end_ns(base + 40'000);
  copy_api->set_tid(778);
  copy_api->set_correlation(6);
  copy_api->set_name_id(3);
  auto* m = batch.add_memcpys();
  m->set_start_ns(base + 32'000);
  m->set_end_ns(base + 36'000);
  m->set_device(0);
  m->set_stream(7);
  m->set_correlation(6);
  m->set_bytes(400'000);
  m->set_copy_kind(v1::COPY_KIND_DTOH);
  m->set_src_kind(v1::MEMORY_KIND_DEVICE);
  m->set_dst_kind(v1::MEMORY_KIND_PAGEABLE);
  auto* sync = batch.add_syncs();
  sync->set_start_ns(base + 50'000);
  sync->set_end_ns(base + 60'000);
  sync->set_kind(v1::SYNC_KIND_STREAM_SYNCHRONIZE);
  sync->set_stream(7);
  StringTable names;
  names.Add(batch);
  ASSERT_TRUE((*writer)->Write(batch, names).ok());
  ChromeTraceWriter::Footer footer;
  v1::DeviceInfo d;
  d.set_ordinal(0);
  d.set_name("NVIDIA H200");
  d.set_multiprocessors(66);
  d.set_max_threads_per_multiprocessor(2048);
  d.set_max_blocks_per_multiprocessor(32);
  d.set_max_registers_per_multiprocessor(65536);
  d.set_max_shared_memory_per_multiprocessor(233472);
  d.set_warp_size(32);
  d.set_compute_major(9);
  footer.devices.push_back(d);
  ASSERT_TRUE((*writer)->Finish(footer).ok());

  absl::StatusOr<Report> r = AnalyzeTraceFiles({dir.File("trace-777.json.gz")});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].format, "profd");
  EXPECT_TRUE(r->inputs[0].gzip);
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].pid, 777);
  EXPECT_EQ(r->gpus[0].busy_ns, 20'000);
  EXPECT_EQ(r->gpus[0].launch_delay_p50_ns, 4'000);
  ASSERT_EQ(r->top_kernels.size(), 1u);
  EXPECT_EQ(r->top_kernels[0].stats.total_ns, 20'000);
  EXPECT_DOUBLE_EQ(r->top_kernels[0].est_occupancy, 0.5);  // 4 blocks/SM on 66 SMs
  ASSERT_EQ(r->copies.size(), 1u);
  EXPECT_EQ(r->copies[0].kind, "DtoH");
  EXPECT_EQ(r->copies[0].memory, "Pageable");
  EXPECT_DOUBLE_EQ(r->copies[0].bandwidth_gbps, 100.0);
  EXPECT_EQ(r->devices[0].name, "NVIDIA H200");
  bool stream_sync = false;
  for (const SyncRow& s : r->syncs) stream_sync |= s.kind == "Stream Sync";
  EXPECT_TRUE(stream_sync);
}

// A real H200 capture (tests/fixtures/README.md: 1000 launches of profd_test_kernel, 8 MiB
// pageable copies each way, one 8 MiB memset, one device synchronize), written by profd's
// writer the way the capture pipeline writes it, then analyzed.
TEST(FixtureTest, RealH200CaptureThroughProfdsWriter) {
  std::vector<v1::EventBatch> batches = profd::testing::ReadRecordedBatches(
      profd::testing::SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  ASSERT_FALSE(batches.empty());
  uint64_t lo = UINT64_MAX;
  for (const auto& b : batches) {
    for (const auto& k : b.kernels()) lo = std::min<uint64_t>(lo, k.start_ns());
  }
  profd::testing::TempDir dir;
  TraceProcess process;
  process.pid = 465;
  process.comm = "cuda_workload";
  process.capture_id = "fixture";
  process.base_time_ns = static_cast<int64_t>(lo / 1000000 * 1000000);
  auto writer = ChromeTraceWriter::Create(dir.File("trace-465.json.gz"), process);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StringTable names;
  ChromeTraceWriter::Footer footer;
  for (const auto& b : batches) {
    names.Add(b);
    ASSERT_TRUE((*writer)->Write(b, names).ok());
    for (const auto& d : b.devices()) footer.devices.push_back(d);
  }
  ASSERT_TRUE((*writer)->Finish(footer).ok());

  absl::StatusOr<Report> r = AnalyzeTraceFiles({dir.File("trace-465.json.gz")});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inputs[0].format, "profd");
  EXPECT_EQ(r->kernel_count, 1000u);
  ASSERT_FALSE(r->top_kernels.empty());
  EXPECT_EQ(r->top_kernels[0].name, "profd_test_kernel(int*, int)");
  EXPECT_EQ(r->top_kernels[0].stats.count, 1000u);
  EXPECT_GE(r->top_kernels[0].est_occupancy, 0.0);
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].pid, 465);
  EXPECT_EQ(r->gpus[0].kernels_with_launch, 1000u);
  EXPECT_GT(r->gpus[0].launch_delay_p50_ns, 0);
  EXPECT_EQ(r->gpus[0].busy_ns + r->gpus[0].copy_only_ns + r->gpus[0].idle_ns, r->window_ns);
  std::map<std::string, uint64_t> bytes;
  for (const CopyRow& c : r->copies) bytes[c.kind + " " + c.memory] = c.bytes;
  EXPECT_EQ(bytes["HtoD Pageable"], 8u << 20);
  EXPECT_EQ(bytes["DtoH Pageable"], 8u << 20);
  EXPECT_EQ(bytes["Memset Device"], 8u << 20);
  bool device_sync = false;
  for (const SyncRow& s : r->syncs) device_sync |= s.kind == "cudaDeviceSynchronize";
  EXPECT_TRUE(device_sync);
  std::vector<std::string> ids = FindingIds(*r);
  EXPECT_THAT(ids, Contains("pageable_memory"));  // 16 MiB through pageable buffers
  std::printf("%s", RenderText(*r).c_str());      // kept in the test log for reading
}

// Real captures committed as trace files: every one must read and add up.
TEST(FixtureTest, RealCapturesUnderTestsFixturesAddUp) {
  std::vector<std::string> traces;
  std::vector<std::string> dirs = {profd::testing::SourcePath("tests/fixtures")};
  while (!dirs.empty()) {
    std::string d = dirs.back();
    dirs.pop_back();
    DIR* dir = opendir(d.c_str());
    if (dir == nullptr) continue;
    while (dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = d + "/" + name;
      if (e->d_type == DT_DIR) {
        dirs.push_back(path);
      } else if (absl::EndsWith(name, ".json.gz") || absl::EndsWith(name, ".json")) {
        if (absl::StrContains(name, "trace")) traces.push_back(path);
      }
    }
    closedir(dir);
  }
  if (traces.empty()) GTEST_SKIP() << "no real capture under tests/fixtures/ yet";
  for (const std::string& path : traces) {
    SCOPED_TRACE(path);
    absl::StatusOr<Report> r = AnalyzeTraceFiles({path});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->events, 0u);
    for (const GpuRow& g : r->gpus) {
      EXPECT_GE(g.busy_ratio, 0.0);
      EXPECT_LE(g.busy_ratio, 1.0);
      EXPECT_EQ(g.busy_ns + g.copy_only_ns + g.idle_ns, r->window_ns);
      EXPECT_EQ(g.idle.host_wait_ns + g.idle.kernel_wait_ns + g.idle.other_ns, g.idle_ns);
    }
  }
}

}  // namespace
}  // namespace profd::analysis

// The straggler across ranks: from each rank's own report, the one whose work outside the
// collectives runs long while the others wait in theirs, named with its numbers; and no finding
// when the ranks are even (a test that cannot fail is a defect: both sides are checked).
#include "analysis/cross_rank.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace profd::analysis {
namespace {

constexpr int64_t kMs = 1000000;

// A rank's report: compute kernels and NCCL kernels of the given totals, one GPU.
Report RankReport(int64_t compute_ns, int64_t nccl_ns) {
  Report r;
  r.window_ns = 100 * kMs;
  r.kernel_time_ns = compute_ns + nccl_ns;
  KernelRow gemm;
  gemm.name = "sm90_xmma_gemm_f16f16_f16f32";
  gemm.stats.total_ns = compute_ns;
  KernelRow nccl;
  nccl.name = "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  nccl.stats.total_ns = nccl_ns;
  r.top_kernels = {gemm, nccl};
  GpuRow gpu;
  gpu.busy_ratio = static_cast<double>(r.kernel_time_ns) / r.window_ns;
  gpu.idle_ns = r.window_ns - r.kernel_time_ns;
  r.gpus = {gpu};
  return r;
}

TEST(CrossRankTest, NamesTheRankTheOthersWaitFor) {
  // Rank 2 computes 60 ms while the others compute 40 and wait 20 more in the all-reduce.
  std::vector<Report> reports = {RankReport(40 * kMs, 22 * kMs), RankReport(41 * kMs, 21 * kMs),
                                 RankReport(60 * kMs, 2 * kMs), RankReport(39 * kMs, 23 * kMs)};
  std::vector<RankInput> ranks;
  for (size_t i = 0; i < reports.size(); ++i) {
    ranks.push_back(
        {"train/trainer-" + std::to_string(i) + "@gpu-node-" + std::to_string(i + 1), &reports[i]});
  }
  CrossRankReport out = AnalyzeRanks(ranks);
  ASSERT_EQ(out.ranks.size(), 4u);
  EXPECT_EQ(out.ranks[2].collective_ns, 2 * kMs);
  EXPECT_EQ(out.ranks[2].compute_ns, 60 * kMs);
  ASSERT_EQ(out.findings.size(), 1u);
  const Finding& f = out.findings[0];
  EXPECT_EQ(f.id, "straggler");
  EXPECT_NEAR(f.value, 60.0 / 40.0, 1e-9);  // over the others' median compute
  EXPECT_TRUE(absl::StartsWith(f.title, "train/trainer-2@gpu-node-3 is the straggler")) << f.title;
  ASSERT_EQ(f.evidence.size(), 2u);
  EXPECT_TRUE(absl::StrContains(f.evidence[1], "waited in collective kernels")) << f.evidence[1];
  const std::string text = RenderRanks(out);
  EXPECT_TRUE(absl::StrContains(text, "train/trainer-2@gpu-node-3")) << text;
  EXPECT_TRUE(absl::StrContains(RanksToJson(out), "\"id\":\"straggler\""));
}

TEST(CrossRankTest, EvenRanksHaveNoStraggler) {
  std::vector<Report> reports = {RankReport(40 * kMs, 5 * kMs), RankReport(44 * kMs, 2 * kMs),
                                 RankReport(42 * kMs, 3 * kMs)};
  std::vector<RankInput> ranks;
  for (const Report& r : reports) ranks.push_back({"rank", &r});
  CrossRankReport out = AnalyzeRanks(ranks);
  EXPECT_TRUE(out.findings.empty());
  EXPECT_TRUE(absl::StrContains(RenderRanks(out), "No straggler"));
  // One rank alone is compared with nobody.
  EXPECT_TRUE(AnalyzeRanks({ranks[0]}).findings.empty());
}

TEST(CrossRankTest, TinyDifferencesAreNoise) {
  // 3x, but 20 us more in all: below the absolute threshold.
  std::vector<Report> reports = {RankReport(10000, 0), RankReport(30000, 0)};
  CrossRankReport out = AnalyzeRanks({{"a", &reports[0]}, {"b", &reports[1]}});
  EXPECT_TRUE(out.findings.empty());
}

TEST(CrossRankTest, CollectiveKernelNames) {
  EXPECT_TRUE(IsCollectiveKernel("ncclKernel_AllGather_RING_LL_Sum_int8_t"));
  EXPECT_TRUE(IsCollectiveKernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"));
  EXPECT_FALSE(IsCollectiveKernel("ampere_sgemm_128x64_nn"));
}

}  // namespace
}  // namespace profd::analysis

// profctl diff of two captures: windows of different length are compared per second, or per
// step where both traces mark steps, and the comparison says so; equal windows keep totals.
#include "analysis/report_diff.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A report of `seconds` in which one kernel ran `count` times for `total_ns`, and `steps`
// ProfilerStep# ranges when > 0.
Report Of(double seconds, uint64_t count, int64_t total_ns, uint64_t steps = 0) {
  Report r;
  r.window_ns = static_cast<int64_t>(seconds * 1e9);
  r.kernel_count = count;
  r.kernel_time_ns = total_ns;
  KernelRow k;
  k.name = "gemm";
  k.stats.count = count;
  k.stats.total_ns = total_ns;
  k.stats.avg_ns = double(total_ns) / count;
  r.top_kernels.push_back(k);
  if (steps > 0) {
    OperatorRow o;
    o.name = "ProfilerStep*";
    o.user_annotation = true;
    o.calls = steps;
    r.operators.push_back(o);
  }
  return r;
}

const ReportDiff::Metric* Find(const ReportDiff& d, const std::string& name) {
  for (const auto& m : d.overview) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

TEST(ReportDiffTest, WindowsOfDifferentLengthAreComparedPerSecond) {
  // The same rate of work, captured 2 s then 5 s: no change per second.
  ReportDiff d = DiffReports(Of(2, 2000, 200'000'000), Of(5, 5000, 500'000'000));
  EXPECT_EQ(d.basis, "per second");
  const ReportDiff::Metric* time = Find(d, "kernel time per second");
  ASSERT_NE(time, nullptr);
  EXPECT_DOUBLE_EQ(time->a, 1e8);
  EXPECT_DOUBLE_EQ(time->b, 1e8);
  const std::string text = RenderDiffText(d, "a", "b");
  EXPECT_THAT(text, HasSubstr("compared per second"));
  EXPECT_THAT(text, HasSubstr("TOTAL A/s"));
  // Not the +150 % totals would say.
  EXPECT_THAT(text,
              ::testing::ContainsRegex("kernel time per second +100.00 ms +100.00 ms +\\+0.0%"));
  EXPECT_THAT(text, ::testing::ContainsRegex("100.00 ms +100.00 ms +0 ns +\\+0.0% .* gemm"));
  EXPECT_THAT(DiffToJson(d, "a", "b"), HasSubstr("\"basis\": \"per second\""));
}

TEST(ReportDiffTest, MarkedStepsAreComparedPerStep) {
  // 10 steps in 2 s, then 40 faster steps in 5 s: each step's kernel time halved.
  ReportDiff d = DiffReports(Of(2, 100, 100'000'000, 10), Of(5, 400, 200'000'000, 40));
  EXPECT_EQ(d.basis, "per step");
  const ReportDiff::Metric* time = Find(d, "kernel time per step");
  ASSERT_NE(time, nullptr);
  EXPECT_DOUBLE_EQ(time->a, 1e7);
  EXPECT_DOUBLE_EQ(time->b, 5e6);
  EXPECT_THAT(RenderDiffText(d, "a", "b"), HasSubstr("-50.0%"));
}

TEST(ReportDiffTest, WindowsAlikeCompareTotals) {
  ReportDiff d = DiffReports(Of(2, 2000, 200'000'000), Of(2.1, 1000, 100'000'000));
  EXPECT_EQ(d.basis, "total");
  ASSERT_NE(Find(d, "kernel time"), nullptr);
  EXPECT_THAT(RenderDiffText(d, "a", "b"), Not(HasSubstr("compared per")));
}

}  // namespace
}  // namespace profd::analysis

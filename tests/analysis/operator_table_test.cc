// Known-answer tests of the operator table: each trace states torch.profiler's rules on a few
// events (nesting by time, External id, same-name wrappers, filtered names, the profiler's own
// overhead) and the numbers torch's key_averages() gives for them, worked out in the comments.
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "analysis/render.h"
#include "analysis/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using testing::KinetoTraceBuilder;
using ::testing::Not;

Report ReportOf(const std::vector<const KinetoTraceBuilder*>& files,
                const AnalysisOptions& o = {}) {
  Trace t;
  for (size_t i = 0; i < files.size(); ++i) {
    absl::Status s = ReadTraceBuffer(files[i]->Json(), "test" + std::to_string(i), &t);
    EXPECT_TRUE(s.ok()) << s;
  }
  return Analyze(t, o);
}
Report ReportOf(const KinetoTraceBuilder& b, const AnalysisOptions& o = {}) {
  return ReportOf(std::vector<const KinetoTraceBuilder*>{&b}, o);
}

const OperatorRow* Row(const Report& r, const std::string& name) {
  for (const OperatorRow& o : r.operators) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// aten::linear [0, 100] > aten::addmm [10, 60] > cudaLaunchKernel [20, 30] (External id 2)
//   -> gemm kernel [40, 80] on the GPU, External id 2
// aten::linear also calls aten::t [62, 70] (no kernel) and launches bias_add itself:
//   cudaLaunchKernel [75, 80] -> kernel [85, 90], External id 1.
// torch: addmm self CPU = 50 - 10 (the launch call is a CPU child) = 40; linear self CPU =
// 100 - 50 - 8 - 5 = 37; addmm self = total CUDA = 40; linear self CUDA 5, total 45.
KinetoTraceBuilder LinearTrace() {
  KinetoTraceBuilder b;
  b.CpuOp("aten::linear", 0, 100, 100, 100, 1);
  b.CpuOp("aten::addmm", 10, 50, 100, 100, 2);
  b.OperatorLaunch("gemm", 2, 20, 10, 40, 40);
  b.CpuOp("aten::t", 62, 8, 100, 100, 3);
  b.OperatorLaunch("bias_add", 1, 75, 5, 85, 5);
  return b;
}

TEST(OperatorTableTest, SelfAndTotalTimesFollowTorch) {
  Report r = ReportOf(LinearTrace());
  ASSERT_EQ(r.operators.size(), 3u);
  // Sorted by CUDA total, as key_averages().table(sort_by="cuda_time_total").
  EXPECT_EQ(r.operators[0].name, "aten::linear");
  EXPECT_EQ(r.operators[1].name, "aten::addmm");
  EXPECT_EQ(r.operators[2].name, "aten::t");
  const OperatorRow& linear = r.operators[0];
  EXPECT_EQ(linear.calls, 1u);
  EXPECT_EQ(linear.cpu_total_ns, 100'000);
  EXPECT_EQ(linear.self_cpu_ns, 37'000);
  EXPECT_EQ(linear.self_cuda_ns, 5'000);
  EXPECT_EQ(linear.cuda_total_ns, 45'000);
  EXPECT_EQ(linear.device_events_self, 1u);
  EXPECT_EQ(linear.device_events, 2u);
  EXPECT_DOUBLE_EQ(linear.kernels_per_call, 2.0);
  const OperatorRow& addmm = r.operators[1];
  EXPECT_EQ(addmm.self_cpu_ns, 40'000);
  EXPECT_EQ(addmm.self_cuda_ns, 40'000);
  EXPECT_EQ(addmm.cuda_total_ns, 40'000);
  EXPECT_EQ(r.operators[2].cuda_total_ns, 0);
  EXPECT_EQ(r.operators[2].self_cpu_ns, 8'000);
  // The kernels under a row add up to its CUDA total.
  ASSERT_EQ(linear.kernels.size(), 2u);
  EXPECT_EQ(linear.kernels[0].name, "gemm");
  EXPECT_EQ(linear.kernels[0].total_ns, 40'000);
  EXPECT_EQ(linear.kernels[1].name, "bias_add");
  EXPECT_EQ(linear.kernels[1].count, 1u);
  // Totals as torch prints under its table: self CPU of every CPU event (the two launch calls'
  // 15 µs included) = the root's 100 µs; self CUDA = every GPU activity.
  EXPECT_EQ(r.operator_summary.self_cpu_total_ns, 100'000);
  EXPECT_EQ(r.operator_summary.self_cuda_total_ns, 45'000);
  EXPECT_EQ(r.operator_summary.device_events_attributed, 2u);
  EXPECT_EQ(r.operator_summary.attributed_by_launch_call, 0u);
  // The kernel table says which operator launched each kernel.
  ASSERT_FALSE(r.top_kernels.empty());
  EXPECT_EQ(r.top_kernels[0].name, "gemm");
  ASSERT_EQ(r.top_kernels[0].operators.size(), 1u);
  EXPECT_EQ(r.top_kernels[0].operators[0].name, "aten::addmm");
}

TEST(OperatorTableTest, WithoutExternalIdTheLaunchCallsOperatorOwnsTheKernel) {
  // Kineto's on-demand traces leave External id off some kernels: the kernel's launch call (by
  // correlation) lies inside aten::mul, so aten::mul launched it.
  KinetoTraceBuilder b;
  b.CpuOp("aten::mul", 0, 20, 100, 100, 7);
  b.Launch("mul_kernel", 5, 5, 12, 3);
  Report r = ReportOf(b);
  ASSERT_EQ(r.operators.size(), 1u);
  EXPECT_EQ(r.operators[0].self_cuda_ns, 3'000);
  EXPECT_EQ(r.operators[0].self_cpu_ns, 15'000);
  EXPECT_EQ(r.operator_summary.attributed_by_launch_call, 1u);
  // The External id wins over time when both are there (torch's only rule): a kernel naming
  // another operator belongs to that one even when launched inside aten::mul.
  KinetoTraceBuilder c;
  c.CpuOp("aten::mul", 0, 20, 100, 100, 7);
  c.CpuOp("aten::copy_", 30, 20, 100, 100, 8);
  c.OperatorLaunch("copy_kernel", 8, 5, 5, 12, 3);
  Report rc = ReportOf(c);
  EXPECT_EQ(Row(rc, "aten::copy_")->self_cuda_ns, 3'000);
  EXPECT_EQ(Row(rc, "aten::mul")->self_cuda_ns, 0);
}

TEST(OperatorTableTest, PartialOverlapIsNotNesting) {
  // B starts inside A but ends after it: torch records no parent, so A keeps its self time.
  KinetoTraceBuilder b;
  b.CpuOp("A", 0, 10, 100, 100, 1);
  b.CpuOp("B", 5, 10, 100, 100, 2);
  b.CpuOp("C", 12, 2, 100, 100, 3);  // inside B only
  // An operator on another thread at the same time is not a child either.
  b.CpuOp("D", 1, 2, 100, 101, 4);
  Report r = ReportOf(b);
  EXPECT_EQ(Row(r, "A")->self_cpu_ns, 10'000);
  EXPECT_EQ(Row(r, "B")->self_cpu_ns, 8'000);
  EXPECT_EQ(Row(r, "D")->self_cpu_ns, 2'000);
}

TEST(OperatorTableTest, SameNameWrapperGivesWayToItsOnlyChild) {
  // torch's _remove_dup_nodes: aten::add [0, 50] whose only child is aten::add [5, 40] counts
  // once; the parent takes the child's children and the child's kernels, in place of its own (a
  // kernel carrying the outer call's External id is dropped, as torch drops it). Self CPU of the
  // survivor: 50 - (its new children: aten::empty 2 + launch 5) = 43.
  KinetoTraceBuilder b;
  b.CpuOp("aten::add", 0, 50, 100, 100, 1);
  b.CpuOp("aten::add", 5, 35, 100, 100, 2);
  b.CpuOp("aten::empty", 6, 2, 100, 100, 3);
  b.OperatorLaunch("add_kernel", 2, 10, 5, 20, 4);
  b.Kernel("lost_kernel", 47, 1, 0, 7, {}, -1, /*external_id=*/1);
  Report r = ReportOf(b);
  const OperatorRow* add = Row(r, "aten::add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->calls, 1u);
  EXPECT_EQ(add->cpu_total_ns, 50'000);
  EXPECT_EQ(add->self_cpu_ns, 43'000);
  EXPECT_EQ(add->self_cuda_ns, 4'000);
  EXPECT_EQ(add->cuda_total_ns, 4'000);
  EXPECT_EQ(r.gpus[0].kernels, 2u);  // the dropped kernel is still in the kernel tables
  // Two children (empty + the inner add) is not a wrapper: both calls count.
  KinetoTraceBuilder c;
  c.CpuOp("aten::add", 0, 50, 100, 100, 1);
  c.CpuOp("aten::add", 5, 35, 100, 100, 2);
  c.CpuOp("aten::empty", 41, 2, 100, 100, 3);
  EXPECT_EQ(Row(ReportOf(c), "aten::add")->calls, 2u);
}

TEST(OperatorTableTest, ProfilerStepsFoldIntoOneRowAndFilteredNamesVanish) {
  KinetoTraceBuilder b;
  for (int step = 0; step < 3; ++step) {
    double t = step * 100;
    b.UserAnnotation("ProfilerStep#" + std::to_string(step + 5), t, 90);
    b.CpuOp("aten::relu", t + 10, 20, 100, 100, step * 10 + 1);
    // torch drops these before building its tree: no row, and no time taken from aten::relu.
    b.CpuOp("aten::is_leaf", t + 12, 3, 100, 100, step * 10 + 2);
    b.CpuOp("profiler::_record_function_exit", t + 80, 3, 100, 100, step * 10 + 3);
  }
  Report r = ReportOf(b);
  ASSERT_EQ(r.operators.size(), 2u);
  const OperatorRow* step = Row(r, "ProfilerStep*");
  ASSERT_NE(step, nullptr);
  EXPECT_TRUE(step->user_annotation);
  EXPECT_EQ(step->calls, 3u);
  EXPECT_EQ(step->self_cpu_ns, 3 * 70'000);
  EXPECT_EQ(Row(r, "aten::relu")->self_cpu_ns, 3 * 20'000);
  EXPECT_EQ(Row(r, "aten::is_leaf"), nullptr);
  EXPECT_THAT(RenderText(r), HasSubstr("ProfilerStep* (record_function)"));
}

TEST(OperatorTableTest, ProfilerOverheadIsACpuChildOfTheOperatorAroundIt) {
  // Kineto writes "Activity Buffer Request" with pid -1, tid 0; torch puts it on the main thread,
  // where it takes its time from the operator it interrupted (the ResNet-50 fixture shows it).
  KinetoTraceBuilder b;
  b.CpuOp("aten::cudnn_convolution", 0, 100, 100, 100, 1);
  b.Overhead("Activity Buffer Request", 10, 30);
  b.OperatorLaunch("conv", 1, 50, 5, 60, 20);
  Report r = ReportOf(b);
  ASSERT_EQ(r.operators.size(), 1u);  // overhead is no operator
  EXPECT_EQ(r.operators[0].self_cpu_ns, 100'000 - 30'000 - 5'000);
  EXPECT_EQ(r.operators[0].cuda_total_ns, 20'000);
}

TEST(OperatorTableTest, KernelsUnderANestedRowCountOncePerEnclosingCall) {
  // aten::foo inside aten::foo with a sibling (so not a wrapper): the kernel is in both calls'
  // CUDA totals, as torch sums them; the row's kernel list says 2 and adds up to the total.
  KinetoTraceBuilder b;
  b.CpuOp("aten::foo", 0, 100, 100, 100, 1);
  b.CpuOp("aten::foo", 10, 40, 100, 100, 2);
  b.CpuOp("aten::bar", 60, 10, 100, 100, 3);
  b.OperatorLaunch("k", 2, 20, 5, 30, 10);
  Report r = ReportOf(b);
  const OperatorRow* foo = Row(r, "aten::foo");
  ASSERT_NE(foo, nullptr);
  EXPECT_EQ(foo->calls, 2u);
  EXPECT_EQ(foo->cuda_total_ns, 20'000);
  EXPECT_EQ(foo->self_cuda_ns, 10'000);
  ASSERT_EQ(foo->kernels.size(), 1u);
  EXPECT_EQ(foo->kernels[0].count, 2u);
  EXPECT_EQ(foo->kernels[0].total_ns, 20'000);
}

TEST(OperatorTableTest, FilesKeepTheirExternalIdsApart) {
  // Two processes both number their operators from 1: each kernel stays with its own process's.
  KinetoTraceBuilder a, b;
  a.CpuOp("aten::mm", 0, 50, 100, 100, 1);
  a.OperatorLaunch("mm_kernel", 1, 10, 5, 20, 30);
  b.CpuOp("aten::add", 0, 50, 200, 200, 1);
  b.OperatorLaunch("add_kernel", 1, 10, 5, 20, 2, 200, 200);
  Report r = ReportOf({&a, &b});
  EXPECT_EQ(Row(r, "aten::mm")->cuda_total_ns, 30'000);
  EXPECT_EQ(Row(r, "aten::add")->cuda_total_ns, 2'000);
}

TEST(OperatorTableTest, FindingsNameTheOperators) {
  // 300 kernels of 2 µs launched by aten::add every 20 µs, 20 of 400 µs by aten::mm: the GPU is
  // launch-bound and the short kernels come from aten::add.
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 10'000, 100, 100, 100'000);  // a 10 ms window
  int64_t ext = 1;
  double t = 0;
  for (int i = 0; i < 300; ++i, t += 20) {
    b.CpuOp("aten::add", t, 15, 100, 100, ext);
    b.OperatorLaunch("add_kernel", ext++, t + 2, 10, t + 13, 2);
  }
  for (int i = 0; i < 4; ++i, t += 1000) {
    b.CpuOp("aten::mm", t, 15, 100, 100, ext);
    b.OperatorLaunch("mm_kernel_" + std::to_string(i), ext++, t + 2, 10, t + 13, 400);
  }
  Report r = ReportOf(b);
  const Finding* launch = nullptr;
  const Finding* dominant = nullptr;
  for (const Finding& f : r.findings) {
    if (f.id == "launch_bound") launch = &f;
    if (f.id == "dominant_kernels") dominant = &f;
  }
  ASSERT_NE(launch, nullptr);
  // 300 kernels in a 10 ms window: 30,000 launches/s.
  EXPECT_THAT(::testing::PrintToString(launch->evidence),
              HasSubstr("aten::add: 30,000 launches/s of kernels < 10.0 µs (300 kernels"));
  // add_kernel 300 x 2 µs, then the 400 µs mm kernels: each names its launcher.
  ASSERT_NE(dominant, nullptr);
  EXPECT_THAT(dominant->evidence[0], HasSubstr("launched by aten::add (300)"));
  EXPECT_THAT(dominant->evidence[1], HasSubstr("launched by aten::mm (1)"));
  ASSERT_EQ(r.gpus[0].short_kernel_operators.size(), 1u);
  EXPECT_EQ(r.gpus[0].short_kernel_operators[0].kernels, 300u);
}

TEST(OperatorTableTest, JsonAndTextWithAndWithoutOperators) {
  Report r = ReportOf(LinearTrace());
  rapidjson::Document d;
  d.Parse(ReportToJson(r).c_str());
  ASSERT_TRUE(d.IsObject());
  const rapidjson::Value& op = d["operators"][0];
  EXPECT_STREQ(op["name"].GetString(), "aten::linear");
  EXPECT_EQ(op["calls"].GetUint64(), 1u);
  EXPECT_EQ(op["self_cpu_ns"].GetInt64(), 37'000);
  EXPECT_EQ(op["cpu_total_ns"].GetInt64(), 100'000);
  EXPECT_EQ(op["self_cuda_ns"].GetInt64(), 5'000);
  EXPECT_EQ(op["cuda_total_ns"].GetInt64(), 45'000);
  EXPECT_DOUBLE_EQ(op["cuda_per_call_ns"].GetDouble(), 45'000);
  EXPECT_DOUBLE_EQ(op["kernels_per_call"].GetDouble(), 2);
  EXPECT_STREQ(op["kernels"][0]["name"].GetString(), "gemm");
  EXPECT_EQ(op["kernels"][0]["count"].GetUint64(), 1u);
  EXPECT_EQ(d["operator_summary"]["device_events_attributed"].GetUint64(), 2u);
  EXPECT_STREQ(d["top_kernels"][0]["operators"][0]["name"].GetString(), "aten::addmm");
  std::string text = RenderText(r);
  EXPECT_THAT(text, HasSubstr("OPERATORS (torch.profiler key_averages"));
  EXPECT_THAT(text, HasSubstr("  > gemm"));
  EXPECT_THAT(RenderHtml(r, "t"), HasSubstr("<svg id=\"plot-top-operators\""));

  // A CUPTI capture (kernels, no cpu_op): an empty table, one line in the text saying why.
  KinetoTraceBuilder cupti;
  cupti.Launch("k", 0, 5, 10, 5);
  Report c = ReportOf(cupti);
  EXPECT_TRUE(c.operators.empty());
  d.Parse(ReportToJson(c).c_str());
  EXPECT_EQ(d["operators"].Size(), 0u);
  EXPECT_EQ(d["operator_summary"]["instances"].GetUint64(), 0u);
  std::string ctext = RenderText(c);
  EXPECT_THAT(ctext, HasSubstr("\nOPERATORS: none (the trace has no PyTorch CPU operators"));
  EXPECT_THAT(RenderHtml(c, "t"), Not(HasSubstr("plot-top-operators")));
  // Nothing at all on the GPU: nothing to say about operators either.
  KinetoTraceBuilder empty;
  empty.Runtime("cudaGetDevice", 0, 1);
  EXPECT_THAT(RenderText(ReportOf(empty)), Not(HasSubstr("OPERATORS")));
}

TEST(OperatorTableTest, DeepNestingAndManyKernelsStayLinear) {
  // A hostile trace: 20,000 operators nested in one another, 20,000 kernels on the innermost.
  // Every step is iterative (no recursion to overflow the stack) and the kernel lists walk only
  // the distinct top rows on the path, so this runs in well under a second.
  KinetoTraceBuilder b;
  constexpr int kDepth = 20'000;
  for (int i = 0; i < kDepth; ++i) {
    b.CpuOp("op" + std::to_string(i % 2), i * 0.001, 1000 - i * 0.002, 100, 100, i + 1);
  }
  for (int i = 0; i < 20'000; ++i) b.Kernel("k", 2000 + i, 0.5, 0, 7, {}, -1, kDepth);
  Report r = ReportOf(b);
  ASSERT_EQ(r.operators.size(), 2u);
  EXPECT_EQ(r.operators[0].calls + r.operators[1].calls, uint64_t{kDepth});
  // Every enclosing call counts the innermost kernels: 10,000 calls of each name x 10 ms.
  EXPECT_EQ(r.operators[0].cuda_total_ns, int64_t{10'000} * 20'000 * 500);
  EXPECT_EQ(r.operators[0].kernels[0].count, uint64_t{10'000} * 20'000);
}

}  // namespace
}  // namespace profd::analysis

// The operator table against what torch.profiler itself printed for the same session
// (tests/fixtures/torch/, recorded on an H200 with PyTorch 2.11): the real profctl binary reads
// each trace, and every CPU operator row of torch's key_averages() must come back with the same
// calls and the same self/total CPU and CUDA time, to the nanosecond. The one known difference
// (torch counting some kernels twice through its profiler-overhead event) is asserted exactly.
// Also: Kineto's on-demand trace of the same model gives the same per-call numbers, our own CUPTI
// captures say they have no operators, and diff/HTML carry the table.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/subprocess.h"

namespace profd::analysis {
namespace {

using profd::testing::BuildPath;
using profd::testing::Run;
using profd::testing::RunResult;
using profd::testing::SourcePath;
using ::testing::HasSubstr;

const std::string kGpt2 = "tests/fixtures/torch/gpt2_cpu_cuda_3steps";
const std::string kResnet = "tests/fixtures/torch/resnet50_cpu_cuda_2steps";
const std::string kOnDemand = "tests/fixtures/torch/kineto_ondemand_gpt2_500ms.json.gz";
const std::string kCuptiCapture = "tests/fixtures/burst_1000_kernels.trace.json.gz";

RunResult Profctl(std::vector<std::string> args) {
  std::vector<std::string> argv = {BuildPath("client/profctl"), "--target",
                                   "unix:/nonexistent/profd.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

rapidjson::Document Parse(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str());
  EXPECT_FALSE(d.HasParseError()) << text.substr(0, 500);
  return d;
}

// `profctl report --json` of a file, every row of every table.
rapidjson::Document Report(const std::string& path) {
  RunResult r = Profctl({"report", "--json", "--top", "100000", SourcePath(path)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Parse(r.out);
}

// One row of torch's key_averages() as the recorder saved it (times in µs, as torch keeps them).
struct TorchRow {
  uint64_t count = 0;
  double cpu_total_us = 0, self_cpu_us = 0, device_total_us = 0, self_device_us = 0;
  std::string device_type;
};

struct KeyAverages {
  std::map<std::string, TorchRow> rows;
  std::string table;  // key_averages().table(sort_by="cuda_time_total") as torch printed it
};

KeyAverages LoadKeyAverages(const std::string& fixture) {
  rapidjson::Document d =
      Parse(profd::testing::ReadFileOrEmpty(SourcePath(fixture + ".key_averages.json")));
  KeyAverages k;
  for (const rapidjson::Value& o : d["operators"].GetArray()) {
    TorchRow& row = k.rows[o["key"].GetString()];
    row.count = o["count"].GetUint64();
    row.cpu_total_us = o["cpu_time_total_us"].GetDouble();
    row.self_cpu_us = o["self_cpu_time_total_us"].GetDouble();
    row.device_total_us = o["device_time_total_us"].GetDouble();
    row.self_device_us = o["self_device_time_total_us"].GetDouble();
    row.device_type = o["device_type"].GetString();
  }
  k.table = d["table"].GetString();
  return k;
}

std::map<std::string, const rapidjson::Value*> Operators(const rapidjson::Document& report) {
  std::map<std::string, const rapidjson::Value*> out;
  for (const rapidjson::Value& o : report["operators"].GetArray()) {
    EXPECT_TRUE(out.emplace(o["name"].GetString(), &o).second) << o["name"].GetString();
  }
  return out;
}

// ours (ns) against torch (µs floats summed per event): equal to the nanosecond, allowing for
// torch's float rounding (~1e-9 relative).
bool SameNs(int64_t ours, double torch_us) {
  return std::abs(static_cast<double>(ours) - torch_us * 1000) <= 1 + 1e-9 * torch_us * 1000;
}

struct Worst {
  double relative = 0;
  std::string row;
};

// Compares every CPU row torch printed with the report: operators must match; the rest must be
// exactly the CUDA runtime/driver calls (in our CUDA API table) and the profiler's overhead.
// cuda_total_extra_us: rows where torch's CUDA total is known to exceed the true sum (see the
// ResNet test), by how much.
std::map<std::string, Worst> CompareWithTorch(
    const std::string& fixture, const std::map<std::string, double>& cuda_total_extra_us = {}) {
  KeyAverages torch = LoadKeyAverages(fixture);
  rapidjson::Document report = Report(fixture + ".json.gz");
  std::map<std::string, const rapidjson::Value*> ours = Operators(report);
  std::set<std::string> apis;
  for (const rapidjson::Value& a : report["cuda_api"].GetArray())
    apis.insert(a["name"].GetString());

  std::map<std::string, Worst> worst;
  size_t compared = 0;
  for (const auto& [name, t] : torch.rows) {
    if (t.device_type != "CPU") {
      EXPECT_EQ(ours.count(name), 0u) << name << ": a GPU activity is no operator";
      continue;
    }
    if (apis.count(name) > 0 || name == "Activity Buffer Request") {
      // CUDA API calls and the profiler's overhead are CPU events for torch (they take CPU time
      // from the operator around them) but not operators.
      EXPECT_EQ(ours.count(name), 0u) << name;
      continue;
    }
    auto it = ours.find(name);
    if (it == ours.end()) {
      ADD_FAILURE() << fixture << ": torch printed operator " << name << ", the report has none";
      continue;
    }
    ++compared;
    const rapidjson::Value& o = *it->second;
    EXPECT_EQ(o["calls"].GetUint64(), t.count) << name;
    double extra = cuda_total_extra_us.count(name) ? cuda_total_extra_us.at(name) : 0;
    struct Column {
      const char* what;
      int64_t ours;
      double torch_us;
    } columns[] = {
        {"cpu_total", o["cpu_total_ns"].GetInt64(), t.cpu_total_us},
        {"self_cpu", o["self_cpu_ns"].GetInt64(), t.self_cpu_us},
        {"cuda_total", o["cuda_total_ns"].GetInt64(), t.device_total_us - extra},
        {"self_cuda", o["self_cuda_ns"].GetInt64(), t.self_device_us},
    };
    for (const Column& c : columns) {
      EXPECT_TRUE(SameNs(c.ours, c.torch_us))
          << fixture << " " << name << " " << c.what << ": ours " << c.ours << " ns, torch "
          << c.torch_us << " µs";
      // The brief's bar, against what torch printed (the known extra included).
      double printed = std::string(c.what) == "cuda_total" ? t.device_total_us : c.torch_us;
      double rel =
          printed != 0 ? std::abs(c.ours - printed * 1000) / (printed * 1000) : std::abs(c.ours);
      if (rel >= worst[c.what].relative) worst[c.what] = {rel, name};
      if (extra == 0) {
        EXPECT_LE(rel, 0.02) << name << " " << c.what;
      }
    }
  }
  EXPECT_EQ(compared, ours.size()) << "the report has operators torch did not print";
  EXPECT_GT(compared, 20u);
  std::cout << fixture << ": " << compared << " operators compared; worst vs torch:";
  for (const auto& [what, w] : worst) {
    std::cout << " " << what << " " << w.relative * 100 << "% (" << w.row << ")";
  }
  std::cout << "\n";
  return worst;
}

TEST(TorchFixtureTest, Gpt2MatchesKeyAveragesToTheNanosecond) {
  std::map<std::string, Worst> worst = CompareWithTorch(kGpt2);
  for (const auto& [what, w] : worst) EXPECT_LT(w.relative, 1e-6) << what << " " << w.row;
}

TEST(TorchFixtureTest, ResNet50MatchesKeyAveragesButForTorchsOverheadDoubleCount) {
  // The first convolution of the first step asked CUPTI for an activity buffer ("Activity Buffer
  // Request", 2.47 ms on the main thread inside aten::cudnn_convolution). torch subtracts it from
  // the convolution's self CPU time, and so do we (it becomes a CPU child of the innermost
  // operator around it). But torch also attached to that overhead event the 54.016 µs of kernels
  // that carry External id 4, aten::cudnn_convolution's own: torch hands kernels to every CPU
  // event whose id equals their External id, and the overhead event's id (not in the exported
  // trace) is evidently 4. So those kernels count twice in torch's table: in the overhead row,
  // and again in the CUDA total of every operator around the overhead. That is no GPU time and
  // the trace cannot tell it, so the report keeps the true sum: those four rows' CUDA total is
  // torch's minus exactly the device time torch printed for "Activity Buffer Request" (3.5% of
  // aten::conv2d's 1.553 ms, the only difference above 2%). Their self CUDA time is exact.
  KeyAverages torch = LoadKeyAverages(kResnet);
  double overhead_us = torch.rows.at("Activity Buffer Request").device_total_us;
  EXPECT_NEAR(overhead_us, 54.016, 1e-6);
  std::map<std::string, double> extra;
  for (const char* name :
       {"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution"}) {
    extra[name] = overhead_us;
  }
  std::map<std::string, Worst> worst = CompareWithTorch(kResnet, extra);
  EXPECT_LT(worst["cpu_total"].relative, 1e-6);
  EXPECT_LT(worst["self_cpu"].relative, 1e-6);
  EXPECT_LT(worst["self_cuda"].relative, 1e-6);
  EXPECT_TRUE(extra.count(worst["cuda_total"].row)) << worst["cuda_total"].row;
  EXPECT_NEAR(worst["cuda_total"].relative, overhead_us / 1552.647, 1e-6);
}

TEST(TorchFixtureTest, SortedAsTorchsTableByCudaTotal) {
  // The order of torch's printed table (operators among its rows; its kernel rows interleave).
  KeyAverages torch = LoadKeyAverages(kGpt2);
  rapidjson::Document report = Report(kGpt2 + ".json.gz");
  std::map<std::string, const rapidjson::Value*> ours = Operators(report);
  std::vector<std::string> torch_order;
  for (absl::string_view line : absl::StrSplit(torch.table, '\n')) {
    if (line.size() < 55 || line[0] == '-' || absl::StrContains(line, "Self CPU %")) continue;
    std::string name(absl::StripAsciiWhitespace(line.substr(0, 55)));
    if (ours.count(name)) torch_order.push_back(name);
  }
  ASSERT_GE(torch_order.size(), 15u);
  std::vector<std::string> our_order;
  for (size_t i = 0; i < torch_order.size(); ++i) {
    our_order.push_back(
        report["operators"][static_cast<rapidjson::SizeType>(i)]["name"].GetString());
  }
  EXPECT_EQ(our_order, torch_order);
}

TEST(TorchFixtureTest, TextHtmlAndFindingsNameTheOperators) {
  RunResult r = Profctl({"report", SourcePath(kGpt2 + ".json.gz")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("OPERATORS (torch.profiler key_averages, sort_by=\"cuda_time_total\""));
  // aten::addmm as torch prints it: 144 calls, 1.334 ms self CUDA (22.08% of 6.044 ms), 7.401 ms
  // CPU total, 6.044 ms self CPU (16.65% of 36.299 ms); its three nvjet GEMMs under it.
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex(
                  "1\\.33 ms +1\\.33 ms +22\\.1% +9\\.3 µs +144 +1\\.00 +7\\.40 ms +6\\.04 ms "
                  "+16\\.7% +aten::addmm\n +611\\.7 µs +8\\.5 µs +72 +> "
                  "nvjet_sm90_hsh_96x64_64x8_1x2_h_bz_bias_NNN\n"));
  EXPECT_THAT(r.out, HasSubstr("Self CPU time total: 36.30 ms; self CUDA time total: 6.04 ms"));
  // The launch-bound finding names who launches the short kernels; the dominant kernels name
  // their operator.
  EXPECT_THAT(r.out, HasSubstr("- aten::add: 2,726 launches/s of kernels < 10.0 µs (150 kernels"));
  EXPECT_THAT(r.out, HasSubstr("= 2.54 ms (42.1%), launched by aten::mm (3)"));

  profd::testing::TempDir dir;
  RunResult h = Profctl({"report", SourcePath(kGpt2 + ".json.gz"), "--html", dir.File("r.html")});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  std::string html = profd::testing::ReadFileOrEmpty(dir.File("r.html"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"plot-top-operators\""));
  EXPECT_THAT(html, HasSubstr("<table id=\"operator-table\">"));
  EXPECT_THAT(html, HasSubstr("title=\"aten::addmm\">aten::addmm</td>"));
}

TEST(TorchFixtureTest, OnDemandKinetoTraceGivesTheSamePerCallNumbers) {
  // The same GPT-2 on the same H200, traced on demand (Kineto daemon IPC, 500 ms, no torch-side
  // processing): every operator that launches kernels in the torch.profiler fixture appears with
  // the same kernels per call and the same CUDA time per call, within 5% (or 250 ns: the
  // one-to-three-µs kernels of embedding and arange vary by a few hundred ns between runs).
  rapidjson::Document on_demand = Report(kOnDemand);
  rapidjson::Document profiled = Report(kGpt2 + ".json.gz");
  KeyAverages torch = LoadKeyAverages(kGpt2);
  std::map<std::string, const rapidjson::Value*> ours = Operators(on_demand);
  std::map<std::string, const rapidjson::Value*> reference = Operators(profiled);
  size_t with_kernels = 0;
  for (const auto& [name, t] : torch.rows) {
    if (t.device_type != "CPU" || t.device_total_us == 0 || !reference.count(name)) continue;
    ++with_kernels;
    ASSERT_TRUE(ours.count(name)) << name;
    const rapidjson::Value& o = *ours[name];
    EXPECT_GT(o["calls"].GetUint64(), 7 * t.count) << name;  // ~8 forward passes in 500 ms
    EXPECT_DOUBLE_EQ(o["kernels_per_call"].GetDouble(),
                     (*reference[name])["kernels_per_call"].GetDouble())
        << name;
    double per_call_us = t.device_total_us / t.count;
    EXPECT_NEAR(o["cuda_per_call_ns"].GetDouble() / 1000, per_call_us,
                std::max(0.05 * per_call_us, 0.25))
        << name;
  }
  EXPECT_GE(with_kernels, 15u);
  // Both top three by CUDA total are the LM head's GEMM stack.
  for (int i = 0; i < 3; ++i) {
    EXPECT_STREQ(on_demand["operators"][i]["name"].GetString(),
                 profiled["operators"][i]["name"].GetString());
  }
  // Kineto cut three launches at the window's start (two kernels and a memset with no External
  // id and no launch call in the trace): everything else has its operator.
  const rapidjson::Value& s = on_demand["operator_summary"];
  EXPECT_EQ(s["device_events_attributed"].GetUint64(), s["device_events"].GetUint64() - 3);
  int64_t self_cuda = 0;
  for (const rapidjson::Value& o : on_demand["operators"].GetArray()) {
    EXPECT_LE(o["self_cpu_ns"].GetInt64(), o["cpu_total_ns"].GetInt64());
    EXPECT_LE(o["self_cuda_ns"].GetInt64(), o["cuda_total_ns"].GetInt64());
    self_cuda += o["self_cuda_ns"].GetInt64();
  }
  EXPECT_LE(self_cuda, s["self_cuda_total_ns"].GetInt64());
  EXPECT_GT(self_cuda, s["self_cuda_total_ns"].GetInt64() * 999 / 1000);
  // Under a row, its kernels add up to its CUDA total when all are listed.
  const rapidjson::Value& addmm = *ours["aten::addmm"];
  ASSERT_EQ(addmm["distinct_kernels"].GetUint64(), 3u);
  int64_t sum = 0;
  for (const rapidjson::Value& k : addmm["kernels"].GetArray()) sum += k["total_ns"].GetInt64();
  EXPECT_EQ(sum, addmm["cuda_total_ns"].GetInt64());
}

// issue 9's GPU check, kept in CI: a GPT-2 process captured by profd through Kineto while it ran
// exactly 20 steps, and torch.profiler's key_averages() of its next 20 steps (same process, same
// inputs): every aten operator with the same calls, and total CUDA time within 2 %.
TEST(TorchFixtureTest, ProfdCaptureThroughKinetoMatchesTorchOnTheSameSteps) {
  rapidjson::Document report = Report("tests/fixtures/torch/profd_kineto_gpt2_20steps.json.gz");
  std::map<std::string, const rapidjson::Value*> ours = Operators(report);
  rapidjson::Document torch = Parse(profd::testing::ReadFileOrEmpty(
      SourcePath("tests/fixtures/torch/torch_gpt2_20steps.key_averages.json")));
  int compared = 0;
  for (const rapidjson::Value& row : torch["operators"].GetArray()) {
    const std::string key = row["key"].GetString();
    if (std::string(row["device_type"].GetString()) != "CPU" || key.rfind("aten::", 0) != 0) {
      continue;
    }
    auto it = ours.find(key);
    ASSERT_NE(it, ours.end()) << key;
    EXPECT_EQ((*it->second)["calls"].GetUint64(), row["count"].GetUint64()) << key;
    const double torch_us = row["device_time_total_us"].GetDouble();
    if (torch_us > 0) {
      const double ours_us = (*it->second)["cuda_total_ns"].GetDouble() / 1000;
      EXPECT_LE(std::abs(ours_us - torch_us), 0.02 * torch_us) << key;
    }
    ++compared;
  }
  EXPECT_EQ(compared, 41);
}

TEST(TorchFixtureTest, DiffComparesOperators) {
  RunResult j = Profctl({"diff", "--json", SourcePath(kGpt2 + ".json.gz"), SourcePath(kOnDemand)});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  rapidjson::Document d = Parse(j.out);
  const rapidjson::Value* addmm = nullptr;
  for (const rapidjson::Value& o : d["operators"].GetArray()) {
    if (std::string(o["name"].GetString()) == "aten::addmm") addmm = &o;
  }
  ASSERT_NE(addmm, nullptr);
  EXPECT_EQ((*addmm)["calls_a"].GetUint64(), 144u);
  EXPECT_EQ((*addmm)["calls_b"].GetUint64(), 1151u);
  EXPECT_EQ((*addmm)["cuda_total_a_ns"].GetInt64(), 1334462);
  EXPECT_EQ((*addmm)["cuda_delta_ns"].GetInt64(), (*addmm)["cuda_total_b_ns"].GetInt64() - 1334462);
  EXPECT_STREQ(d["operators"][0]["name"].GetString(), "aten::linear");

  RunResult t = Profctl({"diff", SourcePath(kGpt2 + ".json.gz"), SourcePath(kOnDemand)});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("OPERATORS (torch.profiler key_averages, by CUDA total)"));
  EXPECT_THAT(t.out,
              ::testing::ContainsRegex("1\\.33 ms +10\\.67 ms +\\+9\\.34 ms +\\+[0-9.]+% +144 "
                                       "+1,151 .*aten::addmm\n"));
}

TEST(TorchFixtureTest, CuptiCapturesHaveNoOperatorsAndSaySoOnce) {
  rapidjson::Document d = Report(kCuptiCapture);
  EXPECT_EQ(d["operators"].Size(), 0u);
  EXPECT_EQ(d["operator_summary"]["instances"].GetUint64(), 0u);
  EXPECT_EQ(d["top_kernels"][0]["operators"].Size(), 0u);
  RunResult r = Profctl({"report", SourcePath(kCuptiCapture)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t lines = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StrContains(line, "OPERATORS")) ++lines;
  }
  EXPECT_EQ(lines, 1u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("OPERATORS: none (the trace has no PyTorch CPU operators"));
}

}  // namespace
}  // namespace profd::analysis

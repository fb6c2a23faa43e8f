// The hardware-counter series' arithmetic (analysis/gpu_counters.h) on samples recorded on
// an H200 (tests/fixtures/h200_pm_duty.*): the time-weighted means over each phase of a known
// workload say what the phase did — a copy's DRAM bytes per second are the bytes it moved over
// its length, a GEMM keeps the engine busy, idle is idle — and the series' scales turn CUPTI's
// percentages into dcgm-exporter's 0..1 ratios.
#include "analysis/gpu_counters.h"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

struct Recorded {
  std::vector<std::string> metrics;  // CUPTI names, the CSV's columns after start/end
  struct Sample {
    uint64_t start, end;
    std::vector<double> values;
  };
  std::vector<Sample> samples;
};

Recorded ReadSamples(const std::string& path) {
  Recorded r;
  const std::string text = testing::ReadGzip(path);
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (r.metrics.empty()) {
      r.metrics.assign(cells.begin() + 2, cells.end());
      continue;
    }
    Recorded::Sample s{};
    EXPECT_TRUE(absl::SimpleAtoi(cells[0], &s.start) && absl::SimpleAtoi(cells[1], &s.end));
    for (size_t i = 2; i < cells.size(); ++i) {
      double v = 0;
      EXPECT_TRUE(absl::SimpleAtod(cells[i], &v));
      s.values.push_back(v);
    }
    r.samples.push_back(std::move(s));
  }
  return r;
}

struct Phase {
  std::string name;
  uint64_t start, end, bytes_moved;
};

std::vector<Phase> ReadPhases(const std::string& path) {
  std::ifstream in(path);
  std::vector<Phase> phases;
  std::string word;
  while (in >> word) {
    if (word != "phase") {
      std::getline(in, word);
      continue;
    }
    Phase p;
    uint64_t launches = 0;
    in >> p.name >> p.start >> p.end >> launches >> p.bytes_moved;
    phases.push_back(p);
  }
  return phases;
}

// The series (GpuCounterDefs order) over [from, to), from the recorded samples wholly inside,
// each column going to the series whose CUPTI metric it is; the rest NaN.
std::vector<double> SeriesOver(const Recorded& r, uint64_t from, uint64_t to) {
  const auto defs = GpuCounterDefs();
  std::vector<int> column_of(defs.size(), -1);
  for (size_t d = 0; d < defs.size(); ++d) {
    for (size_t c = 0; c < r.metrics.size(); ++c) {
      if (r.metrics[c] == defs[d].cupti_metric) column_of[d] = static_cast<int>(c);
    }
  }
  GpuCounterMeans means(defs.size());
  for (const auto& s : r.samples) {
    if (s.start < from || s.end > to) continue;
    std::vector<double> values(defs.size(), std::nan(""));
    for (size_t d = 0; d < defs.size(); ++d) {
      if (column_of[d] >= 0) values[d] = s.values[static_cast<size_t>(column_of[d])];
    }
    means.Add(s.start, s.end, values);
  }
  std::vector<double> series = means.Take();
  for (size_t d = 0; d < defs.size(); ++d) series[d] *= defs[d].scale;
  return series;
}

double Of(const std::vector<double>& series, const char* name) {
  const auto defs = GpuCounterDefs();
  for (size_t d = 0; d < defs.size(); ++d) {
    if (std::string(defs[d].series) == name) return series[d];
  }
  ADD_FAILURE() << "no series " << name;
  return std::nan("");
}

TEST(GpuCountersTest, RecordedH200PhasesReadAsWhatTheWorkloadDid) {
  const Recorded r = ReadSamples(testing::SourcePath("tests/fixtures/h200_pm_duty.csv.gz"));
  const std::vector<Phase> phases =
      ReadPhases(testing::SourcePath("tests/fixtures/h200_pm_duty.phases"));
  ASSERT_EQ(phases.size(), 12u);
  ASSERT_GT(r.samples.size(), 10000u);
  constexpr uint64_t kMargin = 50'000'000;  // the edges of a phase: launches in flight
  int copies = 0, gemms = 0, idles = 0;
  for (const Phase& p : phases) {
    if (p.start < r.samples.front().start) continue;  // before sampling began
    const std::vector<double> s = SeriesOver(r, p.start + kMargin, p.end - kMargin);
    const double dram = Of(s, "profd_gpu_dram_read_bytes_per_second") +
                        Of(s, "profd_gpu_dram_write_bytes_per_second");
    SCOPED_TRACE(p.name + " at " + std::to_string(p.start));
    if (p.name == "copy") {
      ++copies;
      const double truth = static_cast<double>(p.bytes_moved) / ((p.end - p.start) / 1e9);
      EXPECT_NEAR(dram / truth, 1.0, 0.01);
      EXPECT_GT(Of(s, "profd_gpu_dram_active_ratio"), 0.8);
      EXPECT_LE(Of(s, "profd_gpu_dram_active_ratio"), 1.0);
    } else if (p.name == "gemm") {
      ++gemms;
      EXPECT_GT(Of(s, "profd_gpu_graphics_engine_active_ratio"), 0.95);
      EXPECT_LT(Of(s, "profd_gpu_dram_active_ratio"), 0.3);
    } else {
      ++idles;
      EXPECT_LT(Of(s, "profd_gpu_graphics_engine_active_ratio"), 0.01);
      EXPECT_LT(Of(s, "profd_gpu_sm_occupancy_ratio"), 0.001);
      EXPECT_LT(dram, 1e9);
    }
    // Not in this recording: left out, not zero.
    EXPECT_TRUE(std::isnan(Of(s, "profd_gpu_tensor_active_ratio")));
  }
  EXPECT_EQ(copies, 3);
  EXPECT_EQ(gemms, 2);  // the first began before the sampling did
  EXPECT_GE(idles, 5);
}

// The link series on two NVLink-connected H200s: a phase's PCIe or NVLink bytes per second are
// what its copies moved over its length (the counters include the links' headers: within 8 %),
// on the GPU that received (rx) or sent (tx) them, and near nothing elsewhere.
TEST(GpuCountersTest, RecordedH200LinkPhasesReadAsTheCopiesMoved) {
  const std::vector<Phase> phases =
      ReadPhases(testing::SourcePath("tests/fixtures/h200_pm_links.phases"));
  ASSERT_EQ(phases.size(), 12u);
  const Recorded gpu0 =
      ReadSamples(testing::SourcePath("tests/fixtures/h200_pm_links_gpu0.csv.gz"));
  const Recorded gpu1 =
      ReadSamples(testing::SourcePath("tests/fixtures/h200_pm_links_gpu1.csv.gz"));
  ASSERT_GT(gpu0.samples.size(), 10000u);
  ASSERT_GT(gpu1.samples.size(), 10000u);
  constexpr uint64_t kMargin = 50'000'000;
  int checked = 0;
  for (const Phase& p : phases) {
    if (p.start < gpu0.samples.front().start || p.name == "idle") continue;
    SCOPED_TRACE(p.name + " at " + std::to_string(p.start));
    const std::vector<double> s0 = SeriesOver(gpu0, p.start + kMargin, p.end - kMargin);
    const std::vector<double> s1 = SeriesOver(gpu1, p.start + kMargin, p.end - kMargin);
    const double truth = static_cast<double>(p.bytes_moved) / ((p.end - p.start) / 1e9);
    const double rx0 = Of(s0, "profd_gpu_pcie_rx_bytes_per_second");
    const double tx0 = Of(s0, "profd_gpu_pcie_tx_bytes_per_second");
    const double nvl_rx1 = Of(s1, "profd_gpu_nvlink_rx_bytes_per_second");
    if (p.name == "htod") {
      EXPECT_NEAR(rx0 / truth, 1.04, 0.04);
      EXPECT_LT(Of(s1, "profd_gpu_pcie_rx_bytes_per_second"), 1e8);  // the other GPU
    } else if (p.name == "dtoh") {
      EXPECT_NEAR(tx0 / truth, 1.04, 0.04);
      EXPECT_LT(rx0, 1e8);
    } else if (p.name == "p2p") {
      EXPECT_NEAR(nvl_rx1 / truth, 1.04, 0.04);
      EXPECT_LT(rx0 + tx0, 1e8);  // not over PCIe
      // Every byte of the copy passes the receiver's L2.
      EXPECT_NEAR(Of(s1, "profd_gpu_l2_bytes_per_second") / truth, 1.0, 0.03);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);  // the first htod began before the sampling did
}

TEST(GpuCountersTest, MeansWeighEachSampleByItsLengthAndSkipWhatWasNotMeasured) {
  GpuCounterMeans means(2);
  const double nan = std::nan("");
  means.Add(0, 900, std::vector<double>{10, nan});
  means.Add(900, 1000, std::vector<double>{100, 5});
  means.Add(1000, 1000, std::vector<double>{1e9, 1e9});  // no length: no weight
  std::vector<double> m = means.Take();
  EXPECT_DOUBLE_EQ(m[0], 19.0);  // (10 * 900 + 100 * 100) / 1000
  EXPECT_DOUBLE_EQ(m[1], 5.0);
  m = means.Take();  // nothing since: NaN, not the old values
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
}

}  // namespace
}  // namespace profd

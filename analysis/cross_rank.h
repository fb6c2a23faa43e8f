// Across ranks: the traces of one job's processes on several GPUs and nodes (a fleet capture),
// each analysed alone, set side by side to find the straggler, the rank whose GPU work runs long
// while the others wait for it in their collectives (or sit idle). The rows and the finding come
// from each rank's own Report: nothing here reads a trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/report.h"

namespace profd::analysis {

struct RankRow {
  std::string name;  // who the rank is: pod and node, or its trace
  int64_t window_ns = 0;
  int64_t kernel_ns = 0;      // all its kernels
  int64_t collective_ns = 0;  // NCCL (and other collective) kernels: where a rank waits for others
  int64_t compute_ns = 0;     // kernel_ns - collective_ns: its own work
  double busy_ratio = 0;      // mean over its GPUs
  int64_t idle_ns = 0;        // summed over its GPUs
};

// One rank: its name and its own report (which must outlive the call).
struct RankInput {
  std::string name;
  const Report* report = nullptr;
};

struct CrossRankReport {
  std::vector<RankRow> ranks;
  std::vector<Finding> findings;  // "straggler" when one rank's work is well above the others'
};

// Thresholds (docs/ANALYSIS.md, "Across ranks").
struct CrossRankOptions {
  double straggler_ratio = 1.25;             // its compute time over the others' median
  int64_t straggler_min_excess_ns = 100000;  // and at least this much more (noise on tiny traces)
};

// Needs at least two ranks; fewer give rows and no finding.
CrossRankReport AnalyzeRanks(const std::vector<RankInput>& ranks,
                             const CrossRankOptions& options = {});

// Whether a kernel is a collective: the others' arrival is waited for inside it.
bool IsCollectiveKernel(const std::string& name);

std::string RenderRanks(const CrossRankReport& report);
std::string RanksToJson(const CrossRankReport& report);

}  // namespace profd::analysis

// The findings: each a rule over the report's numbers with a stated threshold, the evidence that
// made it fire, and what to do about it. The seeds' manual diagnosis, written down.
#pragma once

#include <string_view>
#include <vector>

#include "analysis/report.h"

namespace profd::analysis {

// all_kernels: every kernel row, sorted by total time (the report keeps only the top ones).
std::vector<Finding> BuildFindings(const Report& report, const std::vector<KernelRow>& all_kernels,
                                   const AnalysisOptions& options);

// Sets k->bound and k->bound_reason from its hardware counters, counter_time_ns and median
// instance, by the rule of AnalysisOptions' bound_* thresholds (docs/ANALYSIS.md, "Bound").
// Leaves both empty when the kernel has no counters or the ones the rule needs were not measured.
void ClassifyBound(const AnalysisOptions& options, KernelRow* k);

// The kernel table's columns from the counters, as the text and HTML reports show them: the
// occupancy (measured plain, the launch-configuration estimate marked "~", "-" unknown), then
// SM, Tensor, DRAM and Bound.
std::vector<std::string> KernelCounterCells(const KernelRow& k);

// One of a kernel's counters by its trace name ("sm_active_ratio"); NaN where not measured.
double CounterOf(const KernelRow& k, std::string_view trace_name);

// A kernel's achieved occupancy as the findings and renderers show it: measured
// (sm_occupancy_ratio) where its counters have it, else the launch-configuration estimate.
struct KernelOccupancy {
  double ratio = -1;  // -1: neither
  bool measured = false;
};
KernelOccupancy OccupancyOf(const KernelRow& k);

}  // namespace profd::analysis

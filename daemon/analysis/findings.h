// The findings: each a rule over the report's numbers with a stated threshold, the evidence that
// made it fire, and what to do about it. The seeds' manual diagnosis, written down.
#pragma once

#include <vector>

#include "daemon/analysis/report.h"

namespace profd::analysis {

// all_kernels: every kernel row, sorted by total time (the report keeps only the top ones).
std::vector<Finding> BuildFindings(const Report& report, const std::vector<KernelRow>& all_kernels,
                                   const AnalysisOptions& options);

}  // namespace profd::analysis

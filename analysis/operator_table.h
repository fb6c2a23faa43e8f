// The operator table of `profctl report`: torch.profiler's key_averages() (per operator name:
// calls, self/total CPU time, self/total CUDA time) rebuilt from a trace's cpu_op events, and
// which operator launched each kernel. Definitions follow torch/autograd/profiler_util.py
// (EventList._populate_cpu_children, _remove_dup_nodes, FunctionEvent, key_averages); where a
// trace cannot say what torch knew in memory, docs/ANALYSIS.md says how we differ.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/report.h"
#include "analysis/trace_model.h"

namespace profd::analysis {

struct OperatorAnalysis {
  static constexpr uint32_t kNoOperator = UINT32_MAX;
  // Every operator name, most CUDA total first (not cut to top_operators). The first
  // top_operators rows carry their kernels.
  std::vector<OperatorRow> rows;
  OperatorSummary summary;
  // Per Trace::gpu index: the row of the innermost operator that launched it, or kNoOperator.
  // Empty when the trace has no CPU operators.
  std::vector<uint32_t> launched_by;
};

// launch_of: correlation id -> index into trace.host of the launch call (the analyzer's map),
// used for GPU activities that carry no External id. Pure; any thread.
OperatorAnalysis AnalyzeOperators(const Trace& trace,
                                  const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                                  const AnalysisOptions& options);

}  // namespace profd::analysis

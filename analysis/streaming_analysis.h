// The bottleneck analysis in one pass over the events, in memory bounded by the number of
// distinct names, GPUs, streams, threads and histogram buckets — not by the number of events.
// Every report profd makes comes from here: a capture's summary.json (fed event batch by event
// batch as they arrive, daemon/capture/capture_analysis.h), an imported trace and `profctl
// report FILE` (fed from the parsed trace, Analyze in analysis.h).
//
//   Trace tables;                               // names, launch configurations, devices, files
//   StreamingAnalysis analysis(&tables, options);
//   ... analysis.Add(host_call); analysis.Add(kernel); ...   (any order within the reorder window)
//   Report report = analysis.Finish();
//
// Events are analysed in start order. They may arrive out of order (an agent's batches interleave
// streams and API calls): each waits in a reorder buffer until the newest start seen is
// StreamLimits::reorder_window_ns past it. An event arriving after later-starting ones were
// analysed is "late": it is analysed anyway, counted, and the report says so (its gap and union
// arithmetic is then approximate). docs/ANALYSIS.md gives the definitions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/operator_table.h"
#include "analysis/report.h"
#include "analysis/samples.h"
#include "analysis/trace_model.h"

namespace profd::analysis {

struct StreamLimits {
  // How far out of start order GPU activities may arrive and still be analysed in order (an
  // agent's records come by completion, a flush apart).
  int64_t reorder_window_ns = 1'000'000'000;
  // GPU activities waiting in the reorder buffer; beyond, the oldest are analysed early.
  size_t max_buffered_events = size_t{1} << 18;
  // Launch calls remembered by correlation id after the GPU work around them was analysed, so
  // that GPU work starting up to this long after its launch call is matched to it.
  int64_t launch_memory_ns = 1'000'000'000;
  // At most this many: when more wait, the oldest GPU work is analysed early and the oldest
  // calls forgotten.
  size_t max_launch_calls = size_t{1} << 18;
  // Durations and delays kept exactly (medians, percentiles); beyond, histograms (samples.h).
  uint64_t exact_samples = uint64_t{1} << 18;
  // CPU operators and annotations kept for the operator table (they nest: kept whole).
  size_t max_cpu_ops = size_t{1} << 20;
  // Distinct kernel and CUDA API names given a row of their own (each ~0.5 KB of state, and a
  // row of the report); the others are counted together in one row named
  // NameTable::kOtherName, and the report says how many events went there. A program has a few
  // thousand kernels and a few hundred CUDA API functions; a generated or hostile trace
  // millions. These hold for every analysis, Unbounded() too.
  size_t max_kernel_names = size_t{1} << 14;
  size_t max_api_names = size_t{1} << 12;

  // No reordering limit and nothing forgotten: for a trace already whole in memory.
  static StreamLimits Unbounded();
};

class StreamingAnalysis {
 public:
  // tables: the names, launch configurations, devices, input files and window of the events,
  // owned by the caller, who may keep adding to them until Finish.
  StreamingAnalysis(const Trace* tables, const AnalysisOptions& options,
                    const StreamLimits& limits = {});
  ~StreamingAnalysis();

  void Add(const HostCall& call);
  // launcher: the operator row that launched it, when the caller ran the operator analysis
  // (Analyze does for traces with CPU operators); else OperatorAnalysis::kNoOperator.
  void Add(const GpuActivity& activity, uint32_t launcher = OperatorAnalysis::kNoOperator);
  // A CPU operator or annotation: kept (they nest) for the operator table, up to max_cpu_ops.
  void Add(const CpuOp& op);
  // One PM sample of a GPU's hardware counters. Samples of one (file, device) come in time order,
  // before the kernels they cover are analysed (a capture decodes them every few ms; a trace file
  // lists them first): each kernel analysed takes the overlap-weighted mean of the samples over
  // its running time. Kept until the analysis has passed them.
  void Add(const CounterSample& sample);
  // Events the caller found impossible and left out: counted in the report's invalid_events.
  void AddInvalid(uint64_t events);

  // Analyses what is still buffered and returns the report. operators: the operator analysis
  // the caller made (its rows name the launchers given to Add); without it, the table is built
  // from the CPU operators added here.
  Report Finish(OperatorAnalysis* operators = nullptr);

  // Bounded-memory bookkeeping, for tests and benchmarks.
  size_t buffered_events() const;
  size_t remembered_launches() const;
  uint64_t late_events() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace profd::analysis

// Analyze(): the numbers of the report (definitions in docs/ANALYSIS.md). Findings are derived
// from them in findings.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/analysis.h"
#include "analysis/operator_table.h"
#include "analysis/streaming_analysis.h"
#include "analysis/trace_reader.h"
#include "common/checked_math.h"

namespace profd::analysis {
namespace {

// Whether everything the analysis reads of the trace is within the model's limits (trace_model.h):
// times, and ids that index the trace's tables. TraceReader only produces such traces; a Trace
// built by other code is checked here so that no caller can make the arithmetic overflow.
bool GpuActivityOk(const Trace& t, const GpuActivity& a) {
  return TimeWithinLimits(a.start_ns, a.dur_ns) && a.name < t.names.size() &&
         a.launch_config < t.launch_configs.size();
}
bool HostCallOk(const Trace& t, const HostCall& c) {
  return TimeWithinLimits(c.start_ns, c.dur_ns) && c.name < t.names.size();
}
bool CpuOpOk(const Trace& t, const CpuOp& o) {
  return TimeWithinLimits(o.start_ns, o.dur_ns) && o.name < t.names.size();
}

// The trace without the events that fail those checks; *dropped counts them.
Trace WithinLimits(const Trace& trace, uint64_t* dropped) {
  Trace t = trace;
  auto gpu_bad = [&](const GpuActivity& a) { return !GpuActivityOk(trace, a); };
  auto host_bad = [&](const HostCall& c) { return !HostCallOk(trace, c); };
  auto op_bad = [&](const CpuOp& o) { return !CpuOpOk(trace, o); };
  auto g = std::remove_if(t.gpu.begin(), t.gpu.end(), gpu_bad);
  auto h = std::remove_if(t.host.begin(), t.host.end(), host_bad);
  auto o = std::remove_if(t.ops.begin(), t.ops.end(), op_bad);
  *dropped = static_cast<uint64_t>((t.gpu.end() - g) + (t.host.end() - h) + (t.ops.end() - o));
  t.gpu.erase(g, t.gpu.end());
  t.host.erase(h, t.host.end());
  t.ops.erase(o, t.ops.end());
  return t;
}

}  // namespace

Report Analyze(const Trace& input, const AnalysisOptions& options) {
  bool ok = true;
  for (const GpuActivity& a : input.gpu) ok = ok && GpuActivityOk(input, a);
  for (const HostCall& c : input.host) ok = ok && HostCallOk(input, c);
  for (const CpuOp& o : input.ops) ok = ok && CpuOpOk(input, o);
  uint64_t dropped = 0;
  Trace checked;
  if (!ok) checked = WithinLimits(input, &dropped);
  const Trace& trace = ok ? input : checked;

  // Which operator launched each GPU activity: the operator table needs the CPU operators
  // whole (they nest), so it is built from the trace in memory; the rest streams.
  OperatorAnalysis operators;
  if (!trace.ops.empty()) {
    absl::flat_hash_map<int64_t, uint32_t> launch_of;
    launch_of.reserve(trace.host.size());
    for (uint32_t i = 0; i < trace.host.size(); ++i) {
      const HostCall& c = trace.host[i];
      if (c.correlation < 0 || c.type == HostCall::Type::kSync) continue;
      auto [it, inserted] = launch_of.emplace(c.correlation, i);
      if (!inserted && c.type == HostCall::Type::kRuntime &&
          trace.host[it->second].type == HostCall::Type::kDriver) {
        it->second = i;
      }
    }
    operators = AnalyzeOperators(trace, launch_of, options);
  }

  // The whole trace is here: every launch call and counter sample first, then the GPU work in
  // start order.
  StreamingAnalysis analysis(&trace, options, StreamLimits::Unbounded());
  analysis.AddInvalid(dropped);
  for (const HostCall& c : trace.host) analysis.Add(c);
  std::vector<const CounterSample*> samples;
  for (const CounterSample& c : trace.counters) samples.push_back(&c);
  std::stable_sort(
      samples.begin(), samples.end(),
      [](const CounterSample* a, const CounterSample* b) { return a->start_ns < b->start_ns; });
  for (const CounterSample* c : samples) analysis.Add(*c);
  std::vector<uint32_t> order(trace.gpu.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return trace.gpu[a].start_ns < trace.gpu[b].start_ns;
  });
  for (uint32_t i : order) {
    analysis.Add(trace.gpu[i], i < operators.launched_by.size() ? operators.launched_by[i]
                                                                : OperatorAnalysis::kNoOperator);
  }
  return analysis.Finish(&operators);
}

absl::StatusOr<Report> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                         const AnalysisOptions& options) {
  absl::StatusOr<Trace> trace = ReadTraceFiles(paths);
  if (!trace.ok()) return trace.status();
  return Analyze(*trace, options);
}

namespace {

// A streaming read's events, into the analysis as they come.
class AnalysisSink : public TraceEventSink {
 public:
  explicit AnalysisSink(StreamingAnalysis* analysis) : analysis_(analysis) {}
  void Add(const GpuActivity& activity) override { analysis_->Add(activity); }
  void Add(const HostCall& call) override { analysis_->Add(call); }
  void Add(const CpuOp& op) override { analysis_->Add(op); }
  void Add(const CounterSample& sample) override { analysis_->Add(sample); }

 private:
  StreamingAnalysis* const analysis_;
};

}  // namespace

absl::StatusOr<Report> AnalyzeStream(
    const std::function<absl::Status(Trace* tables, TraceEventSink* sink)>& read,
    const AnalysisOptions& options, const StreamLimits& limits) {
  Trace tables;
  StreamingAnalysis analysis(&tables, options, limits);
  AnalysisSink sink(&analysis);
  if (absl::Status s = read(&tables, &sink); !s.ok()) return s;
  return analysis.Finish();
}

absl::StatusOr<Report> AnalyzeTraceFilesStreaming(const std::vector<std::string>& paths,
                                                  const AnalysisOptions& options,
                                                  const StreamLimits& limits) {
  return AnalyzeStream(
      [&](Trace* tables, TraceEventSink* sink) {
        for (const std::string& path : paths) {
          if (absl::Status s = StreamTraceFile(path, tables, sink); !s.ok()) return s;
        }
        return absl::OkStatus();
      },
      options, limits);
}

}  // namespace profd::analysis

#include "daemon/trace/capture_analysis.h"

#include <algorithm>

#include "analysis/analysis.h"
#include "daemon/trace/event_limits.h"
#include "daemon/trace/event_names.h"
#include "daemon/trace/trace_format.h"

namespace profd {
namespace {

// The trace names a GPU row by device and stream as its pid and tid, which a reader takes as
// int32: larger ones make the event impossible when read back.
bool GpuRowFits(uint32_t device, uint32_t stream) {
  return device <= INT32_MAX && stream <= INT32_MAX;
}

// A kernel's launch configuration. The trace writes the dimensions as signed numbers and the
// reader keeps them as read.
analysis::LaunchConfig LaunchConfigOf(const v1::Kernel& k) {
  analysis::LaunchConfig config;
  config.grid[0] = static_cast<uint32_t>(k.grid_x());
  config.grid[1] = static_cast<uint32_t>(k.grid_y());
  config.grid[2] = static_cast<uint32_t>(k.grid_z());
  config.block[0] = static_cast<uint32_t>(k.block_x());
  config.block[1] = static_cast<uint32_t>(k.block_y());
  config.block[2] = static_cast<uint32_t>(k.block_z());
  config.registers_per_thread = k.registers_per_thread();
  config.shared_memory_bytes = k.static_shared_bytes() + k.dynamic_shared_bytes();
  return config;
}

}  // namespace

using analysis::CpuOp;
using analysis::GpuActivity;
using analysis::HostCall;

CaptureAnalysis::CaptureAnalysis(int64_t base_time_ns, const analysis::AnalysisOptions& options,
                                 const analysis::StreamLimits& limits)
    : base_time_ns_(base_time_ns), analysis_(&tables_, options, limits) {
  tables_.has_base_time = true;
  tables_.base_time_ns = base_time_ns;
}

size_t CaptureAnalysis::AddProcess(uint32_t pid, const std::string& trace_path) {
  analysis::InputFile f;
  f.path = trace_path;
  f.format = "profd";
  f.gzip = true;
  // Its GPU work is the process's, also what comes before its first CUDA call.
  f.host_pid = pid <= INT32_MAX ? static_cast<int32_t>(pid) : -1;
  tables_.files.push_back(f);
  Process p;
  p.pid = pid;
  // As the reader keeps the files of a capture apart (trace_reader.cc).
  p.correlation_offset = static_cast<int64_t>(processes_.size()) << analysis::kCorrelationBits;
  processes_.push_back(std::move(p));
  return processes_.size() - 1;
}

uint32_t CaptureAnalysis::NameOf(Process& p, uint32_t string_id, const StringTable& names) {
  if (auto it = p.names.find(string_id); it != p.names.end()) return it->second;
  const uint32_t id = tables_.names.Intern(names.Text(string_id));
  // Ids past the NameTable's limits all name its one "other" row: not remembered, so that this
  // map stays as bounded as the table however many ids the agent uses.
  if (!tables_.names.IsOther(id)) p.names.emplace(string_id, id);
  return id;
}

bool CaptureAnalysis::Interval(size_t process, uint64_t start, uint64_t end, bool impossible,
                               int64_t* start_ns, int64_t* dur_ns) {
  if (!PlausibleInterval(start, end)) return false;  // not in the trace file
  ++tables_.files[process].events;
  *start_ns = static_cast<int64_t>(start) - base_time_ns_;
  *dur_ns = end > start ? static_cast<int64_t>(end - start) : 0;
  if (impossible || !analysis::TimeWithinLimits(*start_ns, *dur_ns)) {
    analysis_.AddInvalid(1);
    return false;
  }
  tables_.Cover(*start_ns, *start_ns + *dur_ns);
  return true;
}

void CaptureAnalysis::AddCounters(size_t process, uint32_t device,
                                  std::span<const GpuCounterReading> readings) {
  if (device > INT32_MAX) return;  // no trace row either (GpuRowFits)
  for (const GpuCounterReading& r : readings) {
    if (!PlausibleInterval(r.start_ns, r.end_ns) || r.end_ns == r.start_ns) continue;
    analysis::CounterSample c;
    c.start_ns = static_cast<int64_t>(r.start_ns) - base_time_ns_;
    c.dur_ns = static_cast<int64_t>(r.end_ns - r.start_ns);
    c.device = static_cast<int32_t>(device);
    c.file = static_cast<uint16_t>(process);
    c.values = r.values;
    analysis_.Add(c);
  }
}

void CaptureAnalysis::AddBatch(size_t process, const v1::EventBatch& batch,
                               const StringTable& names) {
  Process& p = processes_[process];
  // A string id given again names something else from now on.
  for (const v1::StringDef& def : batch.strings()) p.names.erase(def.id());
  AddDevices(batch);
  // API calls first: the GPU work they launched finds them by correlation id.
  AddHostCalls(process, batch, names);
  AddGpuWork(process, batch, names);
  AddHostOps(process, batch, names);
  // Memory allocations are instants: counted as records, not analysed.
  for (const v1::MemoryOp& m : batch.memory_ops()) {
    if (PlausibleEventTime(m.timestamp_ns())) ++tables_.files[process].events;
  }
}

void CaptureAnalysis::AddDevices(const v1::EventBatch& batch) {
  for (const v1::DeviceInfo& d : batch.devices()) {
    analysis::DeviceProperties dev;
    dev.id = static_cast<int32_t>(d.ordinal());
    dev.name = d.name();
    dev.num_sms = d.multiprocessors();
    dev.max_threads_per_sm = d.max_threads_per_multiprocessor();
    dev.regs_per_sm = d.max_registers_per_multiprocessor();
    dev.shared_memory_per_sm = d.max_shared_memory_per_multiprocessor();
    dev.max_blocks_per_sm = d.max_blocks_per_multiprocessor();
    dev.warp_size = d.warp_size();
    dev.compute_major = static_cast<int32_t>(d.compute_major());
    dev.compute_minor = static_cast<int32_t>(d.compute_minor());
    auto same = [&](const analysis::DeviceProperties& o) { return o.id == dev.id; };
    auto it = std::find_if(tables_.devices.begin(), tables_.devices.end(), same);
    if (it == tables_.devices.end()) {
      tables_.devices.push_back(std::move(dev));
    } else {
      *it = std::move(dev);
    }
  }
}

void CaptureAnalysis::AddHostCalls(size_t process, const v1::EventBatch& batch,
                                   const StringTable& names) {
  Process& p = processes_[process];
  const uint16_t file = static_cast<uint16_t>(process);
  int64_t start = 0, dur = 0;
  for (const v1::ApiCall& a : batch.api_calls()) {
    if (!Interval(process, a.start_ns(), a.end_ns(), a.tid() > INT32_MAX, &start, &dur)) continue;
    HostCall c;
    c.start_ns = start;
    c.dur_ns = dur;
    c.correlation = p.Correlation(a.correlation());
    c.name = NameOf(p, a.name_id(), names);
    c.pid = static_cast<int32_t>(p.pid);
    c.tid = static_cast<int32_t>(a.tid());
    c.file = file;
    c.type =
        a.domain() == v1::API_DOMAIN_DRIVER ? HostCall::Type::kDriver : HostCall::Type::kRuntime;
    analysis_.Add(c);
  }
  for (const v1::Synchronization& s : batch.syncs()) {
    if (!Interval(process, s.start_ns(), s.end_ns(), false, &start, &dur)) continue;
    HostCall c;
    c.start_ns = start;
    c.dur_ns = dur;
    c.correlation = p.Correlation(s.correlation());
    c.name = tables_.names.Intern(SyncKindName(s.kind()));
    c.pid = static_cast<int32_t>(p.pid);
    c.tid = 0;
    c.file = file;
    c.type = HostCall::Type::kSync;
    analysis_.Add(c);
  }
}

void CaptureAnalysis::AddGpuWork(size_t process, const v1::EventBatch& batch,
                                 const StringTable& names) {
  Process& p = processes_[process];
  const uint16_t file = static_cast<uint16_t>(process);
  int64_t start = 0, dur = 0;
  // What every GPU record gives alike (kernels, copies, memsets), once its interval is known.
  auto on_gpu = [&](const auto& record, GpuActivity::Type type) {
    GpuActivity a;
    a.start_ns = start;
    a.dur_ns = dur;
    a.correlation = p.Correlation(record.correlation());
    a.device = static_cast<int32_t>(record.device());
    a.stream = static_cast<int32_t>(record.stream());
    a.file = file;
    a.type = type;
    return a;
  };
  for (const v1::Kernel& k : batch.kernels()) {
    // Dimensions are int32 on the wire and written as they came: a negative one makes the kernel
    // impossible when the trace is read, and so here.
    const bool impossible =
        std::min({k.grid_x(), k.grid_y(), k.grid_z(), k.block_x(), k.block_y(), k.block_z()}) < 0 ||
        !GpuRowFits(k.device(), k.stream()) ||
        uint64_t{k.static_shared_bytes()} + k.dynamic_shared_bytes() > UINT32_MAX;
    if (!Interval(process, k.start_ns(), k.end_ns(), impossible, &start, &dur)) continue;
    GpuActivity a = on_gpu(k, GpuActivity::Type::kKernel);
    a.name = NameOf(p, k.name_id(), names);
    a.launch_config = tables_.InternLaunchConfig(LaunchConfigOf(k));
    analysis_.Add(a);
  }
  for (const v1::Memcpy& m : batch.memcpys()) {
    const bool impossible = !GpuRowFits(m.device(), m.stream()) || m.bytes() > INT64_MAX;
    if (!Interval(process, m.start_ns(), m.end_ns(), impossible, &start, &dur)) continue;
    GpuActivity a = on_gpu(m, GpuActivity::Type::kMemcpy);
    a.bytes = m.bytes();
    a.name = tables_.names.Intern(CopyName(m.copy_kind(), m.src_kind(), m.dst_kind()));
    a.copy_kind = analysis::CopyKindFromCupti(m.copy_kind());
    a.src_kind = analysis::MemoryKindFromCupti(m.src_kind());
    a.dst_kind = analysis::MemoryKindFromCupti(m.dst_kind());
    analysis_.Add(a);
  }
  for (const v1::Memset& m : batch.memsets()) {
    const bool impossible = !GpuRowFits(m.device(), m.stream()) || m.bytes() > INT64_MAX;
    if (!Interval(process, m.start_ns(), m.end_ns(), impossible, &start, &dur)) continue;
    GpuActivity a = on_gpu(m, GpuActivity::Type::kMemset);
    a.bytes = m.bytes();
    a.name = tables_.names.Intern(MemsetName(m.memory_kind()));
    analysis_.Add(a);
  }
}

void CaptureAnalysis::AddHostOps(size_t process, const v1::EventBatch& batch,
                                 const StringTable& names) {
  const Process& p = processes_[process];
  const uint16_t file = static_cast<uint16_t>(process);
  int64_t start = 0, dur = 0;
  auto on_host_op = [&](uint32_t tid, CpuOp::Kind kind) {
    CpuOp op;
    op.start_ns = start;
    op.dur_ns = dur;
    op.pid = static_cast<int32_t>(p.pid);
    op.tid = static_cast<int32_t>(tid);
    op.file = file;
    op.kind = kind;
    return op;
  };
  for (const v1::Marker& m : batch.markers()) {
    if (!Interval(process, m.start_ns(), m.end_ns(), m.tid() > INT32_MAX, &start, &dur)) continue;
    CpuOp op = on_host_op(m.tid(), CpuOp::Kind::kUserAnnotation);
    op.name = tables_.names.Intern(analysis::OperatorKey(names.Text(m.name_id())));
    analysis_.Add(op);
  }
  for (const v1::Overhead& o : batch.overheads()) {
    if (!Interval(process, o.start_ns(), o.end_ns(), o.tid() > INT32_MAX, &start, &dur)) continue;
    CpuOp op = on_host_op(o.tid(), CpuOp::Kind::kOverhead);
    op.name = tables_.names.Intern(OverheadName(o.kind()));
    analysis_.Add(op);
  }
}

analysis::Report CaptureAnalysis::Finish() { return analysis_.Finish(); }

absl::StatusOr<analysis::Report> AnalyzeWrittenTraces(
    const std::vector<std::pair<std::string, TraceFormat>>& files,
    const analysis::AnalysisOptions& options, const analysis::StreamLimits& limits) {
  return analysis::AnalyzeStream(
      [&](analysis::Trace* tables, analysis::TraceEventSink* sink) {
        for (const auto& [path, format] : files) {
          if (absl::Status s = TraceFormatOf(format).stream(path, tables, sink); !s.ok()) {
            return s;
          }
        }
        return absl::OkStatus();
      },
      options, limits);
}

absl::StatusOr<analysis::Report> AnalyzeTraceFilesOfAnyFormat(
    const std::vector<std::string>& paths, const analysis::AnalysisOptions& options) {
  std::vector<std::pair<std::string, TraceFormat>> files;
  bool json_only = true;
  for (const std::string& path : paths) {
    const TraceFormat format = TraceFormatOfFile(path).format;
    json_only &= format == TraceFormat::kChromeJson;
    files.emplace_back(path, format);
  }
  if (json_only) return analysis::AnalyzeTraceFiles(paths, options);
  return AnalyzeWrittenTraces(files, options);
}

}  // namespace profd

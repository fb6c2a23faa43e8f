#include "daemon/capture/capture_close.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace profd {

v1::CaptureSummary SummaryOf(const analysis::Report& report, uint64_t dropped_records) {
  v1::CaptureSummary out;
  out.set_window_ns(static_cast<uint64_t>(std::max<int64_t>(report.window_ns, 0)));
  out.set_events(report.events);
  out.set_dropped_records(dropped_records);
  for (const analysis::GpuRow& g : report.gpus) {
    v1::GpuSummary* gpu = out.add_gpus();
    gpu->set_pid(static_cast<uint32_t>(g.pid));
    gpu->set_device(static_cast<uint32_t>(g.device));
    gpu->set_busy_ratio(g.busy_ratio);
    gpu->set_kernels(g.kernels);
    gpu->set_memcpys(g.memcpys);
    gpu->set_memcpy_bytes(g.memcpy_bytes);
  }
  for (const analysis::KernelRow& k : report.top_kernels) {
    v1::KernelSummary* kernel = out.add_top_kernels();
    kernel->set_name(k.name);
    kernel->set_count(k.stats.count);
    kernel->set_total_ns(static_cast<uint64_t>(std::max<int64_t>(k.stats.total_ns, 0)));
    kernel->set_min_ns(static_cast<uint64_t>(std::max<int64_t>(k.stats.min_ns, 0)));
    kernel->set_max_ns(static_cast<uint64_t>(std::max<int64_t>(k.stats.max_ns, 0)));
    kernel->set_avg_ns(k.stats.avg_ns);
  }
  return out;
}

absl::Status CloseCaptureFolder(const absl::StatusOr<analysis::Report>& report,
                                uint64_t dropped_records, const CaptureOptions& options,
                                const CaptureFolder& folder, v1::CaptureInfo* info) {
  absl::Status written;
  if (report.ok()) {
    *info->mutable_summary() = SummaryOf(*report, dropped_records);
    for (const analysis::InputSummary& input : report->inputs) {
      for (const v1::TraceFile& f : info->files()) {
        if (f.path() != input.path) continue;
        for (v1::ProcessCapture& p : *info->mutable_processes()) {
          if (p.pid() == f.pid()) p.set_events(input.events);
        }
      }
    }
    written = folder.WriteSummary(*report);
  } else {
    written = folder.WriteSummary(info->summary());
  }
  if (written.ok()) written = folder.WriteManifest(*info);
  if (!written.ok()) return written;
  folder.ClearUnfinished();
  if (options.on_complete) {
    absl::StatusOr<std::string> location = options.on_complete(*info, folder.path());
    if (location.ok()) {
      info->set_location(*location);
    } else {
      info->set_message(absl::StrCat(info->message().empty() ? "" : info->message() + "; ",
                                     "store: ", location.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace profd

// RenderText: the terminal report, findings first, then the tables users compare with
// `nsys stats` (cuda_gpu_kern_sum, cuda_api_sum, memory operations).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/findings.h"
#include "analysis/format.h"
#include "analysis/render.h"
#include "analysis/text_table.h"
#include "common/printable.h"

namespace profd::analysis {
namespace {

std::string Ns(double ns) { return FormatDuration(ns); }
std::string Occ(double v) { return v < 0 ? "-" : absl::StrFormat("%.0f%%", v * 100); }
std::string Share(int64_t part, int64_t total) {
  return total > 0 ? FormatPercent(static_cast<double>(part) / total) : "-";
}

// torch.profiler's key_averages().table(sort_by="cuda_time_total"), with the kernels that make up
// each row's CUDA total under it.
void RenderOperators(const Report& r, std::string* out) {
  const OperatorSummary& s = r.operator_summary;
  if (r.operators.empty()) {
    // Only worth a line where a user would look for the table: GPU work without operators (our
    // CUPTI captures).
    if (r.kernel_count > 0) {
      absl::StrAppend(out,
                      "\nOPERATORS: none (the trace has no PyTorch CPU operators; torch.profiler "
                      "and Kineto traces have them)\n");
    }
    return;
  }
  absl::StrAppend(out, "\nOPERATORS (torch.profiler key_averages, sort_by=\"cuda_time_total\"; ",
                  "the kernels of each under it)\n");
  TextTable t({"CUDA total>", "Self CUDA>", "Self CUDA %>", "CUDA avg>", "Calls>", "Kernels/call>",
               "CPU total>", "Self CPU>", "Self CPU %>", "Name"});
  constexpr size_t kKernelsShown = 3;
  for (const OperatorRow& o : r.operators) {
    t.AddRow({Ns(o.cuda_total_ns), Ns(o.self_cuda_ns), Share(o.self_cuda_ns, s.self_cuda_total_ns),
              Ns(o.cuda_per_call_ns), FormatCount(o.calls),
              absl::StrFormat("%.2f", o.kernels_per_call), Ns(o.cpu_total_ns), Ns(o.self_cpu_ns),
              Share(o.self_cpu_ns, s.self_cpu_total_ns),
              o.user_annotation ? absl::StrCat(o.name, " (record_function)") : o.name});
    for (size_t i = 0; i < o.kernels.size() && i < kKernelsShown; ++i) {
      const OperatorKernel& k = o.kernels[i];
      t.AddRow({Ns(k.total_ns), "", "", Ns(k.count ? double(k.total_ns) / k.count : 0),
                FormatCount(k.count), "", "", "", "", absl::StrCat("  > ", k.name)});
    }
    uint64_t more = o.distinct_kernels - std::min(o.kernels.size(), kKernelsShown);
    if (more > 0) {
      t.AddRow({"", "", "", "", "", "", "", "", "",
                absl::StrCat("  > ", more, more == 1 ? " more kernel" : " more kernels")});
    }
  }
  *out += t.Render();
  absl::StrAppend(out, "  Self CPU time total: ", Ns(s.self_cpu_total_ns),
                  "; self CUDA time total: ", Ns(s.self_cuda_total_ns), "; ",
                  FormatCount(s.device_events_attributed), " of ", FormatCount(s.device_events),
                  " GPU activities launched by an operator");
  if (s.distinct > r.operators.size()) {
    absl::StrAppend(out, "; ", s.distinct - r.operators.size(), " more operators (--top)");
  }
  absl::StrAppend(out, "\n");
}

// nsys's cuda_gpu_kern_sum, and with hardware counters (--gpu-metrics) what each kernel kept
// busy and what bounds it. Without counters the table is exactly nsys's plus the estimate.
void RenderKernels(const Report& r, std::string* out) {
  absl::StrAppend(out, "\nTOP KERNELS (cuda_gpu_kern_sum)\n");
  bool counters = std::any_of(r.top_kernels.begin(), r.top_kernels.end(),
                              [](const KernelRow& k) { return k.counter_time_ns > 0; });
  std::vector<std::string> headers = {"Time %>", "Total Time>", "Instances>", "Avg>",
                                      "Med>",    "Min>",        "Max>",       "StdDev>"};
  if (counters) {
    headers.insert(headers.end(), {"Occ>", "SM>", "Tensor>", "DRAM>", "Bound"});
  } else {
    headers.push_back("Est. Occ>");
  }
  headers.push_back("Name");
  TextTable k(std::move(headers));
  for (const KernelRow& row : r.top_kernels) {
    std::vector<std::string> cells = {absl::StrFormat("%.1f", row.time_ratio * 100),
                                      Ns(row.stats.total_ns),
                                      FormatCount(row.stats.count),
                                      Ns(row.stats.avg_ns),
                                      Ns(row.stats.median_ns),
                                      Ns(row.stats.min_ns),
                                      Ns(row.stats.max_ns),
                                      Ns(row.stats.stddev_ns)};
    if (counters) {
      for (std::string& cell : KernelCounterCells(row)) cells.push_back(std::move(cell));
    } else {
      cells.push_back(Occ(row.est_occupancy));
    }
    cells.push_back(row.name);
    k.AddRow(std::move(cells));
  }
  *out += k.empty() ? "  (no kernels)\n" : k.Render();
  if (counters) {
    absl::StrAppend(out,
                    "  Occ: measured (sm_occupancy_ratio), ~ estimated from the launch "
                    "configuration. SM (active), Tensor (pipes busy), DRAM (of peak throughput): "
                    "hardware counters over each kernel's running time, device-wide");
    if (r.counter_samples > 0) {
      absl::StrAppend(out, " (", FormatCount(r.counter_samples), " samples of ",
                      Ns(r.counter_interval_ns), ")");
    }
    absl::StrAppend(out, ".\n");
  }
}

}  // namespace

std::string RenderFindings(const std::vector<Finding>& findings) {
  std::string out;
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    std::string sev = f.severity;
    std::transform(sev.begin(), sev.end(), sev.begin(), ::toupper);
    absl::StrAppend(&out, "  ", i + 1, ". [", sev, "] ", Printable(f.title), "\n");
    absl::StrAppend(&out, "     rule: ", f.threshold, "\n");
    for (const std::string& e : f.evidence) absl::StrAppend(&out, "     - ", Printable(e), "\n");
    for (const std::string& a : f.advice) absl::StrAppend(&out, "     > ", Printable(a), "\n");
  }
  return out;
}

std::string RenderText(const Report& r) {
  std::string out;
  std::vector<std::string> inputs;
  for (const InputSummary& in : r.inputs) {
    inputs.push_back(
        absl::StrCat(Printable(in.path), " (", in.format, in.gzip ? ", gzip" : "", ")"));
  }
  absl::StrAppend(&out, "Trace: ", absl::StrJoin(inputs, ", "), "\n");
  absl::StrAppend(&out, "Window: ", Ns(r.window_ns), ", ", FormatCount(r.events), " events, ",
                  FormatCount(r.kernel_count), " kernels (", FormatCount(r.distinct_kernels),
                  " distinct", FoldedText(r), "), kernel time ", Ns(r.kernel_time_ns), "\n");
  for (const DeviceSummary& d : r.devices) {
    absl::StrAppend(&out, "GPU ", d.id, ": ", Printable(d.name),
                    d.num_sms ? absl::StrCat(", ", d.num_sms, " SMs") : "",
                    d.assumed ? " (not in the trace)" : "", "\n");
  }

  absl::StrAppend(&out, "\nFINDINGS\n");
  if (r.findings.empty()) {
    absl::StrAppend(&out, "  No finding fired (thresholds in docs/ANALYSIS.md and --json).\n");
  }
  absl::StrAppend(&out, RenderFindings(r.findings));

  absl::StrAppend(&out, "\nGPUS (busy = union of kernel time; idle split as in HTA)\n");
  TextTable gpus({"PID>", "GPU>", "BUSY>", "COPY ONLY>", "IDLE>", "HOST WAIT>", "KERNEL WAIT>",
                  "OTHER>", "KERNELS>", "LAUNCH RATE>", "MED KERNEL>",
                  "LAUNCH DELAY p50/p90/p99>"});
  for (const GpuRow& g : r.gpus) {
    gpus.AddRow({absl::StrCat(g.pid), absl::StrCat(g.device), FormatPercent(g.busy_ratio),
                 Ns(g.copy_only_ns), Ns(g.idle_ns), Ns(g.idle.host_wait_ns),
                 Ns(g.idle.kernel_wait_ns), Ns(g.idle.other_ns), FormatCount(g.kernels),
                 FormatRate(g.launch_rate_per_s), Ns(g.median_kernel_ns),
                 g.kernels_with_launch == 0
                     ? "-"
                     : absl::StrCat(Ns(g.launch_delay_p50_ns), " / ", Ns(g.launch_delay_p90_ns),
                                    " / ", Ns(g.launch_delay_p99_ns))});
  }
  out += gpus.empty() ? "  (no GPU activity in the trace)\n" : gpus.Render();

  if (!r.processes.empty()) {
    absl::StrAppend(&out, "\nPROCESSES\n");
    TextTable procs({"PID>", "GPUS", "CUDA API CALLS>", "API TIME>", "SYNC (HOST BLOCKED)>",
                     "KERNELS>", "LAUNCH RATE>"});
    for (const ProcessRow& p : r.processes) {
      procs.AddRow({absl::StrCat(p.pid), p.devices.empty() ? "-" : absl::StrJoin(p.devices, ","),
                    FormatCount(p.api_calls), Ns(p.api_ns), Ns(p.sync_ns), FormatCount(p.kernels),
                    FormatRate(p.launch_rate_per_s)});
    }
    out += procs.Render();
  }

  RenderOperators(r, &out);

  RenderKernels(r, &out);

  absl::StrAppend(&out, "\nCUDA API SUMMARY (cuda_api_sum)\n");
  TextTable a(
      {"Time %>", "Total Time>", "Num Calls>", "Avg>", "Med>", "Min>", "Max>", "StdDev>", "Name"});
  for (const ApiRow& row : r.apis) {
    a.AddRow({absl::StrFormat("%.1f", row.time_ratio * 100), Ns(row.stats.total_ns),
              FormatCount(row.stats.count), Ns(row.stats.avg_ns), Ns(row.stats.median_ns),
              Ns(row.stats.min_ns), Ns(row.stats.max_ns), Ns(row.stats.stddev_ns), row.name});
  }
  out += a.empty() ? "  (no CUDA API events in the trace)\n" : a.Render();

  absl::StrAppend(&out, "\nCOPIES AND MEMSETS\n");
  TextTable c({"KIND", "HOST MEMORY", "COUNT>", "BYTES>", "GPU TIME>", "BANDWIDTH>"});
  for (const CopyRow& row : r.copies) {
    c.AddRow({row.kind, row.memory, FormatCount(row.count), FormatBytes(double(row.bytes)),
              Ns(row.total_ns), absl::StrFormat("%.1f GB/s", row.bandwidth_gbps)});
  }
  out += c.empty() ? "  (none)\n" : c.Render();

  absl::StrAppend(&out, "\nSYNCHRONIZATION\n");
  TextTable s({"KIND", "SOURCE", "COUNT>", "TOTAL>", "MAX>"});
  for (const SyncRow& row : r.syncs) {
    s.AddRow({row.kind, row.source, FormatCount(row.count), Ns(row.total_ns), Ns(row.max_ns)});
  }
  out += s.empty() ? "  (none)\n" : s.Render();

  absl::StrAppend(&out, "\nLAUNCH DELAY (kernel start - launch call end): p50 ",
                  Ns(r.launch_delay_p50_ns), ", p90 ", Ns(r.launch_delay_p90_ns), ", p99 ",
                  Ns(r.launch_delay_p99_ns), "\n");

  if (!r.queues.empty()) {
    absl::StrAppend(&out, "\nQUEUE DEPTH PER STREAM (launched, not finished)\n");
    TextTable q({"PID>", "GPU>", "STREAM>", "KERNELS>", "MAX>", "AVG>"});
    for (const StreamQueueRow& row : r.queues) {
      q.AddRow({absl::StrCat(row.pid), absl::StrCat(row.device), absl::StrCat(row.stream),
                FormatCount(row.kernels), absl::StrCat(row.max_depth),
                absl::StrFormat("%.2f", row.avg_depth)});
    }
    out += q.Render();
  }
  if (!r.notes.empty()) {
    absl::StrAppend(&out, "\nNOTES\n");
    for (const std::string& n : r.notes) absl::StrAppend(&out, "  - ", Printable(n), "\n");
  }
  return out;
}

}  // namespace profd::analysis

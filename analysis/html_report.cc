// RenderHtml: one self-contained page (inline CSS and SVG, no scripts, no fonts or CDNs) so the
// report opens from a file on a host with no network. Plot elements carry stable ids
// (plot-gpu-busy, plot-idle, plot-top-operators, plot-top-kernels, plot-launch-delay,
// plot-copies).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/findings.h"
#include "analysis/format.h"
#include "analysis/render.h"
#include "common/printable.h"

namespace profd::analysis {
namespace {

// Text for the page: Printable first (a name's direction controls would reorder the page as they
// reorder a terminal, and its control characters mean nothing in HTML), then HTML's own escapes.
std::string Esc(const std::string& text) {
  const std::string s = Printable(text);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Cut(const std::string& s, size_t max) {
  return s.size() <= max ? s : s.substr(0, max - 1) + "…";
}

constexpr const char* kColors[] = {"#2f6fdf", "#e4572e", "#29a36a", "#a05fd6",
                                   "#f0a202", "#17a2b8", "#6c757d", "#d6336c"};

const char* kStyle = R"css(
body{font:14px/1.45 -apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;
padding-bottom:4px}.meta{color:#5a6475;margin:2px 0}
table{border-collapse:collapse;width:100%;margin:6px 0 4px;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid #edf0f4;text-align:right;white-space:nowrap}
th{background:#f5f7fa;font-weight:600}td.name,th.name{text-align:left;white-space:normal;
word-break:break-all}
.finding{border-left:5px solid #999;background:#fafbfc;padding:8px 12px;margin:10px 0;border-radius:3px}
.finding.critical{border-color:#d62828}.finding.warning{border-color:#f0a202}.finding.info{border-color:#2f6fdf}
.finding h3{margin:0 0 4px;font-size:15px}.sev{font-size:11px;font-weight:700;text-transform:uppercase;
padding:1px 6px;border-radius:3px;color:#fff;margin-right:6px;background:#999}
.critical .sev{background:#d62828}.warning .sev{background:#f0a202}.info .sev{background:#2f6fdf}
.rule{color:#5a6475;font-size:12px;margin:2px 0 4px}.finding ul{margin:2px 0 2px 18px;padding:0}
.advice li{color:#165a36}.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.plot{border:1px solid #e3e7ee;border-radius:4px;padding:8px;background:#fff}
.plot h4{margin:0 0 4px;font-size:13px;color:#3a4354}svg text{font-size:11px;fill:#3a4354}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.notes li{color:#5a6475}a.def{color:inherit;text-decoration:underline dotted}dl.defs dt{font-weight:600;margin-top:6px}dl.defs dd{margin:0 0 0 16px;color:#3a4355}tr.sub td{color:#5a6475;font-size:12px;border-bottom:none}
)css";

// A horizontal bar chart: label on the left, bar, value text on the right.
std::string BarChart(const std::string& id, const std::vector<std::string>& labels,
                     const std::vector<double>& values, const std::vector<std::string>& texts,
                     const std::string& color) {
  const int row = 22, left = 290, width = 540, right = 170;
  int height = std::max<int>(row * static_cast<int>(labels.size()) + 10, 40);
  double max = 0;
  for (double v : values) max = std::max(max, v);
  std::string svg = absl::StrFormat(
      "<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" viewBox=\"0 0 %d %d\" "
      "role=\"img\">",
      id, left + width + right, height);
  if (labels.empty()) {
    absl::StrAppend(&svg, "<text x=\"10\" y=\"24\">no data</text>");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    int y = 5 + static_cast<int>(i) * row;
    double w = max > 0 ? values[i] / max * width : 0;
    absl::StrAppend(
        &svg,
        absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>", left - 6, y + 15,
                        Esc(Cut(labels[i], 40))),
        absl::StrFormat("<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                        "fill=\"%s\"><title>%s</title></rect>",
                        left, y + 3, std::max(w, 1.0), row - 6, color, Esc(labels[i])),
        absl::StrFormat("<text x=\"%.1f\" y=\"%d\">%s</text>", left + w + 6, y + 15,
                        Esc(texts[i])));
  }
  absl::StrAppend(&svg, "</svg>");
  return svg;
}

std::string BusyPlot(const Report& r) {
  const int left = 44, top = 10, width = 1040, height = 180, bottom = 28;
  std::string svg = absl::StrFormat(
      "<svg id=\"plot-gpu-busy\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" "
      "viewBox=\"0 0 %d %d\" role=\"img\">",
      left + width + 10, top + height + bottom);
  for (int pct = 0; pct <= 100; pct += 25) {
    double y = top + height - pct / 100.0 * height;
    absl::StrAppend(&svg, absl::StrFormat("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
                                          "stroke=\"#e3e7ee\"/><text x=\"%d\" y=\"%.1f\" "
                                          "text-anchor=\"end\">%d%%</text>",
                                          left, left + width, y, y, left - 4, y + 4, pct));
  }
  for (int t = 0; t <= 4; ++t) {
    double x = left + t * width / 4.0;
    const char* anchor = t == 0 ? "start" : t == 4 ? "end" : "middle";
    absl::StrAppend(
        &svg, absl::StrFormat("<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">%s"
                              "</text>",
                              x, top + height + 18, anchor,
                              Esc(FormatDuration(static_cast<double>(r.window_ns) * t / 4.0))));
  }
  for (size_t gi = 0; gi < r.gpus.size(); ++gi) {
    const GpuRow& g = r.gpus[gi];
    size_t n = g.busy_timeline.size();
    if (n == 0) continue;
    std::vector<std::string> pts;
    for (size_t i = 0; i < n; ++i) {
      double x0 = left + static_cast<double>(i) / n * width;
      double x1 = left + static_cast<double>(i + 1) / n * width;
      double y = top + height - g.busy_timeline[i] * height;
      pts.push_back(absl::StrFormat("%.1f,%.1f %.1f,%.1f", x0, y, x1, y));
    }
    const char* color = kColors[gi % 8];
    absl::StrAppend(
        &svg, absl::StrFormat("<polyline class=\"busy-line\" fill=\"none\" stroke=\"%s\" "
                              "stroke-width=\"1.5\" points=\"%s\"><title>GPU %d (pid %d)</title>"
                              "</polyline>",
                              color, absl::StrJoin(pts, " "), g.device, g.pid));
  }
  absl::StrAppend(&svg, "</svg>");
  return svg;
}

std::string IdlePlot(const Report& r) {
  const int row = 26, left = 150, width = 900;
  int height = std::max<int>(row * static_cast<int>(r.gpus.size()) + 10, 40);
  std::string svg = absl::StrFormat(
      "<svg id=\"plot-idle\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" "
      "viewBox=\"0 0 %d %d\" role=\"img\">",
      left + width + 10, height);
  const char* colors[] = {"#29a36a", "#17a2b8", "#e4572e", "#f0a202", "#adb5bd"};
  const char* names[] = {"busy (kernels)", "copies only", "host wait", "kernel wait", "other"};
  for (size_t gi = 0; gi < r.gpus.size(); ++gi) {
    const GpuRow& g = r.gpus[gi];
    int64_t parts[] = {g.busy_ns, g.copy_only_ns, g.idle.host_wait_ns, g.idle.kernel_wait_ns,
                       g.idle.other_ns};
    int y = 5 + static_cast<int>(gi) * row;
    absl::StrAppend(&svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">GPU %d "
                                          "(pid %d)</text>",
                                          left - 6, y + 16, g.device, g.pid));
    double x = left;
    for (int p = 0; p < 5; ++p) {
      double w = r.window_ns > 0 ? double(parts[p]) / r.window_ns * width : 0;
      if (w <= 0) continue;
      absl::StrAppend(&svg, absl::StrFormat("<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
                                            "height=\"%d\" fill=\"%s\"><title>%s: %s</title>"
                                            "</rect>",
                                            x, y + 3, w, row - 6, colors[p], names[p],
                                            Esc(FormatDuration(parts[p]))));
      x += w;
    }
  }
  absl::StrAppend(&svg, "</svg>");
  std::string legend = "<div class=\"legend\">";
  for (int p = 0; p < 5; ++p) {
    absl::StrAppend(&legend, "<span><i style=\"background:", colors[p], "\"></i>", names[p],
                    "</span>");
  }
  return svg + legend + "</div>";
}

// What the report's words mean, in the report itself (it is read far from profd's docs): each
// column and finding that has a definition links to it, at the end of the page.
struct Definition {
  const char* anchor;
  const char* term;
  const char* text;
};
constexpr Definition kDefinitions[] = {
    {"window", "Window", "From the first start to the last end of the trace's complete events."},
    {"busy", "Busy",
     "The length of the union of kernel intervals on the GPU within the window; busy % is busy / "
     "window."},
    {"copies-only", "Copies only",
     "Time with GPU copies or memsets running and no kernel: all GPU activity minus busy."},
    {"idle", "Idle", "The window minus the union of all GPU activity."},
    {"host-wait", "Host wait",
     "Idle gaps that end with work whose launch call started after the gap began (the CPU had "
     "not queued it yet), and the gap after the last work: the GPU waited for the host."},
    {"kernel-wait", "Kernel wait",
     "Idle gaps shorter than 30 µs before work that was already launched: the launch overhead "
     "between back-to-back kernels."},
    {"other", "Other",
     "The remaining idle gaps: longer waits for work already launched "
     "(events, other streams), or work without a known launch call."},
    {"launch-rate", "Launch rate", "Kernels / window."},
    {"launch-delay", "Launch delay",
     "Kernel start minus the end of the launch call that queued it, matched by correlation id; "
     "percentiles are nearest-rank."},
    {"queue-depth", "Queue depth",
     "Per stream: +1 at a launch call's start, −1 at its kernel's end; the maximum and the "
     "time-weighted average over the window."},
    {"occupancy", "Occupancy",
     "Warps resident per SM over the SM's maximum. Estimated from the launch configuration and "
     "the device (registers, shared memory, grid size), or measured by the GPU's counters with "
     "--gpu-metrics."},
    {"kernel-table", "Kernel table",
     "Per kernel name, the columns of nsys stats cuda_gpu_kern_sum: Time % of all kernel time, "
     "total, instances, average, median, minimum, maximum, sample standard deviation."},
    {"bandwidth", "Bandwidth", "Bytes / GPU time of the copies."},
    {"synchronization", "Synchronization",
     "Calls that block the host (device, stream and event synchronizes, blocking and pageable "
     "copies) and CUPTI's synchronization records."},
    {"findings", "Findings",
     "Each fires on the rule it prints, with the numbers it used. The thresholds are profd's "
     "analysis options; profd's docs/ANALYSIS.md describes each finding."},
};

// The definition's anchor of a column or title, "" if none.
const char* AnchorOf(const std::string& term) {
  static const std::pair<const char*, const char*> kTerms[] = {
      {"Busy", "busy"},
      {"Copies only", "copies-only"},
      {"Idle", "idle"},
      {"Host wait", "host-wait"},
      {"Kernel wait", "kernel-wait"},
      {"Other", "other"},
      {"Launch rate", "launch-rate"},
      {"Launch delay p50", "launch-delay"},
      {"Est. occupancy", "occupancy"},
      {"Occupancy", "occupancy"},
      {"Time %", "kernel-table"},
      {"Bandwidth", "bandwidth"},
      {"Max depth", "queue-depth"},
      {"Avg depth", "queue-depth"},
  };
  for (const auto& [text, anchor] : kTerms) {
    if (term == text) return anchor;
  }
  return "";
}

// A term linked to its definition.
std::string Defined(const std::string& term, const char* anchor) {
  return absl::StrCat("<a class=\"def\" href=\"#def-", anchor, "\">", Esc(term), "</a>");
}

std::string Definitions() {
  std::string s = "<h2 id=\"definitions\">Definitions</h2><dl class=\"defs\">";
  for (const Definition& d : kDefinitions) {
    absl::StrAppend(&s, "<dt id=\"def-", d.anchor, "\">", d.term, "</dt><dd>", Esc(d.text),
                    "</dd>");
  }
  return s + "</dl>";
}

std::string Th(const std::vector<std::string>& cols) {
  std::string s = "<tr>";
  for (const std::string& c : cols) {
    bool name = c == "Name" || c == "Kind" || c == "Host memory" || c == "Source";
    const char* anchor = AnchorOf(c);
    absl::StrAppend(&s, name ? "<th class=\"name\">" : "<th>",
                    *anchor ? Defined(c, anchor) : Esc(c), "</th>");
  }
  return s + "</tr>";
}

std::string Td(const std::vector<std::string>& cells, size_t name_from) {
  std::string s = "<tr>";
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i >= name_from) {
      // Templated kernel names run to a thousand characters: cut, the full name on hover.
      absl::StrAppend(&s, "<td class=\"name\" title=\"", Esc(cells[i]), "\">",
                      Esc(Cut(cells[i], 140)), "</td>");
    } else {
      absl::StrAppend(&s, "<td>", Esc(cells[i]), "</td>");
    }
  }
  return s + "</tr>";
}

// The title, the trace's size and the GPUs it ran on.
std::string PageHead(const Report& r, const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  absl::StrAppend(&h, "<title>profd report: ", Esc(title), "</title><style>", kStyle,
                  "</style></head><body>");
  absl::StrAppend(&h, "<h1>profd bottleneck report</h1><p class=\"meta\">", Esc(title), "</p>");
  absl::StrAppend(&h, "<p class=\"meta\">Window ", Esc(FormatDuration(r.window_ns)), " · ",
                  FormatCount(r.events), " events · ", FormatCount(r.kernel_count), " kernels (",
                  FormatCount(r.distinct_kernels), " distinct", Esc(FoldedText(r)),
                  ") · kernel time ", Esc(FormatDuration(r.kernel_time_ns)), "</p>");
  for (const DeviceSummary& d : r.devices) {
    absl::StrAppend(&h, "<p class=\"meta\">GPU ", d.id, ": ", Esc(d.name),
                    d.num_sms ? absl::StrCat(", ", d.num_sms, " SMs") : "",
                    d.assumed ? " (not in the trace: defaults assumed)" : "", "</p>");
  }
  return h;
}

std::string FindingsSection(const Report& r) {
  std::string h = absl::StrCat("<h2 id=\"findings\">", Defined("Findings", "findings"), "</h2>");
  if (r.findings.empty()) absl::StrAppend(&h, "<p>No finding fired.</p>");
  for (const Finding& f : r.findings) {
    absl::StrAppend(&h, "<div class=\"finding ", Esc(f.severity), "\" data-id=\"", Esc(f.id),
                    "\"><h3><span class=\"sev\">", Esc(f.severity), "</span>", Esc(f.title),
                    "</h3><div class=\"rule\">Rule: ", Esc(f.threshold), "</div><ul>");
    for (const std::string& e : f.evidence) absl::StrAppend(&h, "<li>", Esc(e), "</li>");
    absl::StrAppend(&h, "</ul><ul class=\"advice\">");
    for (const std::string& a : f.advice) absl::StrAppend(&h, "<li>", Esc(a), "</li>");
    absl::StrAppend(&h, "</ul></div>");
  }
  return h;
}

// Busy over time, where the window went, and the per-GPU table.
std::string GpuSection(const Report& r) {
  std::string h = absl::StrCat(
      "<h2>GPU busy over time</h2><div class=\"plot\"><h4>Share of each time "
      "bin with a kernel running</h4>",
      BusyPlot(r), "<div class=\"legend\">");
  for (size_t gi = 0; gi < r.gpus.size(); ++gi) {
    absl::StrAppend(&h, "<span><i style=\"background:", kColors[gi % 8], "\"></i>GPU ",
                    r.gpus[gi].device, " (pid ", r.gpus[gi].pid, ")</span>");
  }
  absl::StrAppend(&h, "</div></div>");
  absl::StrAppend(&h, "<h2>Where the ", Defined("window", "window"),
                  " went</h2><div class=\"plot\">", IdlePlot(r), "</div>");

  absl::StrAppend(
      &h, "<table>",
      Th({"PID", "GPU", "Busy", "Copies only", "Idle", "Host wait", "Kernel wait", "Other",
          "Kernels", "Launch rate", "Med kernel", "Launch delay p50", "p90", "p99"}));
  for (const GpuRow& g : r.gpus) {
    h += Td(
        {absl::StrCat(g.pid), absl::StrCat(g.device), FormatPercent(g.busy_ratio),
         FormatDuration(g.copy_only_ns), FormatDuration(g.idle_ns),
         FormatDuration(g.idle.host_wait_ns), FormatDuration(g.idle.kernel_wait_ns),
         FormatDuration(g.idle.other_ns), FormatCount(g.kernels), FormatRate(g.launch_rate_per_s),
         FormatDuration(g.median_kernel_ns), FormatDuration(g.launch_delay_p50_ns),
         FormatDuration(g.launch_delay_p90_ns), FormatDuration(g.launch_delay_p99_ns)},
        99);
  }
  absl::StrAppend(&h, "</table>");
  return h;
}

// Operators: torch.profiler's key_averages table sorted by CUDA total, each row's kernels under
// it (the page's answer to the seeds' first question: which operator takes the GPU time).
std::string OperatorsSection(const Report& r) {
  if (r.operators.empty()) return "";
  const OperatorSummary& s = r.operator_summary;
  std::vector<std::string> labels, texts;
  std::vector<double> values;
  for (size_t i = 0; i < r.operators.size() && i < 12; ++i) {
    const OperatorRow& o = r.operators[i];
    labels.push_back(o.name);
    values.push_back(double(o.cuda_total_ns));
    texts.push_back(
        absl::StrCat(FormatDuration(o.cuda_total_ns), ", ", FormatCount(o.calls), " calls"));
  }
  std::string h = absl::StrCat(
      "<h2 id=\"operators\">Operators</h2><div class=\"plot\"><h4>CUDA total per "
      "operator (torch.profiler key_averages, sort_by=\"cuda_time_total\")</h4>",
      BarChart("plot-top-operators", labels, values, texts, "#29a36a"), "</div>");
  auto share = [](int64_t part, int64_t total) {
    return total > 0 ? FormatPercent(double(part) / total) : std::string("-");
  };
  absl::StrAppend(&h, "<table id=\"operator-table\">",
                  Th({"CUDA total", "Self CUDA", "Self CUDA %", "CUDA avg", "Calls", "Kernels/call",
                      "CPU total", "Self CPU", "Self CPU %", "Name"}));
  for (const OperatorRow& o : r.operators) {
    h += Td({FormatDuration(o.cuda_total_ns), FormatDuration(o.self_cuda_ns),
             share(o.self_cuda_ns, s.self_cuda_total_ns), FormatDuration(o.cuda_per_call_ns),
             FormatCount(o.calls), absl::StrFormat("%.2f", o.kernels_per_call),
             FormatDuration(o.cpu_total_ns), FormatDuration(o.self_cpu_ns),
             share(o.self_cpu_ns, s.self_cpu_total_ns),
             o.user_annotation ? o.name + " (record_function)" : o.name},
            9);
    for (const OperatorKernel& k : o.kernels) {
      std::string row = Td({FormatDuration(k.total_ns), "", "",
                            FormatDuration(k.count ? double(k.total_ns) / k.count : 0),
                            FormatCount(k.count), "", "", "", "", "↳ " + k.name},
                           9);
      h += "<tr class=\"sub\"" + row.substr(3);
    }
  }
  absl::StrAppend(&h, "</table><p class=\"meta\">Self CPU time total ",
                  Esc(FormatDuration(s.self_cpu_total_ns)), " · self CUDA time total ",
                  Esc(FormatDuration(s.self_cuda_total_ns)), " · ",
                  FormatCount(s.device_events_attributed), " of ", FormatCount(s.device_events),
                  " GPU activities launched by an operator</p>");
  return h;
}

// The nsys-style kernel table. With hardware counters (--gpu-metrics): what each kernel kept busy
// and what bounds it; measured occupancy in place of the estimate, which keeps a "~".
std::string KernelTable(const Report& r) {
  bool counters = std::any_of(r.top_kernels.begin(), r.top_kernels.end(),
                              [](const KernelRow& k) { return k.counter_time_ns > 0; });
  std::vector<std::string> cols = {
      "Time %", "Total Time", "Instances",
      "Avg",    "Med",        "Min",
      "Max",    "StdDev",     counters ? "Occupancy" : "Est. occupancy",
      "Limiter"};
  if (counters) cols.insert(cols.end(), {"SM", "Tensor", "DRAM", "Bound"});
  cols.push_back("Name");
  std::string h = absl::StrCat("<table>", Th(cols));
  for (const KernelRow& k : r.top_kernels) {
    // The counter cells: occupancy first (before Limiter), then SM, Tensor, DRAM, Bound.
    std::vector<std::string> counter_cells;
    if (counters) counter_cells = KernelCounterCells(k);
    std::string occupancy = counters              ? counter_cells[0]
                            : k.est_occupancy < 0 ? "-"
                                                  : FormatPercent(k.est_occupancy);
    std::vector<std::string> cells = {absl::StrFormat("%.1f", k.time_ratio * 100),
                                      FormatDuration(k.stats.total_ns),
                                      FormatCount(k.stats.count),
                                      FormatDuration(k.stats.avg_ns),
                                      FormatDuration(k.stats.median_ns),
                                      FormatDuration(k.stats.min_ns),
                                      FormatDuration(k.stats.max_ns),
                                      FormatDuration(k.stats.stddev_ns),
                                      occupancy,
                                      k.occupancy_limiter.empty() ? "-" : k.occupancy_limiter};
    if (counters) cells.insert(cells.end(), counter_cells.begin() + 1, counter_cells.end());
    cells.push_back(k.name);
    h += Td(cells, cells.size() - 1);
  }
  absl::StrAppend(&h, "</table>");
  if (counters) {
    absl::StrAppend(&h,
                    "<p class=\"meta\">Occupancy: measured (sm_occupancy_ratio), ~ estimated "
                    "from the launch configuration. SM (active), Tensor (pipes busy), DRAM (of "
                    "peak throughput): hardware counters over "
                    "each kernel's running time, device-wide (",
                    FormatCount(r.counter_samples), " samples of ",
                    Esc(FormatDuration(r.counter_interval_ns)),
                    "). Bound: the kernel_bound finding gives the numbers behind it.</p>");
  }
  return h;
}

// Top kernels: chart (count x avg = total) and the table.
std::string TopKernelsSection(const Report& r) {
  std::vector<std::string> labels, texts;
  std::vector<double> values;
  for (size_t i = 0; i < r.top_kernels.size() && i < 12; ++i) {
    const KernelRow& k = r.top_kernels[i];
    labels.push_back(k.name);
    values.push_back(double(k.stats.total_ns));
    texts.push_back(absl::StrCat(FormatDuration(k.stats.total_ns), " = ",
                                 FormatCount(k.stats.count), " × ",
                                 FormatDuration(k.stats.avg_ns)));
  }
  return absl::StrCat(
      "<h2>Top kernels</h2><div class=\"plot\"><h4>Total GPU time per kernel "
      "(instances × average)</h4>",
      BarChart("plot-top-kernels", labels, values, texts, "#2f6fdf"), "</div>", KernelTable(r));
}

std::string LaunchDelayHistogram(const Report& r) {
  const int left = 50, top = 10, width = 1000, height = 160, bottom = 30;
  size_t n = r.launch_delay_histogram.size();
  uint64_t max = 1;
  for (const HistogramBin& b : r.launch_delay_histogram) max = std::max(max, b.count);
  std::string hist = absl::StrFormat(
      "<svg id=\"plot-launch-delay\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" "
      "viewBox=\"0 0 %d %d\" role=\"img\">",
      left + width + 10, top + height + bottom);
  for (size_t i = 0; i < n; ++i) {
    const HistogramBin& b = r.launch_delay_histogram[i];
    double bw = static_cast<double>(width) / n;
    double bh = double(b.count) / max * height;
    double x = left + i * bw;
    std::string range = b.hi_ns == INT64_MAX
                            ? absl::StrCat("≥ ", FormatDuration(b.lo_ns))
                            : absl::StrCat(FormatDuration(b.lo_ns), "–", FormatDuration(b.hi_ns));
    absl::StrAppend(
        &hist,
        absl::StrFormat("<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"#a05fd6\"><title>%s: %d kernels"
                        "</title></rect>",
                        x + 2, top + height - bh, bw - 4, std::max(bh, 0.5), Esc(range), b.count),
        absl::StrFormat("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", x + bw / 2,
                        top + height + 16,
                        Esc(b.hi_ns == INT64_MAX ? absl::StrCat("≥", FormatDuration(b.lo_ns))
                                                 : FormatDuration(b.lo_ns))),
        b.count > 0 ? absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" "
                                      "text-anchor=\"middle\">%s</text>",
                                      x + bw / 2, top + height - bh - 3, FormatCount(b.count))
                    : "");
  }
  absl::StrAppend(&hist, "</svg>");
  return hist;
}

std::string LaunchDelaySection(const Report& r) {
  return absl::StrCat("<h2>", Defined("Launch delay", "launch-delay"),
                      "</h2><div class=\"plot\"><h4>Kernel start − launch call "
                      "end (p50 ",
                      Esc(FormatDuration(r.launch_delay_p50_ns)), ", p90 ",
                      Esc(FormatDuration(r.launch_delay_p90_ns)), ", p99 ",
                      Esc(FormatDuration(r.launch_delay_p99_ns)), "); bins start at the label</h4>",
                      LaunchDelayHistogram(r), "</div>");
}

std::string CopiesSection(const Report& r) {
  std::vector<std::string> labels, texts;
  std::vector<double> values;
  for (const CopyRow& c : r.copies) {
    labels.push_back(absl::StrCat(c.kind, " ", c.memory));
    values.push_back(double(c.total_ns));
    texts.push_back(absl::StrCat(FormatDuration(c.total_ns), ", ", FormatBytes(double(c.bytes)),
                                 ", ", absl::StrFormat("%.1f GB/s", c.bandwidth_gbps)));
  }
  std::string h = absl::StrCat(
      "<h2>Copies and memsets</h2><div class=\"plot\"><h4>GPU time per kind and "
      "host memory</h4>",
      BarChart("plot-copies", labels, values, texts, "#e4572e"), "</div>");
  absl::StrAppend(&h, "<table>",
                  Th({"Kind", "Host memory", "Count", "Bytes", "GPU time", "Bandwidth"}));
  for (const CopyRow& c : r.copies) {
    absl::StrAppend(&h, "<tr><td class=\"name\">", Esc(c.kind), "</td><td class=\"name\">",
                    Esc(c.memory), "</td><td>", FormatCount(c.count), "</td><td>",
                    Esc(FormatBytes(double(c.bytes))), "</td><td>", Esc(FormatDuration(c.total_ns)),
                    "</td><td>", absl::StrFormat("%.1f GB/s", c.bandwidth_gbps), "</td></tr>");
  }
  absl::StrAppend(&h, "</table>");
  return h;
}

std::string ApiSection(const Report& r) {
  std::string h = absl::StrCat(
      "<h2>CUDA API summary</h2><table>",
      Th({"Time %", "Total Time", "Num Calls", "Avg", "Med", "Min", "Max", "StdDev", "Name"}));
  for (const ApiRow& a : r.apis) {
    h += Td({absl::StrFormat("%.1f", a.time_ratio * 100), FormatDuration(a.stats.total_ns),
             FormatCount(a.stats.count), FormatDuration(a.stats.avg_ns),
             FormatDuration(a.stats.median_ns), FormatDuration(a.stats.min_ns),
             FormatDuration(a.stats.max_ns), FormatDuration(a.stats.stddev_ns), a.name},
            8);
  }
  absl::StrAppend(&h, "</table>");
  return h;
}

std::string SyncSection(const Report& r) {
  std::string h = absl::StrCat("<h2>", Defined("Synchronization", "synchronization"),
                               "</h2><table>", Th({"Kind", "Source", "Count", "Total", "Max"}));
  for (const SyncRow& s : r.syncs) {
    absl::StrAppend(&h, "<tr><td class=\"name\">", Esc(s.kind), "</td><td class=\"name\">",
                    Esc(s.source), "</td><td>", FormatCount(s.count), "</td><td>",
                    Esc(FormatDuration(s.total_ns)), "</td><td>", Esc(FormatDuration(s.max_ns)),
                    "</td></tr>");
  }
  absl::StrAppend(&h, "</table>");
  return h;
}

std::string QueueSection(const Report& r) {
  if (r.queues.empty()) return "";
  std::string h = absl::StrCat("<h2>Queue depth per stream</h2><table>",
                               Th({"PID", "GPU", "Stream", "Kernels", "Max depth", "Avg depth"}));
  for (const StreamQueueRow& q : r.queues) {
    h += Td(
        {absl::StrCat(q.pid), absl::StrCat(q.device), absl::StrCat(q.stream),
         FormatCount(q.kernels), absl::StrCat(q.max_depth), absl::StrFormat("%.2f", q.avg_depth)},
        99);
  }
  absl::StrAppend(&h, "</table>");
  return h;
}

std::string NotesSection(const Report& r) {
  if (r.notes.empty()) return "";
  std::string h = "<h2>Notes</h2><ul class=\"notes\">";
  for (const std::string& n : r.notes) absl::StrAppend(&h, "<li>", Esc(n), "</li>");
  absl::StrAppend(&h, "</ul>");
  return h;
}

}  // namespace

std::string RenderHtml(const Report& r, const std::string& title) {
  std::string h = PageHead(r, title);
  absl::StrAppend(&h, FindingsSection(r), GpuSection(r), OperatorsSection(r), TopKernelsSection(r),
                  LaunchDelaySection(r));
  absl::StrAppend(&h, CopiesSection(r), ApiSection(r), SyncSection(r), QueueSection(r),
                  NotesSection(r));
  absl::StrAppend(&h, Definitions(), "<p class=\"meta\">Generated by profctl report (profd ",
                  PROFD_VERSION, ").</p></body></html>\n");
  return h;
}

}  // namespace profd::analysis

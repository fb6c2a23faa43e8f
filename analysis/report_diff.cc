#include "analysis/report_diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/format.h"
#include "analysis/text_table.h"
#include "common/checked_math.h"
#include "common/printable.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"

namespace profd::analysis {
namespace {

void SortRows(std::vector<DeltaRow>* rows, double units_a, double units_b) {
  std::sort(rows->begin(), rows->end(), [&](const DeltaRow& x, const DeltaRow& y) {
    double mx = std::max(x.total_a_ns / units_a, x.total_b_ns / units_b),
           my = std::max(y.total_a_ns / units_a, y.total_b_ns / units_b);
    if (mx != my) return mx > my;
    return x.name < y.name;
  });
}

// Steps the trace marks: torch.profiler's ProfilerStep#N ranges (one operator row).
uint64_t Steps(const Report& r) {
  for (const OperatorRow& o : r.operators) {
    if (o.user_annotation && o.name == "ProfilerStep*") return o.calls;
  }
  return 0;
}

std::string Change(double a, double b) {
  if (a == 0 && b == 0) return "";
  if (a == 0) return "new";
  if (b == 0) return "gone";
  return absl::StrFormat("%+.1f%%", (b - a) / a * 100);
}

std::string Value(double v, const std::string& unit) {
  if (unit == "ns") return FormatDuration(v);
  if (unit == "ratio") return FormatPercent(v);
  if (unit == "per_s") return FormatRate(v);
  // Counts come as doubles; out of uint64's range (a corrupt report) they print at its limit.
  return FormatCount(static_cast<uint64_t>(std::clamp(std::round(v), 0.0, 1.8e19)));
}

std::string OperatorName(const OperatorRow& o) {
  return o.user_annotation ? o.name + " (record_function)" : o.name;
}

}  // namespace

int64_t OperatorDeltaRow::cuda_delta_ns() const {
  return SaturatingSub(cuda_total_b_ns, cuda_total_a_ns);
}

namespace {

// The basis both sides are compared on: totals when the windows match, else per marked step, else
// per second.
void ChooseBasis(const Report& a, const Report& b, ReportDiff* d) {
  const double wa = double(a.window_ns), wb = double(b.window_ns);
  if (wa <= 0 || wb <= 0 || std::abs(wa - wb) <= kSameWindow * std::max(wa, wb)) return;
  const uint64_t sa = Steps(a), sb = Steps(b);
  if (sa > 0 && sb > 0) {
    d->basis = "per step";
    d->units_a = double(sa);
    d->units_b = double(sb);
  } else {
    d->basis = "per second";
    d->units_a = wa / 1e9;
    d->units_b = wb / 1e9;
  }
}

void AddOverview(const Report& a, const Report& b, ReportDiff* d) {
  const std::string per = d->basis == "total" ? "" : " " + d->basis;
  auto metric = [&](const std::string& name, double va, double vb, const std::string& unit) {
    d->overview.push_back({name, va, vb, unit});
  };
  // A sum over the window, compared per unit when the windows differ.
  auto summed = [&](const std::string& name, double va, double vb, const std::string& unit) {
    metric(name + per, va / d->units_a, vb / d->units_b, unit);
  };
  metric("window", double(a.window_ns), double(b.window_ns), "ns");
  if (d->basis == "per step") metric("steps", d->units_a, d->units_b, "count");
  summed("kernel time", double(a.kernel_time_ns), double(b.kernel_time_ns), "ns");
  summed("kernels", double(a.kernel_count), double(b.kernel_count), "count");
  metric("distinct kernels", double(a.distinct_kernels), double(b.distinct_kernels), "count");
  summed("CUDA API time", double(a.api_time_ns), double(b.api_time_ns), "ns");
  metric("launch delay p50", double(a.launch_delay_p50_ns), double(b.launch_delay_p50_ns), "ns");
  metric("launch delay p90", double(a.launch_delay_p90_ns), double(b.launch_delay_p90_ns), "ns");
  metric("launch delay p99", double(a.launch_delay_p99_ns), double(b.launch_delay_p99_ns), "ns");
  auto sum_sync = [](const Report& r) {
    double s = 0;  // in double: the sum of per-process totals may pass INT64_MAX
    for (const ProcessRow& p : r.processes) s += double(p.sync_ns);
    return s;
  };
  summed("host blocked in sync", sum_sync(a), sum_sync(b), "ns");
  std::map<int32_t, std::pair<const GpuRow*, const GpuRow*>> gpus;  // by device
  for (const GpuRow& g : a.gpus) gpus[g.device].first = &g;
  for (const GpuRow& g : b.gpus) gpus[g.device].second = &g;
  for (const auto& [dev, p] : gpus) {
    auto get = [](const GpuRow* g, auto f) { return g ? f(*g) : 0.0; };
    std::string gpu = absl::StrCat("GPU ", dev, " ");
    metric(gpu + "busy", get(p.first, [](const GpuRow& g) { return g.busy_ratio; }),
           get(p.second, [](const GpuRow& g) { return g.busy_ratio; }), "ratio");
    summed(gpu + "idle host wait",
           get(p.first, [](const GpuRow& g) { return double(g.idle.host_wait_ns); }),
           get(p.second, [](const GpuRow& g) { return double(g.idle.host_wait_ns); }), "ns");
    summed(gpu + "idle kernel wait",
           get(p.first, [](const GpuRow& g) { return double(g.idle.kernel_wait_ns); }),
           get(p.second, [](const GpuRow& g) { return double(g.idle.kernel_wait_ns); }), "ns");
    metric(gpu + "launch rate", get(p.first, [](const GpuRow& g) { return g.launch_rate_per_s; }),
           get(p.second, [](const GpuRow& g) { return g.launch_rate_per_s; }), "per_s");
  }
}

// One side's numbers of a row (side 0: a, 1: b).
void Fill(DeltaRow& r, int side, const std::string& name, uint64_t count, int64_t total_ns,
          double avg_ns) {
  r.name = name;
  (side ? r.count_b : r.count_a) = count;
  (side ? r.total_b_ns : r.total_a_ns) = total_ns;
  (side ? r.avg_b_ns : r.avg_a_ns) = avg_ns;
}

void Fill(OperatorDeltaRow& r, int side, const OperatorRow& o) {
  r.name = OperatorName(o);
  (side ? r.calls_b : r.calls_a) = o.calls;
  (side ? r.cuda_total_b_ns : r.cuda_total_a_ns) = o.cuda_total_ns;
  (side ? r.self_cuda_b_ns : r.self_cuda_a_ns) = o.self_cuda_ns;
  (side ? r.cpu_total_b_ns : r.cpu_total_a_ns) = o.cpu_total_ns;
  (side ? r.self_cpu_b_ns : r.self_cpu_a_ns) = o.self_cpu_ns;
}

// Kernels, API calls, copies and operators by name, each row with both sides' numbers.
void AddRows(const Report& a, const Report& b, ReportDiff* d) {
  std::map<std::string, DeltaRow> kernels, apis, copies;
  std::map<std::string, OperatorDeltaRow> operators;
  for (int side = 0; side < 2; ++side) {
    const Report& r = side ? b : a;
    for (const KernelRow& k : r.top_kernels) {
      Fill(kernels[k.name], side, k.name, k.stats.count, k.stats.total_ns, k.stats.avg_ns);
    }
    for (const ApiRow& k : r.apis) {
      Fill(apis[k.name], side, k.name, k.stats.count, k.stats.total_ns, k.stats.avg_ns);
    }
    for (const CopyRow& c : r.copies) {
      const std::string name = c.kind + " " + c.memory;
      Fill(copies[name], side, name, c.count, c.total_ns,
           c.count ? double(c.total_ns) / c.count : 0);
    }
    for (const OperatorRow& o : r.operators) Fill(operators[OperatorName(o)], side, o);
  }
  for (auto& [n, r] : operators) d->operators.push_back(r);
  std::sort(d->operators.begin(), d->operators.end(),
            [](const OperatorDeltaRow& x, const OperatorDeltaRow& y) {
              int64_t cx = std::max(x.cuda_total_a_ns, x.cuda_total_b_ns);
              int64_t cy = std::max(y.cuda_total_a_ns, y.cuda_total_b_ns);
              if (cx != cy) return cx > cy;
              int64_t px = std::max(x.cpu_total_a_ns, x.cpu_total_b_ns);
              int64_t py = std::max(y.cpu_total_a_ns, y.cpu_total_b_ns);
              if (px != py) return px > py;
              return x.name < y.name;
            });
  for (auto& [n, r] : kernels) d->kernels.push_back(r);
  for (auto& [n, r] : apis) d->apis.push_back(r);
  for (auto& [n, r] : copies) d->copies.push_back(r);
  SortRows(&d->kernels, d->units_a, d->units_b);
  SortRows(&d->apis, d->units_a, d->units_b);
  SortRows(&d->copies, d->units_a, d->units_b);
}

void AddFindings(const Report& a, const Report& b, ReportDiff* d) {
  std::set<std::string> fa, fb;
  for (const Finding& f : a.findings) fa.insert(f.id);
  for (const Finding& f : b.findings) fb.insert(f.id);
  for (const std::string& id : fa) {
    (fb.count(id) ? d->findings_both : d->findings_only_a).push_back(id);
  }
  for (const std::string& id : fb) {
    if (!fa.count(id)) d->findings_only_b.push_back(id);
  }
}

}  // namespace

ReportDiff DiffReports(const Report& a, const Report& b) {
  ReportDiff d;
  ChooseBasis(a, b, &d);
  AddOverview(a, b, &d);
  AddRows(a, b, &d);
  AddFindings(a, b, &d);
  return d;
}

std::string RenderDiffText(const ReportDiff& d, const std::string& label_a,
                           const std::string& label_b, size_t max_rows) {
  std::string out = absl::StrCat("A: ", Printable(label_a), "\nB: ", Printable(label_b), "\n");
  const bool per_unit = d.basis != "total";
  const std::string unit = d.basis == "per step" ? "step" : "s";
  if (per_unit) {
    absl::StrAppend(&out, "\nThe windows differ (A ",
                    d.basis == "per step" ? FormatCount(uint64_t(d.units_a)) + " steps"
                                          : FormatDuration(d.units_a * 1e9),
                    ", B ",
                    d.basis == "per step" ? FormatCount(uint64_t(d.units_b)) + " steps"
                                          : FormatDuration(d.units_b * 1e9),
                    "): totals and counts are compared ", d.basis, " of each side's own ",
                    d.basis == "per step" ? "steps" : "window", ".\n");
  }
  absl::StrAppend(&out, "\nOVERVIEW\n");
  TextTable o({"METRIC", "A>", "B>", "CHANGE>"});
  for (const auto& m : d.overview) {
    o.AddRow({m.name, Value(m.a, m.unit), Value(m.b, m.unit), Change(m.a, m.b)});
  }
  out += o.Render();
  auto rows = [&](const char* title, const std::vector<DeltaRow>& v, const char* count_name) {
    absl::StrAppend(&out, "\n", title, "\n");
    const std::string suffix = per_unit ? "/" + unit : "";
    TextTable t({"TOTAL A" + suffix + ">", "TOTAL B" + suffix + ">", "DELTA>", "CHANGE>",
                 std::string(count_name) + " A" + suffix + ">",
                 std::string(count_name) + " B" + suffix + ">", "AVG A>", "AVG B>", "NAME"});
    for (size_t i = 0; i < v.size() && i < max_rows; ++i) {
      const DeltaRow& r = v[i];
      const double ta = r.total_a_ns / d.units_a, tb = r.total_b_ns / d.units_b;
      t.AddRow({FormatDuration(ta), FormatDuration(tb),
                (tb > ta ? "+" : "") + FormatDuration(tb - ta), Change(ta, tb),
                Value(r.count_a / d.units_a, "count"), Value(r.count_b / d.units_b, "count"),
                FormatDuration(r.avg_a_ns), FormatDuration(r.avg_b_ns), r.name});
    }
    out += t.empty() ? "  (none)\n" : t.Render();
    if (v.size() > max_rows) absl::StrAppend(&out, "  … ", v.size() - max_rows, " more\n");
  };
  if (!d.operators.empty()) {
    absl::StrAppend(&out, "\nOPERATORS (torch.profiler key_averages, by CUDA total)\n");
    TextTable t({"CUDA A>", "CUDA B>", "DELTA>", "CHANGE>", "CALLS A>", "CALLS B>", "CPU A>",
                 "CPU B>", "SELF CPU A>", "SELF CPU B>", "NAME"});
    for (size_t i = 0; i < d.operators.size() && i < max_rows; ++i) {
      const OperatorDeltaRow& r = d.operators[i];
      int64_t delta = r.cuda_delta_ns();
      t.AddRow({FormatDuration(r.cuda_total_a_ns), FormatDuration(r.cuda_total_b_ns),
                (delta > 0 ? "+" : "") + FormatDuration(delta),
                Change(r.cuda_total_a_ns, r.cuda_total_b_ns), FormatCount(r.calls_a),
                FormatCount(r.calls_b), FormatDuration(r.cpu_total_a_ns),
                FormatDuration(r.cpu_total_b_ns), FormatDuration(r.self_cpu_a_ns),
                FormatDuration(r.self_cpu_b_ns), r.name});
    }
    out += t.Render();
    if (d.operators.size() > max_rows) {
      absl::StrAppend(&out, "  … ", d.operators.size() - max_rows, " more\n");
    }
  }
  rows("KERNELS", d.kernels, "INSTANCES");
  rows("CUDA API", d.apis, "CALLS");
  rows("COPIES AND MEMSETS", d.copies, "COUNT");
  absl::StrAppend(&out, "\nFINDINGS\n");
  for (const auto& id : d.findings_only_a) absl::StrAppend(&out, "  gone in B:  ", id, "\n");
  for (const auto& id : d.findings_only_b) absl::StrAppend(&out, "  new in B:   ", id, "\n");
  for (const auto& id : d.findings_both) absl::StrAppend(&out, "  in both:    ", id, "\n");
  if (d.findings_only_a.empty() && d.findings_only_b.empty() && d.findings_both.empty()) {
    absl::StrAppend(&out, "  none in either\n");
  }
  return out;
}

namespace {

using DiffJsonWriter = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

void WriteOverview(DiffJsonWriter& w, const ReportDiff& d) {
  w.Key("overview");
  w.StartArray();
  for (const auto& m : d.overview) {
    w.StartObject();
    w.Key("name");
    w.String(m.name.c_str());
    w.Key("unit");
    w.String(m.unit.c_str());
    w.Key("a");
    w.Double(m.a);
    w.Key("b");
    w.Double(m.b);
    w.EndObject();
  }
  w.EndArray();
}

void WriteDeltaRows(DiffJsonWriter& w, const char* key, const std::vector<DeltaRow>& v) {
  w.Key(key);
  w.StartArray();
  for (const DeltaRow& r : v) {
    w.StartObject();
    w.Key("name");
    w.String(r.name.c_str());
    w.Key("count_a");
    w.Uint64(r.count_a);
    w.Key("count_b");
    w.Uint64(r.count_b);
    w.Key("total_a_ns");
    w.Int64(r.total_a_ns);
    w.Key("total_b_ns");
    w.Int64(r.total_b_ns);
    w.Key("delta_ns");
    w.Int64(r.delta_ns());
    w.Key("avg_a_ns");
    w.Double(r.avg_a_ns);
    w.Key("avg_b_ns");
    w.Double(r.avg_b_ns);
    w.EndObject();
  }
  w.EndArray();
}

void WriteOperatorDeltas(DiffJsonWriter& w, const std::vector<OperatorDeltaRow>& operators) {
  w.Key("operators");
  w.StartArray();
  for (const OperatorDeltaRow& r : operators) {
    w.StartObject();
    w.Key("name");
    w.String(r.name.c_str());
    w.Key("calls_a");
    w.Uint64(r.calls_a);
    w.Key("calls_b");
    w.Uint64(r.calls_b);
    w.Key("cuda_total_a_ns");
    w.Int64(r.cuda_total_a_ns);
    w.Key("cuda_total_b_ns");
    w.Int64(r.cuda_total_b_ns);
    w.Key("cuda_delta_ns");
    w.Int64(r.cuda_delta_ns());
    w.Key("self_cuda_a_ns");
    w.Int64(r.self_cuda_a_ns);
    w.Key("self_cuda_b_ns");
    w.Int64(r.self_cuda_b_ns);
    w.Key("cpu_total_a_ns");
    w.Int64(r.cpu_total_a_ns);
    w.Key("cpu_total_b_ns");
    w.Int64(r.cpu_total_b_ns);
    w.Key("self_cpu_a_ns");
    w.Int64(r.self_cpu_a_ns);
    w.Key("self_cpu_b_ns");
    w.Int64(r.self_cpu_b_ns);
    w.EndObject();
  }
  w.EndArray();
}

void WriteFindingIds(DiffJsonWriter& w, const ReportDiff& d) {
  auto ids = [&](const char* key, const std::vector<std::string>& v) {
    w.Key(key);
    w.StartArray();
    for (const auto& s : v) w.String(s.c_str());
    w.EndArray();
  };
  w.Key("findings");
  w.StartObject();
  ids("only_a", d.findings_only_a);
  ids("only_b", d.findings_only_b);
  ids("both", d.findings_both);
  w.EndObject();
}

}  // namespace

std::string DiffToJson(const ReportDiff& d, const std::string& label_a,
                       const std::string& label_b) {
  rapidjson::StringBuffer buffer;
  DiffJsonWriter w(buffer);
  w.SetIndent(' ', 1);
  w.StartObject();
  w.Key("a");
  w.String(label_a.c_str());
  w.Key("b");
  w.String(label_b.c_str());
  // How the overview was compared; rows keep totals (divide by units_a / units_b per unit).
  w.Key("basis");
  w.String(d.basis.c_str());
  w.Key("units_a");
  w.Double(d.units_a);
  w.Key("units_b");
  w.Double(d.units_b);
  WriteOverview(w, d);
  WriteOperatorDeltas(w, d.operators);
  WriteDeltaRows(w, "kernels", d.kernels);
  WriteDeltaRows(w, "cuda_api", d.apis);
  WriteDeltaRows(w, "copies", d.copies);
  WriteFindingIds(w, d);
  w.EndObject();
  return EscapeJsonLineSeparators(std::string(buffer.GetString(), buffer.GetSize()) + "\n");
}

}  // namespace profd::analysis

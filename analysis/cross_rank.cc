#include "analysis/cross_rank.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/analysis.h"
#include "analysis/format.h"
#include "analysis/render.h"
#include "analysis/text_table.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd::analysis {
namespace {

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Ns(int64_t ns) { return FormatDuration(static_cast<double>(ns)); }

RankRow RowOf(const RankInput& in) {
  RankRow row;
  row.name = in.name;
  const Report& r = *in.report;
  row.window_ns = r.window_ns;
  row.kernel_ns = r.kernel_time_ns;
  for (const KernelRow& k : r.top_kernels) {
    if (IsCollectiveKernel(k.name)) row.collective_ns += k.stats.total_ns;
  }
  row.compute_ns = std::max<int64_t>(0, row.kernel_ns - row.collective_ns);
  double busy = 0;
  for (const GpuRow& g : r.gpus) {
    busy += g.busy_ratio;
    row.idle_ns += g.idle_ns;
  }
  row.busy_ratio = r.gpus.empty() ? 0 : busy / static_cast<double>(r.gpus.size());
  return row;
}

}  // namespace

bool IsCollectiveKernel(const std::string& name) {
  const std::string n = absl::AsciiStrToLower(name);
  return absl::StrContains(n, "nccl") || absl::StrContains(n, "rccl") ||
         absl::StrContains(n, "allreduce") || absl::StrContains(n, "all_reduce") ||
         absl::StrContains(n, "allgather") || absl::StrContains(n, "reducescatter");
}

CrossRankReport AnalyzeRanks(const std::vector<RankInput>& ranks, const CrossRankOptions& options) {
  CrossRankReport out;
  for (const RankInput& in : ranks) out.ranks.push_back(RowOf(in));
  if (out.ranks.size() < 2) return out;
  const auto slowest = std::max_element(
      out.ranks.begin(), out.ranks.end(),
      [](const RankRow& a, const RankRow& b) { return a.compute_ns < b.compute_ns; });
  std::vector<int64_t> others_compute, others_collective, others_idle;
  for (const RankRow& r : out.ranks) {
    if (&r == &*slowest) continue;
    others_compute.push_back(r.compute_ns);
    others_collective.push_back(r.collective_ns);
    others_idle.push_back(r.idle_ns);
  }
  const int64_t median = Median(others_compute);
  const double ratio = median > 0 ? static_cast<double>(slowest->compute_ns) / median : 0;
  const int64_t excess = slowest->compute_ns - median;
  if (median <= 0 || ratio < options.straggler_ratio || excess < options.straggler_min_excess_ns) {
    return out;
  }
  Finding f;
  f.id = "straggler";
  f.severity = ratio >= 2 ? "critical" : "warning";
  f.value = ratio;
  f.title = absl::StrCat(slowest->name, " is the straggler: its GPU work took ",
                         absl::StrFormat("%.2fx", ratio), " the median of the other ",
                         others_compute.size(), " rank(s)");
  f.threshold = absl::StrFormat(
      "one rank's kernel time outside collectives >= %.2fx the others' median and >= %s more",
      options.straggler_ratio, Ns(options.straggler_min_excess_ns));
  f.evidence.push_back(absl::StrCat(slowest->name, ": ", Ns(slowest->compute_ns),
                                    " of kernels outside collectives, against a median of ",
                                    Ns(median), " on the others (", Ns(excess), " more)"));
  const int64_t others_wait = Median(others_collective);
  if (others_wait > 0 || slowest->collective_ns > 0) {
    f.evidence.push_back(absl::StrCat(
        "the others waited in collective kernels ", Ns(others_wait), " (median), ", slowest->name,
        " only ", Ns(slowest->collective_ns), ": they arrive first and wait for it"));
  } else {
    f.evidence.push_back(
        absl::StrCat("no collective kernels in these traces; the others' GPUs were idle ",
                     Ns(Median(others_idle)), " (median) against ", Ns(slowest->idle_ns), " on ",
                     slowest->name));
  }
  f.advice.push_back(absl::StrCat(
      "Look at ", slowest->name,
      "'s own report (its row above): a kernel slower there than on the others points at its "
      "GPU or node (clocks and throttling, another process on the GPU, a slower link); more "
      "kernels or larger ones point at uneven work given to that rank"));
  f.advice.push_back(others_wait > 0
                         ? "Every other rank waits for it at each collective: the job runs at "
                           "this rank's speed"
                         : "Where the ranks synchronize (a collective, a shared batch, a "
                           "request fanned out to all), the others wait for this one");
  out.findings.push_back(std::move(f));
  return out;
}

std::string RenderRanks(const CrossRankReport& report) {
  TextTable table(
      {"RANK", "WINDOW>", "KERNELS>", "COMPUTE>", "COLLECTIVES>", "GPU BUSY>", "GPU IDLE>"}, 60);
  for (const RankRow& r : report.ranks) {
    table.AddRow({r.name, Ns(r.window_ns), Ns(r.kernel_ns), Ns(r.compute_ns), Ns(r.collective_ns),
                  FormatPercent(r.busy_ratio), Ns(r.idle_ns)});
  }
  std::string out = absl::StrCat(
      "ACROSS RANKS (kernel time outside collectives = each rank's own work)\n", table.Render());
  if (report.findings.empty()) {
    absl::StrAppend(&out, "  No straggler: no rank's work stands out from the others'.\n");
  } else {
    absl::StrAppend(&out, RenderFindings(report.findings));
  }
  return out + "\n";
}

std::string RanksToJson(const CrossRankReport& report) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("ranks");
  w.StartArray();
  for (const RankRow& r : report.ranks) {
    w.StartObject();
    w.Key("name");
    w.String(r.name.c_str());
    w.Key("window_ns");
    w.Int64(r.window_ns);
    w.Key("kernel_ns");
    w.Int64(r.kernel_ns);
    w.Key("compute_ns");
    w.Int64(r.compute_ns);
    w.Key("collective_ns");
    w.Int64(r.collective_ns);
    w.Key("busy_ratio");
    w.Double(r.busy_ratio);
    w.Key("idle_ns");
    w.Int64(r.idle_ns);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string ranks(buffer.GetString(), buffer.GetSize());
  // The findings in the one form every report writes them.
  rapidjson::Document doc;
  doc.Parse(ranks.c_str());
  rapidjson::Document findings(&doc.GetAllocator());
  findings.Parse(FindingsToJson(report.findings).c_str());
  doc.AddMember("findings", rapidjson::Value(findings, doc.GetAllocator()), doc.GetAllocator());
  rapidjson::StringBuffer all;
  rapidjson::Writer<rapidjson::StringBuffer> aw(all);
  doc.Accept(aw);
  return std::string(all.GetString(), all.GetSize());
}

}  // namespace profd::analysis

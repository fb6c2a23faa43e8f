// Before/after comparison of two reports (`profctl diff A B`): the same tables side by side
// with the change per operator, per kernel, per API and per copy kind, and which findings
// appeared or went.
#pragma once

#include <string>
#include <vector>

#include "analysis/report.h"

namespace profd::analysis {

struct DeltaRow {
  std::string name;
  uint64_t count_a = 0, count_b = 0;
  int64_t total_a_ns = 0, total_b_ns = 0;
  double avg_a_ns = 0, avg_b_ns = 0;
  int64_t delta_ns() const { return total_b_ns - total_a_ns; }
};

// One operator (key_averages row) on both sides.
struct OperatorDeltaRow {
  std::string name;  // "ProfilerStep* (record_function)" for a record_function label
  uint64_t calls_a = 0, calls_b = 0;
  int64_t cuda_total_a_ns = 0, cuda_total_b_ns = 0;
  int64_t self_cuda_a_ns = 0, self_cuda_b_ns = 0;
  int64_t cpu_total_a_ns = 0, cpu_total_b_ns = 0;
  int64_t self_cpu_a_ns = 0, self_cpu_b_ns = 0;
  int64_t cuda_delta_ns() const;  // saturating
};

struct ReportDiff {
  struct Metric {
    std::string name;
    double a = 0, b = 0;
    std::string unit;  // "ns", "ratio", "count", "per_s"
  };
  std::vector<Metric> overview;
  std::vector<OperatorDeltaRow> operators;  // by largest CUDA total in either, then CPU total
  std::vector<DeltaRow> kernels;            // by largest total in either, then by |delta|
  std::vector<DeltaRow> apis;
  std::vector<DeltaRow> copies;  // "HtoD Pageable", ...
  std::vector<std::string> findings_only_a, findings_only_b, findings_both;
  // Windows of different length (more than kSameWindow apart) are compared per step when both
  // traces mark steps (ProfilerStep#N), else per second: each side's totals and counts divided by
  // its own steps or seconds (units_a, units_b). The rows keep the totals; the overview, the
  // text's columns and the order are per unit. Windows alike: "total", units 1.
  std::string basis = "total";  // "per second", "per step"
  double units_a = 1, units_b = 1;
};

// Windows within this share of each other are compared as they are (totals).
inline constexpr double kSameWindow = 0.10;

// Reports should be computed with a large top_kernels/top_apis/top_operators so no row is cut.
ReportDiff DiffReports(const Report& a, const Report& b);
std::string RenderDiffText(const ReportDiff& diff, const std::string& label_a,
                           const std::string& label_b, size_t max_rows = 25);
std::string DiffToJson(const ReportDiff& diff, const std::string& label_a,
                       const std::string& label_b);

}  // namespace profd::analysis

#include "analysis/format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/report.h"
#include "analysis/trace_model.h"

namespace profd::analysis {

// A value that is not a number prints as "-", never as "nan" or "inf": the analysis rejects
// impossible input, so this only guards a renderer against a Report built by other code.
std::string FormatDuration(double ns) {
  if (!std::isfinite(ns)) return "-";
  double a = std::fabs(ns);
  if (a < 1e3) return absl::StrFormat("%.0f ns", ns);
  if (a < 1e6) return absl::StrFormat("%.1f µs", ns / 1e3);
  if (a < 1e9) return absl::StrFormat("%.2f ms", ns / 1e6);
  return absl::StrFormat("%.2f s", ns / 1e9);
}

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  if (bytes < 1024) return absl::StrFormat("%.0f B", bytes);
  if (bytes < 1024.0 * 1024) return absl::StrFormat("%.1f KiB", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024) return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024));
  return absl::StrFormat("%.2f GiB", bytes / (1024.0 * 1024 * 1024));
}

std::string FormatPercent(double ratio) {
  if (!std::isfinite(ratio)) return "-";
  return absl::StrFormat("%.1f%%", ratio * 100);
}

std::string FormatCount(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FormatRate(double per_s) {
  if (!std::isfinite(per_s)) return "-";
  if (per_s >= 1e6) return absl::StrFormat("%.2fM/s", per_s / 1e6);
  if (per_s >= 1e3) return absl::StrFormat("%.1fk/s", per_s / 1e3);
  return absl::StrFormat("%.0f/s", per_s);
}

std::string FoldedText(const Report& report) {
  if (report.folded_kernels == 0) return "";
  return absl::StrCat(", ", FormatCount(report.folded_kernels), " of them in ",
                      NameTable::kOtherName, ": too many distinct names, see the notes");
}

}  // namespace profd::analysis

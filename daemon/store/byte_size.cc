#include "daemon/store/byte_size.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace profd::store {

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < t.size() && (absl::ascii_isdigit(t[digits]) || t[digits] == '.')) ++digits;
  double number;
  if (digits == 0 || !absl::SimpleAtod(t.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text,
                     "' is not a size: expected a number with an optional unit, as "
                     "8MiB, 10G or 1048576"));
  }
  std::string unit(absl::StripAsciiWhitespace(t.substr(digits)));
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': unknown unit '", unit, "' (use K, M, G or T)"));
  }
  return static_cast<uint64_t>(number * scale);
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", v, units[u]);
}

}  // namespace profd::store

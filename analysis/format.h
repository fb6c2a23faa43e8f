// Human-readable numbers shared by the findings and the text and HTML renderers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace profd::analysis {

std::string FormatDuration(double ns);    // "812 ns", "12.4 µs", "3.21 ms", "1.50 s"
std::string FormatBytes(double bytes);    // "512 B", "1.5 KiB", "3.2 MiB", "1.1 GiB"
std::string FormatPercent(double ratio);  // 0.1234 -> "12.3%"
std::string FormatCount(uint64_t n);      // 1234567 -> "1,234,567"
std::string FormatRate(double per_s);     // "12.3k/s"

struct Report;
// ", 1,234 in [other names]" when the report folded kernels past its caps on distinct names;
// "" otherwise. The text and HTML headers' kernel count.
std::string FoldedText(const Report& report);

}  // namespace profd::analysis

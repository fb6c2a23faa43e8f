#include "analysis/text_table.h"

#include <algorithm>

#include "analysis/format.h"
#include "common/printable.h"

namespace profd::analysis {
namespace {

// Display width of UTF-8 text (code points; the report's text has no wide characters).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Cut(const std::string& s, size_t max) {
  if (Width(s) <= max) return s;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) {
      if (n + 1 >= max) break;
      ++n;
    }
    out += s[i];
  }
  return out + "…";
}

}  // namespace

TextTable::TextTable(std::vector<std::string> headers, size_t max_cell_width)
    : max_cell_width_(max_cell_width) {
  for (std::string& h : headers) {
    bool right = !h.empty() && h.back() == '>';
    if (right) h.pop_back();
    right_.push_back(right);
    headers_.push_back(std::move(h));
  }
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& c : cells) c = Cut(Printable(c), max_cell_width_);
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(const std::string& indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) width[i] = Width(headers_[i]);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], Width(row[i]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l = indent;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string pad(width[i] - Width(cells[i]), ' ');
      bool last = i + 1 == cells.size();
      if (right_[i]) {
        l += pad + cells[i];
      } else {
        l += cells[i];
        if (!last) l += pad;
      }
      if (!last) l += "  ";
    }
    out += l + "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace profd::analysis

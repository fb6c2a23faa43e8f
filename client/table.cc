#include "client/table.h"

#include <algorithm>

namespace profctl {
namespace {

// Display width in code points: good enough for names and paths.
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string Cut(const std::string& s, size_t max) {
  if (Width(s) <= max) return s;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xc0) != 0x80 && ++n > max - 1) break;
    out += s[i];
  }
  return out + "…";
}

}  // namespace

Table::Table(std::vector<std::string> headers, size_t max_cell_width)
    : max_cell_width_(max_cell_width) {
  for (std::string& h : headers) {
    bool right = !h.empty() && h.back() == '>';
    if (right) h.pop_back();
    right_.push_back(right);
    headers_.push_back(std::move(h));
  }
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& c : cells) c = Cut(c, max_cell_width_);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) widths[i] = Width(headers_[i]);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], Width(row[i]));
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string pad(widths[i] - Width(cells[i]), ' ');
      bool last = i + 1 == cells.size();
      line += right_[i] ? pad + cells[i] : cells[i] + (last ? "" : pad);
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace profctl

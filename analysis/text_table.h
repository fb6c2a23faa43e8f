// Fixed-width text tables for the terminal report: columns sized to their widest cell, a header
// ending in '>' right-aligns its column, long cells cut with an ellipsis.
#pragma once

#include <string>
#include <vector>

namespace profd::analysis {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers, size_t max_cell_width = 70);
  void AddRow(std::vector<std::string> cells);
  std::string Render(const std::string& indent = "  ") const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
  size_t max_cell_width_;
};

}  // namespace profd::analysis

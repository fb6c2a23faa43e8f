// Plain-text tables for profctl's human output: columns sized to their widest cell, numbers
// right-aligned, long cells cut with an ellipsis so one row stays on one line.
#pragma once

#include <string>
#include <vector>

namespace profctl {

class Table {
 public:
  // A header ending in '>' is right-aligned (the '>' is not printed).
  explicit Table(std::vector<std::string> headers, size_t max_cell_width = 60);
  void AddRow(std::vector<std::string> cells);
  std::string Render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
  size_t max_cell_width_;
};

}  // namespace profctl

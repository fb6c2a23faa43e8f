// Values whose median or percentiles the report prints (kernel and API durations, launch
// delays), kept in bounded memory: exactly while the analysis's shared budget of values lasts,
// then as a log-linear histogram (128 buckets per power of two: a median or percentile read from
// it is within 0.4 % of the true one). Count, total, min, max, mean and standard deviation stay
// exact either way. docs/ANALYSIS.md says which numbers become estimates, and when.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "analysis/report.h"

namespace profd::analysis {

// How many values all the Samples of one analysis may hold exactly, together.
class SampleBudget {
 public:
  explicit SampleBudget(uint64_t values) : left_(values) {}
  bool Take() { return left_ > 0 ? (--left_, true) : false; }
  void Give(uint64_t values) { left_ += values; }

 private:
  uint64_t left_;
};

class Samples {
 public:
  void Add(int64_t value, SampleBudget* budget);
  uint64_t count() const { return count_; }
  bool exact() const { return exact_mode_; }
  // nsys's columns: total, instances, mean, median (middle value, or the mean of the two
  // middle ones), min, max, sample standard deviation (n - 1).
  DurationStats Stats();
  // Nearest rank: the smallest value with at least p of the values <= it; 0 when empty.
  int64_t Percentile(double p);

 private:
  void Sort();
  // The histogram bucket of a value, and the value a bucket stands for (its middle).
  static int32_t BucketOf(int64_t value);
  static int64_t ValueOf(int32_t bucket);
  // The value of rank r (0-based) in sorted order.
  int64_t AtRank(uint64_t r);

  uint64_t count_ = 0;
  int64_t total_ = 0;  // saturating
  int64_t min_ = 0;
  int64_t max_ = 0;
  double mean_ = 0;  // Welford's running mean and sum of squared deviations
  double m2_ = 0;
  bool exact_mode_ = true;
  bool sorted_ = true;
  std::vector<int64_t> exact_;
  absl::btree_map<int32_t, uint64_t> buckets_;
};

}  // namespace profd::analysis

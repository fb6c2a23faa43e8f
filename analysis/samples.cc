#include "analysis/samples.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/checked_math.h"

namespace profd::analysis {
namespace {

// Magnitudes below 2^8 have a bucket each; above, each power of two has 2^7 buckets.
constexpr int kExactBits = 8;
constexpr int kSubBits = 7;

int32_t MagnitudeBucket(uint64_t m) {
  if (m < (uint64_t{1} << kExactBits)) return static_cast<int32_t>(m);
  const int e = 63 - std::countl_zero(m);  // >= kExactBits
  const uint64_t sub = (m >> (e - kSubBits)) & ((uint64_t{1} << kSubBits) - 1);
  return static_cast<int32_t>((uint64_t{1} << kExactBits) +
                              (static_cast<uint64_t>(e - kExactBits) << kSubBits) + sub);
}

uint64_t MagnitudeOf(int32_t bucket) {
  const uint64_t b = static_cast<uint64_t>(bucket);
  if (b < (uint64_t{1} << kExactBits)) return b;
  const uint64_t k = b - (uint64_t{1} << kExactBits);
  const int e = kExactBits + static_cast<int>(k >> kSubBits);
  const uint64_t sub = k & ((uint64_t{1} << kSubBits) - 1);
  const uint64_t lo = (((uint64_t{1} << kSubBits) + sub) << (e - kSubBits));
  return lo + ((uint64_t{1} << (e - kSubBits)) >> 1);
}

}  // namespace

int32_t Samples::BucketOf(int64_t value) {
  // Negative values (a kernel starting before its launch call returned) mirror the positive ones.
  if (value >= 0) return MagnitudeBucket(static_cast<uint64_t>(value));
  return -1 - MagnitudeBucket(static_cast<uint64_t>(-(value + 1)));
}

int64_t Samples::ValueOf(int32_t bucket) {
  if (bucket >= 0) return static_cast<int64_t>(std::min<uint64_t>(MagnitudeOf(bucket), INT64_MAX));
  return -static_cast<int64_t>(std::min<uint64_t>(MagnitudeOf(-1 - bucket), INT64_MAX - 1)) - 1;
}

void Samples::Add(int64_t value, SampleBudget* budget) {
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  total_ = SaturatingAdd(total_, value);
  const double delta = static_cast<double>(value) - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (static_cast<double>(value) - mean_);
  if (exact_mode_ && budget->Take()) {
    if (!exact_.empty() && value < exact_.back()) sorted_ = false;
    exact_.push_back(value);
    return;
  }
  if (exact_mode_) {
    // The budget is spent: this one moves to the histogram and gives its values back.
    exact_mode_ = false;
    for (int64_t v : exact_) ++buckets_[BucketOf(v)];
    budget->Give(exact_.size());
    std::vector<int64_t>().swap(exact_);
  }
  ++buckets_[BucketOf(value)];
}

void Samples::Sort() {
  if (!sorted_) std::sort(exact_.begin(), exact_.end());
  sorted_ = true;
}

int64_t Samples::AtRank(uint64_t r) {
  if (exact_mode_) {
    Sort();
    return exact_[r];
  }
  uint64_t seen = 0;
  for (const auto& [bucket, n] : buckets_) {
    seen += n;
    if (r < seen) return std::clamp(ValueOf(bucket), min_, max_);
  }
  return max_;
}

DurationStats Samples::Stats() {
  DurationStats s;
  if (count_ == 0) return s;
  s.count = count_;
  s.min_ns = min_;
  s.max_ns = max_;
  s.total_ns = total_;
  s.avg_ns = static_cast<double>(total_) / static_cast<double>(count_);
  const uint64_t n = count_;
  s.median_ns =
      n % 2 == 1
          ? static_cast<double>(AtRank(n / 2))
          : (static_cast<double>(AtRank(n / 2 - 1)) + static_cast<double>(AtRank(n / 2))) / 2;
  if (n > 1) {
    if (exact_mode_) {
      // Two passes over the values: the same digits as before the histogram existed.
      double sq = 0;
      for (int64_t v : exact_) sq += (v - s.avg_ns) * (v - s.avg_ns);
      s.stddev_ns = std::sqrt(sq / static_cast<double>(n - 1));
    } else {
      s.stddev_ns = std::sqrt(m2_ / static_cast<double>(n - 1));
    }
  }
  return s;
}

int64_t Samples::Percentile(double p) {
  if (count_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(p * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  return AtRank(rank - 1);
}

}  // namespace profd::analysis

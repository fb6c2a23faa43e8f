// Arithmetic on numbers that come from outside (trace files, agents): a sum of a million
// untrusted durations must neither wrap (undefined for signed integers) nor print a negative
// total, so totals saturate at the type's limit and conversions say when a value does not fit.
// Header-only: the trace writer, the analysis and the fuzz targets share it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace profd {

inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

inline int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

inline uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

// The integer a JSON number denotes, when it is one and fits: 12.0 is 12, but 12.5, NaN, Inf and
// 1e300 are not integers of int64.
inline std::optional<int64_t> ExactInt64(double d) {
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (!std::isfinite(d) || d != std::trunc(d) || d < -9223372036854775808.0 ||
      d >= 9223372036854775808.0) {
    return std::nullopt;
  }
  return static_cast<int64_t>(d);
}

// round(v * scale) when the result fits in [lo, hi]; nullopt for NaN, Inf and anything outside.
inline std::optional<int64_t> ScaledRound(double v, double scale, int64_t lo, int64_t hi) {
  double x = v * scale;
  if (!std::isfinite(x)) return std::nullopt;
  x = std::round(x);
  // lo and hi are far below 2^63 in magnitude here, so the comparisons in double are exact
  // enough: a value that rounds onto the bound is still accepted and converted safely.
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) return std::nullopt;
  return static_cast<int64_t>(x);
}

}  // namespace profd

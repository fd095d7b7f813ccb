// ExpectAllClose: |actual − ref| ≤ atol + rtol·|ref| for every element, NaN never passes; on failure
// prints the worst element (index, both values, the allowed error) and how many elements failed.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "gtest/gtest.h"

namespace specgen::testing {

inline ::testing::AssertionResult AllClose(std::span<const float> actual, std::span<const float> ref,
                                           double atol, double rtol) {
  if (actual.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs reference " << ref.size();
  }
  int64_t bad = 0, worst = -1;
  double worst_excess = -1.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = actual[i], r = ref[i];
    const double allowed = atol + rtol * std::fabs(r);
    const double err = std::fabs(a - r);
    const bool ok = std::isfinite(a) && std::isfinite(r) && err <= allowed;
    const double excess = std::isfinite(err) ? err / allowed : INFINITY;
    if (!ok) ++bad;
    if (excess > worst_excess || (!ok && worst < 0)) {
      worst_excess = excess;
      worst = static_cast<int64_t>(i);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const double a = actual[worst], r = ref[worst];
  return ::testing::AssertionFailure()
         << bad << " of " << ref.size() << " elements out of tolerance; worst at index " << worst
         << ": actual " << a << ", reference " << r << ", |diff| " << std::fabs(a - r) << " > allowed "
         << atol + rtol * std::fabs(r) << " (atol " << atol << ", rtol " << rtol << ")";
}

inline double MaxAbs(std::span<const float> v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace specgen::testing

// The one element-wise comparator of the tests, CPU and GPU alike: every element of `actual` must be
// within its allowed error of `reference`, either the band atol + rtol·|ref| (ExpectAllClose) or a
// bound the test derives per element from its reduction (ExpectAllWithin). NaN or Inf on either side
// never passes, whatever the bound. Each call prints one line (the worst element, by error over its
// allowed error, and the whole-tensor NMSE) so a log shows the margin of a passing check too; a
// failure names the worst element, both values, its allowed error and how many elements failed, at
// the caller's file and line.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace specgen::testing {

// The caller's file and line, taken as a defaulted argument. Not std::source_location: clang 14 with
// Debian's libstdc++ 12 lacks it (the fuzz preset builds every test with clang), while
// __builtin_FILE and __builtin_LINE, evaluated at the call site when they are default arguments,
// exist in GCC and every clang.
struct SourceLocation {
  const char* file;
  unsigned line;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE()) {
    return {file, line};
  }
  const char* file_name() const { return file; }
  unsigned line_number() const { return line; }
};

// Σ(a − r)² / Σ r² over the whole tensor: the error's energy relative to the reference's, a summary
// that one outlier does not dominate. NaN when either side holds a NaN or Inf; 0 when both are all
// zeros, Inf when only the reference is.
template <typename A, typename R>
double Nmse(std::span<const A> actual, std::span<const R> reference) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < reference.size() && i < actual.size(); ++i) {
    const double a = actual[i], r = reference[i];
    if (!std::isfinite(a) || !std::isfinite(r)) return NAN;
    err += (a - r) * (a - r);
    ref += r * r;
  }
  if (ref == 0.0) return err == 0.0 ? 0.0 : INFINITY;
  return err / ref;
}
inline double Nmse(std::span<const float> actual, std::span<const float> reference) {
  return Nmse<float, float>(actual, reference);
}
inline double Nmse(std::span<const float> actual, std::span<const double> reference) {
  return Nmse<float, double>(actual, reference);
}

// The largest |x|: the logit scale that tolerances of whole-model outputs are stated in.
inline double MaxAbs(std::span<const float> v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

namespace compare_internal {

// The shared check: |actual[i] − reference[i]| <= allowed(i), both finite.
template <typename R>
void ExpectWithin(std::span<const float> actual, std::span<const R> reference,
                  const std::function<double(size_t)>& allowed, std::string_view what,
                  const SourceLocation& where) {
  if (actual.size() != reference.size()) {
    ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line_number()))
        << what << ": " << actual.size() << " elements against a reference of " << reference.size();
    return;
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double a = actual[i], r = reference[i], bound = allowed(i);
    const double err = std::fabs(a - r);
    const bool ok = std::isfinite(a) && std::isfinite(r) && err <= bound;
    // Error in units of the allowed error; a failing element always ranks above a passing one.
    const double ratio = !ok ? (std::isfinite(err) && bound > 0.0 ? std::max(err / bound, 1.0) : INFINITY)
                             : (bound > 0.0 ? err / bound : 0.0);
    if (!ok) ++bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (reference.empty()) return;
  const double a = actual[worst], r = reference[worst];
  const double nmse = Nmse<float, R>(actual, reference);
  std::printf("[ compare ] %.*s: worst element %zu: actual %.9g reference %.9g |diff| %.3g allowed %.3g "
              "(%.3g of it), nmse %.3g, %zu of %zu out\n",
              static_cast<int>(what.size()), what.data(), worst, a, r, std::fabs(a - r), allowed(worst),
              worst_ratio, nmse, bad, reference.size());
  if (bad == 0) return;
  ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line_number()))
      << what << ": " << bad << " of " << reference.size() << " elements out of tolerance; worst at index "
      << worst << ": actual " << a << ", reference " << r << ", |diff| " << std::fabs(a - r) << " > allowed "
      << allowed(worst) << "; nmse " << nmse;
}

}  // namespace compare_internal

// Passes iff |actual[i] − reference[i]| <= atol + rtol·|reference[i]| for every i, both finite.
inline void ExpectAllClose(std::span<const float> actual, std::span<const float> reference, double atol,
                           double rtol, std::string_view what,
                           SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<float>(
      actual, reference, [&](size_t i) { return atol + rtol * std::fabs(double{reference[i]}); }, what,
      where);
}
inline void ExpectAllClose(std::span<const float> actual, std::span<const double> reference, double atol,
                           double rtol, std::string_view what,
                           SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<double>(
      actual, reference, [&](size_t i) { return atol + rtol * std::fabs(reference[i]); }, what, where);
}

// Passes iff |actual[i] − reference[i]| <= allowed(i) for every i, both finite: for bounds that
// follow each element's own reduction (Σ|w·x| of a dot product, |x| of a rotated pair).
inline void ExpectAllWithin(std::span<const float> actual, std::span<const float> reference,
                            const std::function<double(size_t)>& allowed, std::string_view what,
                            SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<float>(actual, reference, allowed, what, where);
}
inline void ExpectAllWithin(std::span<const float> actual, std::span<const double> reference,
                            const std::function<double(size_t)>& allowed, std::string_view what,
                            SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<double>(actual, reference, allowed, what, where);
}
inline void ExpectAllWithin(std::span<const float> actual, std::span<const float> reference,
                            std::span<const double> allowed, std::string_view what,
                            SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<float>(
      actual, reference, [&](size_t i) { return i < allowed.size() ? allowed[i] : NAN; }, what, where);
}
inline void ExpectAllWithin(std::span<const float> actual, std::span<const double> reference,
                            std::span<const double> allowed, std::string_view what,
                            SourceLocation where = SourceLocation::current()) {
  compare_internal::ExpectWithin<double>(
      actual, reference, [&](size_t i) { return i < allowed.size() ? allowed[i] : NAN; }, what, where);
}

}  // namespace specgen::testing

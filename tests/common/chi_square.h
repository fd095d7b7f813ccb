// Pearson chi-square goodness of fit for the samplers' statistical tests, with the p-value computed
// from the regularized upper incomplete gamma function (no statistics library here).
//
// Why this p-value: under H0 (the observed counts O_i are multinomial(N, p_i)), Pearson's
// X² = Σ (O_i − N p_i)² / (N p_i) converges in distribution to χ² with ν = (cells − 1) degrees of
// freedom. The χ²_ν density is x^{ν/2−1} e^{−x/2} / (2^{ν/2} Γ(ν/2)), i.e. Gamma(shape ν/2, scale 2),
// so P(χ²_ν > x) = Γ(ν/2, x/2) / Γ(ν/2) = Q(ν/2, x/2). A test that fails when Q(ν/2, X²/2) < 1e-6
// rejects a correct sampler with probability 1e-6 (the threshold IS the false-failure rate); the
// asymptotic approximation is good because every test keeps N·p_i ≥ 100 in each cell (Cochran's
// rule asks for ≥ 5). Q is evaluated as Numerical Recipes does (§6.2): the series for the lower
// function P when x < a + 1, else the Lentz continued fraction for Q; both converge to double
// precision in a few dozen terms for the ν used here.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace specgen::testing {

inline double RegularizedGammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    // P(a, x) = e^{-x} x^a / Γ(a) · Σ_n x^n / (a (a+1) ... (a+n))
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Q(a, x) = e^{-x} x^a / Γ(a) · 1 / (x + 1 - a - 1·(1-a)/(x + 3 - a - 2·(2-a)/(x + 5 - a - ...)))
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

struct ChiSquareResult {
  double statistic = 0;
  int dof = 0;
  double p_value = 1;
};

// Goodness of fit of `counts` to `probs` (same length). Cells with probability 0 must be empty: a
// single count there is an impossible event and gives p-value 0.
inline ChiSquareResult ChiSquareTest(const std::vector<int64_t>& counts,
                                     const std::vector<double>& probs) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  ChiSquareResult r;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] <= 0) {
      if (counts[i] > 0) {
        r.p_value = 0;
        r.statistic = std::numeric_limits<double>::infinity();
        return r;
      }
      continue;
    }
    const double e = n * probs[i];
    r.statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  r.dof = cells - 1;
  r.p_value = r.dof > 0 ? RegularizedGammaQ(r.dof / 2.0, r.statistic / 2.0) : 1.0;
  return r;
}

// The false-failure rate every statistical test here is built for.
constexpr double kFalseFailureRate = 1e-6;

}  // namespace specgen::testing

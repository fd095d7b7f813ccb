// Checks the chi-square p-value the statistical tests rely on against closed forms and published
// quantiles, so a wrong p-value cannot silently make those tests toothless (or flaky).
#include "tests/common/chi_square.h"

#include <cmath>

#include "gtest/gtest.h"

namespace specgen::testing {
namespace {

TEST(ChiSquare, TwoDegreesOfFreedomIsExponential) {
  // χ²_2 survival is exactly e^{-x/2}.
  for (double x : {0.1, 1.0, 5.0, 20.0, 27.631}) {
    EXPECT_NEAR(RegularizedGammaQ(1.0, x / 2), std::exp(-x / 2), 1e-12 * std::exp(-x / 2) + 1e-15);
  }
}

TEST(ChiSquare, OneDegreeOfFreedomIsTwoSidedNormal) {
  // χ²_1 survival at z² is erfc(z / √2).
  for (double z : {0.5, 1.0, 2.0, 4.0, 4.891638}) {
    const double expected = std::erfc(z / std::sqrt(2.0));
    EXPECT_NEAR(RegularizedGammaQ(0.5, z * z / 2), expected, 1e-10 * expected);
  }
}

TEST(ChiSquare, MatchesWilsonHilfertyQuantileAtOneInAMillion) {
  // Wilson–Hilferty: (X/ν)^{1/3} ≈ Normal(1 − 2/(9ν), 2/(9ν)); with z = 4.753424 (upper 1e-6 normal
  // quantile) gives a χ² quantile whose true tail probability is within a factor 2 of 1e-6 for the
  // ν these tests use (its cube-root normal approximation loosens as ν falls; at ν = 5 it is 4.7e-7).
  const double z = 4.753424;
  for (int nu : {7, 35, 63}) {
    const double s = 2.0 / (9.0 * nu);
    const double x = nu * std::pow(1 - s + z * std::sqrt(s), 3);
    const double q = RegularizedGammaQ(nu / 2.0, x / 2.0);
    EXPECT_GT(q, 0.5e-6) << nu;
    EXPECT_LT(q, 2.0e-6) << nu;
  }
}

TEST(ChiSquare, ImpossibleCellFails) {
  EXPECT_EQ(ChiSquareTest({10, 1}, {1.0, 0.0}).p_value, 0.0);
  EXPECT_GT(ChiSquareTest({10, 0}, {1.0, 0.0}).p_value, 0.5);
}

}  // namespace
}  // namespace specgen::testing

// engine/core/portable_silu.h: the exp and silu the host and the GPU share, against the correctly
// rounded functions (std::exp in double, rounded once to float, is within 2^-29 relative of exp: far
// below the 2^-24 of a float's half ulp, so it stands for the true value here).
#include "engine/core/portable_silu.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace specgen::portable {
namespace {

// |got − want| in units of the float ulp at want (want a positive normal float value).
double UlpError(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

float FloatAt(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Every 389th float of [lo_bits, hi_bits] (bit patterns of one sign), and the ends.
template <typename Fn>
void Sweep(uint32_t lo_bits, uint32_t hi_bits, Fn fn) {
  for (uint64_t b = lo_bits; b <= hi_bits; b += 389) fn(FloatAt(static_cast<uint32_t>(b)));
  fn(FloatAt(hi_bits));
}

// Where exp is a normal float (x ≥ ln FLT_MIN = −87.336) and finite (x ≤ ln FLT_MAX = 88.7228): the
// polynomial's 1.5 ulp (Cephes' stated 2.3e-7 relative peak with its two reductions' roundings) and
// the final scaling's exactness give at most 2 ulp (the sweep measured 0.96 when written); held to 2.
TEST(PortableExp, WithinTwoUlpWhereTheResultIsNormal) {
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const double e = UlpError(Exp(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, worst_x = x;
  };
  Sweep(0x00000000u, 0x42b17217u, check);  // +0 .. 88.7228
  Sweep(0x80000000u, 0xc2aeac4fu, check);  // −0 .. −87.336
  std::printf("Exp: worst %.3f ulp at x = %.9g\n", worst, worst_x);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

// Below ln FLT_MIN the result is subnormal: one rounding of a value within 2 ulp of a normal float's
// precision, so at most one subnormal step (2^-149) from the true value; below ln of half the least
// subnormal, 0.
TEST(PortableExp, SubnormalResultsWithinOneStep) {
  const double step = std::ldexp(1.0, -149);
  Sweep(0xc2aeac50u, 0xc2cff1b4u, [&](float x) {  // −87.336 .. −103.972
    EXPECT_LE(std::fabs(static_cast<double>(Exp(x)) - std::exp(static_cast<double>(x))), step) << "x = " << x;
  });
  EXPECT_EQ(Exp(-104.f), 0.f);
  EXPECT_EQ(Exp(-1e30f), 0.f);
}

TEST(PortableExp, SpecialValues) {
  EXPECT_EQ(Exp(0.f), 1.f);
  EXPECT_EQ(Exp(-0.f), 1.f);
  EXPECT_TRUE(std::isnan(Exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(Exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Exp(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(Exp(89.f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Exp(1.f), static_cast<float>(std::exp(1.0)));  // e itself rounds correctly
}

// silu(g) = g / (1 + exp(−g)): exp's 2 ulp, shrunk by e/(1+e) < 1 in the denominator, plus the add's
// and the division's half ulp each: at most 3 ulp where 1 + exp(−g) is a normal finite float
// (g ≥ −88.7; measured 2.37 when written); below that exp(−g) is +inf and silu is −0, as the true value rounds to.
TEST(PortableSilu, WithinThreeUlp) {
  double worst = 0;
  float worst_g = 0;
  auto check = [&](float g) {
    const double want = static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g)));
    if (want == 0 || std::fabs(want) < std::numeric_limits<float>::min()) return;
    const double e = UlpError(std::fabs(Silu(g)), std::fabs(want));
    if (e > worst) worst = e, worst_g = g;
  };
  Sweep(0x00800000u, 0x7f7fffffu, check);  // positive normal g (silu(g) ≈ g far out)
  Sweep(0x80800000u, 0xc2b17217u, check);  // negative g down to −88.72
  std::printf("Silu: worst %.3f ulp at g = %.9g\n", worst, worst_g);
  EXPECT_LE(worst, 3.0) << "at g = " << worst_g;
  EXPECT_EQ(Silu(-100.f), 0.f);
  EXPECT_TRUE(std::signbit(Silu(-100.f)));
  EXPECT_EQ(Silu(0.f), 0.f);
  EXPECT_EQ(SiluMul(2.f, 3.f), Silu(2.f) * 3.f);
}

}  // namespace
}  // namespace specgen::portable

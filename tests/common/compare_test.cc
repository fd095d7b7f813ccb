// The comparator every numerical test relies on: it must pass on the edge of its band, and fail on a
// single element just outside it, on NaN or Inf whatever the tolerance, and on a size mismatch, naming
// the worst element. Failures are captured rather than reported, so each case can assert on them.
#include "tests/common/compare.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace specgen::testing {
namespace {

using ::testing::HasSubstr;

// The failure messages `check` reports, captured instead of failing this test.
std::vector<std::string> FailuresOf(const std::function<void()>& check) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check();
  }
  std::vector<std::string> messages;
  for (int i = 0; i < results.size(); ++i) messages.push_back(results.GetTestPartResult(i).message());
  return messages;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// atol 0.5, rtol 0.25: allowed errors 0.75, 1.0 and 0.5, all exact in float.
const std::vector<float> kRef = {1.0f, -2.0f, 0.0f};
const std::vector<float> kOnTheEdge = {1.75f, -3.0f, 0.5f};

TEST(ExpectAllClose, PassesOnTheEdgeOfTheBand) {
  EXPECT_TRUE(FailuresOf([] { ExpectAllClose(kOnTheEdge, kRef, 0.5, 0.25, "edge"); }).empty());
  const std::vector<float> below = {0.25f, -1.0f, -0.5f};
  EXPECT_TRUE(FailuresOf([&] { ExpectAllClose(below, kRef, 0.5, 0.25, "edge below"); }).empty());
}

TEST(ExpectAllClose, FailsOnOneElementJustOutsideTheBand) {
  std::vector<float> actual = kOnTheEdge;
  actual[1] = std::nextafter(-3.0f, -kInf);
  const auto failures = FailuresOf([&] { ExpectAllClose(actual, kRef, 0.5, 0.25, "one out"); });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], HasSubstr("one out: 1 of 3 elements out of tolerance; worst at index 1"));
}

TEST(ExpectAllClose, NamesTheWorstOfSeveralFailures) {
  const std::vector<float> actual = {3.0f, -2.0f, 9.0f};  // errors 2.0 (of 0.75) and 9.0 (of 0.5)
  const auto failures = FailuresOf([&] { ExpectAllClose(actual, kRef, 0.5, 0.25, "two out"); });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], HasSubstr("2 of 3 elements out of tolerance; worst at index 2: actual 9"));
}

TEST(ExpectAllClose, FailsOnNaNOrInfWhateverTheTolerance) {
  for (const auto& [actual, ref] : std::vector<std::pair<std::vector<float>, std::vector<float>>>{
           {{1.0f, kNaN}, {1.0f, 2.0f}},
           {{1.0f, 2.0f}, {1.0f, kNaN}},
           {{kNaN, 2.0f}, {kNaN, 2.0f}},
           {{1.0f, kInf}, {1.0f, 2.0f}},
           {{kInf, 2.0f}, {kInf, 2.0f}},
       }) {
    // Init-captures: clang 14 (the fuzz preset) cannot capture structured bindings themselves.
    const auto failures =
        FailuresOf([&a = actual, &r = ref] { ExpectAllClose(a, r, kInf, kInf, "non-finite"); });
    ASSERT_EQ(failures.size(), 1u) << actual[0] << " " << actual[1] << " vs " << ref[0] << " " << ref[1];
    EXPECT_THAT(failures[0], HasSubstr("1 of 2 elements out of tolerance"));
  }
}

TEST(ExpectAllClose, FailsOnASizeMismatch) {
  const std::vector<float> shorter = {1.0f, -2.0f};
  const auto failures = FailuresOf([&] { ExpectAllClose(shorter, kRef, 1.0, 1.0, "sizes"); });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], HasSubstr("2 elements against a reference of 3"));
}

TEST(ExpectAllClose, ExactWhenBothTolerancesAreZero) {
  EXPECT_TRUE(FailuresOf([] { ExpectAllClose(kRef, kRef, 0.0, 0.0, "same"); }).empty());
  std::vector<float> actual = kRef;
  actual[2] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(FailuresOf([&] { ExpectAllClose(actual, kRef, 0.0, 0.0, "one ulp"); }).size(), 1u);
}

TEST(ExpectAllClose, DoubleReferenceIsComparedInDouble) {
  // 0.1f differs from the double 0.1 by about 1.5e-9: within that atol it passes, within less it fails.
  const std::vector<float> actual = {0.1f};
  const std::vector<double> ref = {0.1};
  const double gap = std::fabs(double{0.1f} - 0.1);
  EXPECT_TRUE(FailuresOf([&] { ExpectAllClose(actual, ref, gap, 0.0, "double"); }).empty());
  EXPECT_EQ(FailuresOf([&] { ExpectAllClose(actual, ref, gap * 0.99, 0.0, "double"); }).size(), 1u);
}

TEST(ExpectAllWithin, HoldsEachElementToItsOwnBound) {
  const std::vector<double> allowed = {0.75, 1.0, 0.5};
  EXPECT_TRUE(FailuresOf([&] { ExpectAllWithin(kOnTheEdge, kRef, allowed, "edge"); }).empty());
  const std::vector<double> tighter = {0.75, 1.0, 0.49};
  const auto failures = FailuresOf([&] { ExpectAllWithin(kOnTheEdge, kRef, tighter, "tighter"); });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], HasSubstr("worst at index 2"));
  // A bound given as a function of the index, against a double reference.
  const std::vector<double> ref = {1.0, -2.0, 0.0};
  EXPECT_EQ(FailuresOf([&] {
              ExpectAllWithin(kOnTheEdge, ref, [](size_t i) { return i == 0 ? 0.5 : 1.0; }, "fn");
            }).size(),
            1u);
}

// A failure is reported at the caller's file and line (SourceLocation's defaulted builtins), not at
// compare.h's: the line below is the one the failure must name.
TEST(ExpectAllClose, ReportsTheCallersFileAndLine) {
  ::testing::TestPartResultArray results;
  int line = 0;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    line = __LINE__ + 1;
    ExpectAllClose(std::vector<float>{2.0f}, std::vector<float>{0.0f}, 0.0, 0.0, "caller");
  }
  ASSERT_EQ(results.size(), 1);
  const ::testing::TestPartResult& r = results.GetTestPartResult(0);
  EXPECT_THAT(std::string(r.file_name()), HasSubstr("compare_test.cc"));
  EXPECT_EQ(r.line_number(), line);
}

TEST(Nmse, IsTheErrorEnergyOverTheReferenceEnergy) {
  const std::vector<float> ref = {3.0f, 4.0f};     // energy 25
  const std::vector<float> actual = {3.0f, 9.0f};  // error energy 25
  EXPECT_DOUBLE_EQ(Nmse(actual, ref), 1.0);
  EXPECT_DOUBLE_EQ(Nmse(ref, ref), 0.0);
  const std::vector<float> zeros = {0.0f, 0.0f};
  EXPECT_TRUE(std::isinf(Nmse(ref, zeros)));
  const std::vector<float> with_nan = {3.0f, kNaN};
  EXPECT_TRUE(std::isnan(Nmse(with_nan, ref)));
  EXPECT_TRUE(std::isnan(Nmse(ref, with_nan)));
}

}  // namespace
}  // namespace specgen::testing

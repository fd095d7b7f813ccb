#include "engine/tokenizer/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen {
namespace {

// Feeds `pieces` and returns everything printed, with Finish's tail.
std::string Stream(StopStrings& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += s.Add(p);
  return out + s.Finish();
}

TEST(StopStringsTest, EndsBeforeAStopStringSplitAcrossPieces) {
  StopStrings s({"\nUser:", "###"});
  // "\nUs" might start a stop string: held, then printed never.
  EXPECT_EQ(s.Add("Hello"), "Hello");
  EXPECT_EQ(s.Add(" there\nUs"), " there");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.Add("er: next"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Add("more"), "");
  EXPECT_EQ(s.Finish(), "");
}

TEST(StopStringsTest, AHeldTailThatTurnsOutNotToStopIsPrinted) {
  StopStrings s({"###"});
  EXPECT_EQ(Stream(s, {"a#", "#b", " c##"}), "a##b c##");
  EXPECT_FALSE(s.stopped());
}

TEST(StopStringsTest, TheEarliestStopWinsAndEmptyStopsAreIgnored) {
  StopStrings s({"", "cd", "bcde"});
  EXPECT_EQ(Stream(s, {"abcdef"}), "a");  // "bcde" starts before "cd"
  StopStrings none({""});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(Stream(none, {"a", "b"}), "ab");
}

TEST(StopStringsTest, AStopAtTheVeryStart) {
  StopStrings s({"x"});
  EXPECT_EQ(Stream(s, {"x", "y"}), "");
  EXPECT_TRUE(s.stopped());
}

}  // namespace
}  // namespace specgen

#include "engine/serve/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::serve {
namespace {

// Feeds `pieces` and returns everything emitted (Finish included).
std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m.Add(p);
  return out + m.Finish();
}

TEST(StopMatcher, NoStopsPassesEverythingAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.Add("abc"), "abc");
  EXPECT_EQ(m.Add("def"), "def");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, CutsBeforeAStopInsideOnePiece) {
  StopMatcher m({"END"});
  EXPECT_EQ(Feed(m, {"hello END world"}), "hello ");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HoldsBackAPrefixThatTheNextPieceCompletes) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Add("hello E"), "hello ");  // "E" might begin END
  EXPECT_EQ(m.Add("N"), "");
  EXPECT_EQ(m.Add("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Add("later"), "");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopMatcher, ReleasesAHeldPrefixThatDoesNotContinue) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Add("hello EN"), "hello ");
  EXPECT_EQ(m.Add("x"), "ENx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Add("E"), "");
  EXPECT_EQ(m.Finish(), "E");  // generation ended: the held text was reply after all
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(Feed(m, {"hel", "lo wor", "ld"}), "hel");
}

TEST(StopMatcher, OverlappingPrefixesHoldTheLongest) {
  // "aab": after "xaa" both "a" and "aa" could begin it; the longest is held.
  StopMatcher m({"aab"});
  EXPECT_EQ(m.Add("xaa"), "x");
  EXPECT_EQ(m.Add("ab"), "a");  // "aaab": the match starts one later
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "Z"});
  EXPECT_EQ(Feed(m, {"abc"}), "abc");
}

TEST(StopMatcher, MultiByteTextIsNeverCutInsideACharacter) {
  StopMatcher m({"é!"});  // U+00E9: two bytes
  EXPECT_EQ(m.Add("café"), "caf");  // é may begin the stop: held whole
  EXPECT_EQ(m.Add("?"), "é?");
}

}  // namespace
}  // namespace specgen::serve

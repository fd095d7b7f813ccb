#include "engine/chat/think_spans.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::chat {
namespace {

TEST(ThinkSpansTest, HistoryDropsReasoning) {
  EXPECT_EQ(WithoutThinking("<think>\nLet me see.\n</think>\n\nIt is 4."), "It is 4.");
  EXPECT_EQ(WithoutThinking("<think>\n\n</think>\n\nHi"), "Hi");  // --reasoning off's empty span
  EXPECT_EQ(WithoutThinking("No reasoning here."), "No reasoning here.");
  EXPECT_EQ(WithoutThinking("a<think>x</think>b<think>y</think> c"), "abc");
  EXPECT_EQ(WithoutThinking("Before<think>never closed"), "Before");
}

// Everything a splitter lets out for `pieces`, Finish() included, neighbours of one kind joined.
std::vector<ThinkSegment> Split(const std::vector<std::string>& pieces, bool drop) {
  ThinkSplitter t(drop);
  std::vector<ThinkSegment> out;
  auto take = [&](std::vector<ThinkSegment> segments) {
    for (ThinkSegment& s : segments) {
      if (!out.empty() && out.back().reasoning == s.reasoning) {
        out.back().text += s.text;
      } else {
        out.push_back(std::move(s));
      }
    }
  };
  for (const std::string& p : pieces) take(t.Add(p));
  take(t.Finish());
  return out;
}
std::string Shown(const std::vector<std::string>& pieces) { return Visible(Split(pieces, true)); }

TEST(ThinkSplitterTest, HidesSpansWhateverThePieces) {
  // Qwen3's markers are single tokens...
  EXPECT_EQ(Shown({"<think>", "\n", "hmm", "</think>", "\n\n", "Answer"}), "Answer");
  // ...but text spelled out in several pieces is found as well, the blank line after it dropped.
  EXPECT_EQ(Shown({"Hi <th", "ink>x", "y</thi", "nk>", "\n", "\n  Done"}), "Hi Done");
  EXPECT_EQ(Shown({"<", "t", "h", "i", "n", "k", ">", "a", "<", "/think", ">b"}), "b");
  // Every split of one text gives the same result as WithoutThinking.
  const std::string text = "a<think>x</think>b<think>y</think> c and <thinking> too";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Shown({text.substr(0, cut), text.substr(cut)}), "abc and <thinking> too") << cut;
    EXPECT_EQ(Shown({text.substr(0, cut), text.substr(cut)}), WithoutThinking(text)) << cut;
  }
}

TEST(ThinkSplitterTest, MarksSpansForDimmingWithTheirMarkers) {
  const std::vector<ThinkSegment> s = Split({"Hi <th", "ink>x", "y</thi", "nk>", "\nDone"}, /*drop=*/false);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].text, "Hi ");
  EXPECT_FALSE(s[0].reasoning);
  EXPECT_EQ(s[1].text, "<think>xy</think>");
  EXPECT_TRUE(s[1].reasoning);
  EXPECT_EQ(s[2].text, "\nDone");  // kept when dimming: the text is all there
  EXPECT_FALSE(s[2].reasoning);
}

TEST(ThinkSplitterTest, HoldsBackOnlyWhatMayStartAMarker) {
  ThinkSplitter h(/*drop=*/true);
  EXPECT_EQ(Visible(h.Add("a < b")), "a < b");  // "<" then a space: no marker
  EXPECT_EQ(Visible(h.Add(" x <thi")), " x ");  // "<thi" may begin one: held
  EXPECT_EQ(Visible(h.Add("s")), "<this");      // it did not
  EXPECT_FALSE(h.seen());
  EXPECT_EQ(Visible(h.Add("<think>never")), "");
  EXPECT_TRUE(h.inside());
  EXPECT_TRUE(h.seen());
  EXPECT_EQ(Visible(h.Finish()), "");  // a span that never closed stays hidden
  ThinkSplitter tail(/*drop=*/true);
  EXPECT_EQ(Visible(tail.Add("end <th")), "end ");
  EXPECT_EQ(Visible(tail.Finish()), "<th");  // held back, and the reply ended: it was text
}

}  // namespace
}  // namespace specgen::chat

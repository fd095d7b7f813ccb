#include "engine/chat/think_spans.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::chat {
namespace {

TEST(ThinkSpansTest, TracksASpanAcrossPieces) {
  ThinkTracker t;
  std::vector<bool> inside;
  for (const char* piece : {"<think>", "\n", "hmm", "</think>", "\n\n", "Answer"}) inside.push_back(t.Inside(piece));
  EXPECT_EQ(inside, (std::vector<bool>{true, true, true, true, false, false}));
}

TEST(ThinkSpansTest, HistoryDropsReasoning) {
  EXPECT_EQ(WithoutThinking("<think>\nLet me see.\n</think>\n\nIt is 4."), "It is 4.");
  EXPECT_EQ(WithoutThinking("<think>\n\n</think>\n\nHi"), "Hi");  // --reasoning off's empty span
  EXPECT_EQ(WithoutThinking("No reasoning here."), "No reasoning here.");
  EXPECT_EQ(WithoutThinking("a<think>x</think>b<think>y</think> c"), "abc");
  EXPECT_EQ(WithoutThinking("Before<think>never closed"), "Before");
}

}  // namespace
}  // namespace specgen::chat

// ChatHistory: a full context drops the oldest exchanges, keeps the system prompt and the message
// being answered, and refuses (unchanged) when even that does not fit.
#include "engine/chat/chat_history.h"

#include "engine/chat/token_painter.h"
#include "gtest/gtest.h"

namespace specgen::chat {
namespace {

// Fits while the messages' contents add up to at most `limit` characters.
auto FitsIn(size_t limit) {
  return [limit](const std::vector<ChatMessage>& m) -> absl::StatusOr<bool> {
    size_t n = 0;
    for (const ChatMessage& x : m) n += x.content.size();
    return n <= limit;
  };
}

std::string Roles(const ChatHistory& h) {
  std::string s;
  for (const ChatMessage& m : h.messages()) s += m.role[0];
  return s;
}

TEST(ChatHistoryTest, DropsOldestExchangesKeepingTheSystemPrompt) {
  ChatHistory h("SYS");  // 3 characters
  for (const char* t : {"aaaa", "bbbb", "cccc"}) {
    h.Add("user", t);
    h.Add("assistant", "rrrr");
  }
  h.Add("user", "dddd");
  EXPECT_EQ(Roles(h), "suauauau");
  auto dropped = h.DropOldestUntil(FitsIn(100));
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 0);
  dropped = h.DropOldestUntil(FitsIn(3 + 8 + 4));  // room for one exchange and the new message
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 2);
  EXPECT_EQ(Roles(h), "suau");
  EXPECT_EQ(h.messages()[0].content, "SYS");
  EXPECT_EQ(h.messages()[1].content, "cccc");
  EXPECT_EQ(h.messages()[3].content, "dddd");
  EXPECT_EQ(h.exchanges(), 2);
}

TEST(ChatHistoryTest, RefusesWhenTheMessageAloneDoesNotFit) {
  ChatHistory h("SYS");
  h.Add("user", "aaaa");
  h.Add("assistant", "rrrr");
  h.Add("user", "a very long message");
  const auto dropped = h.DropOldestUntil(FitsIn(10));
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Roles(h), "sua" "u");  // unchanged
  h.Reset();
  EXPECT_EQ(Roles(h), "s");
  ChatHistory none;
  none.Add("user", "x");
  none.PopLast();
  EXPECT_TRUE(none.messages().empty());
}

TEST(TokenPainterTest, DraftTokensThenTheTargetsOwn) {
  TokenPainter painter(/*enabled=*/true);
  AcceptResult pass{2, {7, 8, 9}};
  painter.OnPass(pass);
  EXPECT_EQ(painter.Paint("a"), std::string(kDraftColor) + "a" + std::string(kResetColor));
  EXPECT_EQ(painter.Paint("b"), std::string(kDraftColor) + "b" + std::string(kResetColor));
  EXPECT_EQ(painter.Paint("c"), std::string(kTargetColor) + "c" + std::string(kResetColor));
  painter.OnPass(AcceptResult{0, {4}});
  EXPECT_EQ(painter.Paint(""), "");  // an incomplete character: nothing to colour yet
  EXPECT_EQ(painter.draft_tokens(), 2);
  EXPECT_EQ(painter.target_tokens(), 2);
  TokenPainter plain(/*enabled=*/false);
  plain.OnPass(pass);
  EXPECT_EQ(plain.Paint("a"), "a");
  EXPECT_EQ(plain.draft_tokens(), 1);
}

}  // namespace
}  // namespace specgen::chat

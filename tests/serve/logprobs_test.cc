// LogprobsTracker: a token's figures go out with the text that holds it, in OpenAI's chat and
// completions forms; a stop string's cut drops the tokens after it, as it drops their text.
#include "engine/serve/logprobs.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::serve {
namespace {

using nlohmann::json;

// Token i's text is kTexts[i].
const std::vector<std::string> kTexts = {"Hel", "lo", " wor", "ld", "!", ""};

std::string Text(int32_t id) { return id >= 0 && id < static_cast<int32_t>(kTexts.size()) ? kTexts[id] : "?"; }

TokenLogprobs Figures(int32_t id) {
  TokenLogprobs t;
  t.chosen = {id, -0.25f * static_cast<float>(id)};
  t.top = {{id, -0.25f * static_cast<float>(id)}, {5, -9.0f}};
  return t;
}

// Feeds tokens 0..n-1 as one step, their texts in order.
void Feed(LogprobsTracker* t, int from, int to) {
  std::vector<TokenLogprobs> step;
  for (int i = from; i < to; ++i) step.push_back(Figures(i));
  t->AddLogprobs(step);
  for (int i = from; i < to; ++i) t->AddText(kTexts[i].size());
}

TEST(LogprobsTracker, ChatEntriesGoOutWithTheirText) {
  LogprobsTracker t(Text, /*chat=*/true);
  Feed(&t, 0, 3);  // "Hello wor"
  // Only "Hell" let out (a stop string might begin at "o"): "Hel" is whole, "lo" is not yet.
  json first = t.Take(4);
  ASSERT_EQ(first["content"].size(), 1u);
  EXPECT_EQ(first["content"][0]["token"], "Hel");
  EXPECT_FLOAT_EQ(first["content"][0]["logprob"].get<float>(), 0.0f);
  EXPECT_EQ(first["content"][0]["bytes"], json({72, 101, 108}));
  ASSERT_EQ(first["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["content"][0]["top_logprobs"][1]["token"], "");
  EXPECT_FLOAT_EQ(first["content"][0]["top_logprobs"][1]["logprob"].get<float>(), -9.0f);
  json second = t.Take(9);
  ASSERT_EQ(second["content"].size(), 2u);
  EXPECT_EQ(second["content"][1]["token"], " wor");
  Feed(&t, 3, 6);  // "ld", "!", and an end token of no text
  json rest = t.TakeRest(12, /*cut=*/false);
  ASSERT_EQ(rest["content"].size(), 3u);
  EXPECT_EQ(rest["content"][2]["token"], "");
  EXPECT_TRUE(t.Take(100)["content"].empty());
}

TEST(LogprobsTracker, AStopStringCutsTheTokensAfterIt) {
  LogprobsTracker t(Text, /*chat=*/false);
  Feed(&t, 0, 5);  // "Hello world!"; a stop string " wor" leaves "Hello" (5 bytes)
  json out = t.TakeRest(5, /*cut=*/true);
  EXPECT_EQ(out["tokens"], json({"Hel", "lo"}));
  EXPECT_EQ(out["text_offset"], json({0, 3}));
  ASSERT_EQ(out["token_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(out["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_FLOAT_EQ(out["top_logprobs"][1]["lo"].get<float>(), -0.25f);
  // A cut inside a token keeps the token: its first bytes are in the reply.
  LogprobsTracker inside(Text, false);
  Feed(&inside, 0, 5);
  EXPECT_EQ(inside.TakeRest(4, true)["tokens"], json({"Hel", "lo"}));
}

}  // namespace
}  // namespace specgen::serve

#include "engine/speculative/stats.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specgen {
namespace {

// Bytes are 0 when nothing streamed; the ratios that need a cache lookup or a draft are null then
// (there is no hit rate of a cache never consulted), never a misleading 0.
TEST(StatsTest, OffloadKeysAreAlwaysInJsonAndZeroOrNullWhenNothingStreamed) {
  SpeculativeStats s;
  s.tokens = 10;
  s.passes = 10;
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  for (const char* key : {"h2d_bytes", "h2d_bytes_per_token", "prefetch_useful_bytes", "prefetch_wasted_bytes"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j[key].get<double>(), 0.0) << key;
  }
  for (const char* key : {"expert_cache_hit_rate", "mean_distinct_experts", "acceptance_rate"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_null()) << key << ": " << j[key];
  }
  EXPECT_DOUBLE_EQ(j["tokens_per_pass"].get<double>(), 1.0);
  EXPECT_EQ(j["time"]["transfer_wait"].get<double>(), 0.0);
  EXPECT_EQ(s.ToText().find("offload"), std::string::npos);
}

TEST(StatsTest, OffloadCountersAddUpAndShow) {
  SpeculativeStats s;
  s.tokens = 4;
  OffloadCounters step;
  step.h2d_bytes = 3 << 20;
  step.expert_hits = 30;
  step.expert_misses = 10;
  step.distinct_experts = 40;
  step.moe_layer_passes = 2;
  step.prefetch_useful_bytes = 100;
  step.prefetch_wasted_bytes = 50;
  step.transfer_wait_seconds = 0.25;
  s.offload += step;
  s.offload += step;
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["h2d_bytes"].get<int64_t>(), 6 << 20);
  EXPECT_DOUBLE_EQ(j["h2d_bytes_per_token"].get<double>(), (6 << 20) / 4.0);
  EXPECT_DOUBLE_EQ(j["expert_cache_hit_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["mean_distinct_experts"].get<double>(), 20.0);
  EXPECT_EQ(j["prefetch_useful_bytes"].get<int64_t>(), 200);
  EXPECT_EQ(j["prefetch_wasted_bytes"].get<int64_t>(), 100);
  EXPECT_DOUBLE_EQ(j["time"]["transfer_wait"].get<double>(), 0.5);
  const std::string text = s.ToText();
  EXPECT_NE(text.find("offload: 6.0 MiB host to device (1.50 MiB/token), expert cache hit rate 0.750"),
            std::string::npos)
      << text;
}

TEST(StatsTest, TimeToFirstTokenIsInJsonAndText) {
  SpeculativeStats s;
  s.prefill_seconds = 0.25;
  s.ttft_seconds = 0.375;
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_DOUBLE_EQ(j["time"]["ttft"].get<double>(), 0.375);
  EXPECT_DOUBLE_EQ(j["time"]["prefill"].get<double>(), 0.25);
  EXPECT_NE(s.ToText().find("prefilled in 0.250 s, first token after 0.375 s"), std::string::npos) << s.ToText();
}

// "Prefilled" is the tokens the target was fed, the rest of the prompt coming from the cache; the
// text and the JSON say both counts the same way.
TEST(StatsTest, PromptTokensAndPrefilledAreSaidApart) {
  SpeculativeStats s;
  s.prompt_tokens = 40;
  s.prompt_tokens_prefilled = 7;
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), 40);
  EXPECT_EQ(j["prompt_tokens_prefilled"].get<int64_t>(), 7);
  EXPECT_NE(s.ToText().find("prompt 40 tokens, 7 prefilled in"), std::string::npos) << s.ToText();
}

}  // namespace
}  // namespace specgen

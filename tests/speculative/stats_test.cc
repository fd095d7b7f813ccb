#include "engine/speculative/stats.h"

#include <string>
#include <vector>

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
  for (const char* key : {"h2d_bytes", "h2d_bytes_per_token"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j[key].get<double>(), 0.0) << key;
  }
  for (const char* key : {"expert_cache_hit_rate", "mean_distinct_experts", "acceptance_rate"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_null()) << key << ": " << j[key];
  }
  EXPECT_DOUBLE_EQ(j["tokens_per_pass"].get<double>(), 1.0);
  // Counters nothing sets (the expert prefetch was measured and not kept) are not reported.
  for (const char* key : {"prefetch_useful_bytes", "prefetch_wasted_bytes"}) EXPECT_FALSE(j.contains(key)) << key;
  EXPECT_FALSE(j["time"].contains("transfer_wait"));
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
  s.offload += step;
  s.offload += step;
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["h2d_bytes"].get<int64_t>(), 6 << 20);
  EXPECT_DOUBLE_EQ(j["h2d_bytes_per_token"].get<double>(), (6 << 20) / 4.0);
  EXPECT_DOUBLE_EQ(j["expert_cache_hit_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["mean_distinct_experts"].get<double>(), 20.0);
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

// Two runs summed: every count and time adds, per-position counts add element by element (the
// longer run's positions kept), and the rates follow from the sums (not the mean of the rates).
TEST(StatsTest, RunsAddUp) {
  SpeculativeStats a, b;
  a.prompt_tokens = 5, a.tokens = 10, a.passes = 4, a.drafted = 8, a.accepted = 6;
  a.drafted_at = {4, 4};
  a.accepted_at = {4, 2};
  a.prefill_seconds = 0.5, a.draft_seconds = 0.25, a.verify_seconds = 1, a.accept_seconds = 0.125;
  a.total_seconds = 2, a.ttft_seconds = 0.75;
  a.offload.h2d_bytes = 100, a.offload.expert_hits = 3, a.offload.expert_misses = 1;
  b.prompt_tokens = 3, b.tokens = 6, b.passes = 2, b.drafted = 6, b.accepted = 3;
  b.drafted_at = {2, 2, 2};
  b.accepted_at = {2, 1, 0};
  b.prefill_seconds = 0.25, b.draft_seconds = 0.5, b.verify_seconds = 2, b.accept_seconds = 0.375;
  b.total_seconds = 1, b.ttft_seconds = 0.25;
  b.offload.h2d_bytes = 50, b.offload.expert_hits = 1, b.offload.expert_misses = 3;
  b.draft_max = 3, b.adaptive = true, b.stop_reason = StopReason::kMaxTokens;
  SpeculativeStats sum;
  sum += a;
  sum += b;
  EXPECT_EQ(sum.prompt_tokens, 8);
  EXPECT_EQ(sum.tokens, 16);
  EXPECT_EQ(sum.passes, 6);
  EXPECT_EQ(sum.drafted, 14);
  EXPECT_EQ(sum.accepted, 9);
  EXPECT_EQ(sum.drafted_at, (std::vector<int64_t>{6, 6, 2}));
  EXPECT_EQ(sum.accepted_at, (std::vector<int64_t>{6, 3, 0}));
  // Sums of binary fractions: exact.
  EXPECT_EQ(sum.prefill_seconds, 0.75);
  EXPECT_EQ(sum.draft_seconds, 0.75);
  EXPECT_EQ(sum.verify_seconds, 3);
  EXPECT_EQ(sum.accept_seconds, 0.5);
  EXPECT_EQ(sum.total_seconds, 3);
  EXPECT_EQ(sum.ttft_seconds, 1);
  EXPECT_EQ(sum.offload.h2d_bytes, 150);
  EXPECT_EQ(sum.offload.hit_rate(), 0.5);
  EXPECT_EQ(sum.acceptance_rate(), 9.0 / 14.0);
  EXPECT_EQ(sum.draft_max, 3);
  EXPECT_TRUE(sum.adaptive);
  EXPECT_EQ(sum.stop_reason, StopReason::kMaxTokens);
}

}  // namespace
}  // namespace specgen

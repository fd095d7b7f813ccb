#include "bench/routing/routing_trace.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "engine/io/synth.h"
#include "moe/expert_cache_model.h"
#include "moe/locality_routing.h"
#include "gtest/gtest.h"
#include "tests/common/chi_square.h"

namespace specgen::bench {
namespace {

RoutingTableShape Qwen3MoeShape(int64_t positions) {
  RoutingTableShape s;
  s.positions = positions;
  s.moe_layers = 48;
  s.n_experts = 128;
  s.top_k = 8;
  return s;
}

// One layer's ids in position order (what MeasureLocality and the cache model read).
std::vector<int> LayerSequence(const RoutingTable& t, int layer) {
  std::vector<int> seq;
  for (int64_t p = 0; p < t.positions(); ++p) {
    const auto row = t.Row(p, layer);
    seq.insert(seq.end(), row.begin(), row.end());
  }
  return seq;
}

void ExpectDistinctRowsInRange(const RoutingTable& t) {
  for (int64_t p = 0; p < t.positions(); ++p) {
    for (int l = 0; l < t.moe_layers(); ++l) {
      const auto row = t.Row(p, l);
      const std::set<int32_t> distinct(row.begin(), row.end());
      ASSERT_EQ(distinct.size(), static_cast<size_t>(t.top_k())) << "position " << p << " layer " << l;
      ASSERT_GE(*distinct.begin(), 0);
      ASSERT_LT(*distinct.rbegin(), t.n_experts());
    }
  }
}

TEST(RoutingTraceTest, UniformRowsAreDistinctAndDeterministicPerSeed) {
  const RoutingTableShape s = Qwen3MoeShape(256);
  auto a = UniformTrace(s, 5), b = UniformTrace(s, 5), c = UniformTrace(s, 6);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ExpectDistinctRowsInRange(**a);
  EXPECT_TRUE(std::ranges::equal((*a)->ids(), (*b)->ids()));
  EXPECT_FALSE(std::ranges::equal((*a)->ids(), (*c)->ids()));
  EXPECT_EQ((*a)->ids().size(), size_t{256} * 48 * 8);
}

// Every rank's choice over all (position, layer) rows is one uniform draw from the experts, the rows
// independent: a multinomial, so Pearson's test applies exactly (N/E = 4096·48/128 = 1536 ≥ 100 per
// cell). A failure at kFalseFailureRate means the draw is biased (a modulo bias, a rank favouring low ids).
TEST(RoutingTraceTest, UniformChoosesEveryExpertEquallyOften) {
  const RoutingTableShape s = Qwen3MoeShape(4096);
  auto t = UniformTrace(s, 0);
  ASSERT_TRUE(t.ok());
  const std::vector<double> probs(s.n_experts, 1.0 / s.n_experts);
  std::vector<int64_t> all(s.n_experts, 0);
  for (int j = 0; j < s.top_k; ++j) {
    std::vector<int64_t> counts(s.n_experts, 0);
    for (size_t row = 0; row < (*t)->ids().size() / s.top_k; ++row) ++counts[(*t)->ids()[row * s.top_k + j]];
    for (int e = 0; e < s.n_experts; ++e) all[e] += counts[e];
    const testing::ChiSquareResult r = testing::ChiSquareTest(counts, probs);
    EXPECT_GT(r.p_value, testing::kFalseFailureRate) << "rank " << j << ": X² " << r.statistic;
  }
  // Per layer as well: each layer's experts equally often (its 4096·8 picks; a k-subset's picks are
  // negatively correlated, which only makes X² smaller, so the threshold stays conservative).
  for (int l : {0, 47}) {
    std::vector<int64_t> counts(s.n_experts, 0);
    for (int64_t p = 0; p < s.positions; ++p) {
      for (int32_t e : (*t)->Row(p, l)) ++counts[e];
    }
    EXPECT_GT(testing::ChiSquareTest(counts, probs).p_value, testing::kFalseFailureRate) << "layer " << l;
  }
  // No locality: the share repeated at the next token is what independence gives (k/E).
  const moe::LocalityStats ls = moe::MeasureLocality(LayerSequence(**t, 3), s.top_k, 8);
  EXPECT_NEAR(ls.repeat_next, double(s.top_k) / s.n_experts, 0.01);
}

// The locality trace carries the figures its generator is calibrated to (the bounds of
// tests/moe/locality_routing_test: the published figures to about ±0.05), and an LRU cache of 40% of
// the experts, fed one position a pass through the trace's own rows, hits 90-95%.
TEST(RoutingTraceTest, LocalityTraceHasTheCalibratedReuse) {
  const RoutingTableShape s = Qwen3MoeShape(2000);
  auto t = LocalityTrace(s, 1);
  ASSERT_TRUE(t.ok());
  ExpectDistinctRowsInRange(**t);
  double repeat = 0, within = 0;
  for (int l = 0; l < s.moe_layers; ++l) {
    const moe::LocalityStats ls = moe::MeasureLocality(LayerSequence(**t, l), s.top_k, 8);
    repeat += ls.repeat_next / s.moe_layers;
    within += ls.within_window / s.moe_layers;
    EXPECT_EQ(ls.median_reuse, 2.0) << "layer " << l;
  }
  EXPECT_NEAR(repeat, 0.45, 0.05);
  EXPECT_NEAR(within, 0.80, 0.05);
  moe::ExpertCacheModel lru(moe::CachePolicy::kLru, s.moe_layers, s.n_experts, s.moe_layers * s.n_experts * 4 / 10);
  for (int64_t p = 0; p < s.positions; ++p) {
    for (int l = 0; l < s.moe_layers; ++l) {
      const auto row = (*t)->Row(p, l);
      ASSERT_TRUE(lru.Touch(l, std::vector<int>(row.begin(), row.end())).ok());
    }
  }
  EXPECT_GE(lru.counters().hit_rate(), 0.90);
  EXPECT_LE(lru.counters().hit_rate(), 0.95);
  // The same generator, the same seed: the trace is its sequence, layer by layer.
  moe::LocalityRoutingOptions o;
  o.seed = 1;
  auto gen = moe::LocalityRouting::Create(o);
  ASSERT_TRUE(gen.ok());
  std::vector<int> layer5(static_cast<size_t>(s.positions) * s.top_k);
  for (int l = 0; l <= 5; ++l) ASSERT_TRUE(gen->Next(l, static_cast<int>(s.positions), layer5).ok());
  EXPECT_EQ(layer5, LayerSequence(**t, 5));
}

TEST(RoutingTraceTest, RewriteReadsAbsolutePositionsAndWraps) {
  RoutingTableShape s = Qwen3MoeShape(10);
  s.moe_layers = 3;
  auto t = UniformTrace(s, 2);
  ASSERT_TRUE(t.ok());
  const std::vector<int32_t> positions = {4, 9, 10, 23, 4};
  std::vector<int32_t> ids(positions.size() * s.top_k, -1);
  ASSERT_TRUE((*t)->Rewrite(2, positions, ids).ok());
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto want = (*t)->ids().subspan(((positions[i] % 10) * 3 + 2) * s.top_k, s.top_k);
    EXPECT_TRUE(std::ranges::equal(std::span<const int32_t>(ids).subspan(i * s.top_k, s.top_k), want)) << i;
  }
  // The same position routes the same way wherever it sits in a pass; 10 wraps to 0.
  EXPECT_TRUE(std::ranges::equal(std::span<const int32_t>(ids).first(8), std::span<const int32_t>(ids).last(8)));
  EXPECT_TRUE(std::ranges::equal((*t)->Row(10, 1), (*t)->Row(0, 1)));

  EXPECT_FALSE((*t)->Rewrite(3, positions, ids).ok());                      // no such MoE layer
  EXPECT_FALSE((*t)->Rewrite(0, positions, std::span<int32_t>(ids).first(8)).ok());  // sizes disagree
  const std::vector<int32_t> negative = {-1};
  std::vector<int32_t> one(s.top_k);
  EXPECT_FALSE((*t)->Rewrite(0, negative, one).ok());
}

TEST(RoutingTraceTest, ShapesAndRegimesAreChecked) {
  RoutingTableShape s = Qwen3MoeShape(16);
  s.top_k = 129;
  EXPECT_FALSE(UniformTrace(s, 0).ok());
  EXPECT_FALSE(LocalityTrace(s, 0).ok());
  s = Qwen3MoeShape(0);
  EXPECT_FALSE(UniformTrace(s, 0).ok());

  EXPECT_EQ(*ParseRoutingRegime("own"), RoutingRegime::kOwn);
  EXPECT_EQ(*ParseRoutingRegime("uniform"), RoutingRegime::kUniform);
  EXPECT_EQ(*ParseRoutingRegime("locality"), RoutingRegime::kLocality);
  const absl::StatusOr<RoutingRegime> bad = ParseRoutingRegime("lru");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("own, uniform or locality"), std::string::npos);

  // ForModel: the model's MoE layers, experts and top-k; nothing for its own router; an error for a
  // dense model.
  absl::StatusOr<ModelSpec> moe = SynthSpec("tiny-moe");
  ASSERT_TRUE(moe.ok());
  auto own = TraceForModel(RoutingRegime::kOwn, *moe, 64, 0);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(*own, nullptr);
  auto loc = TraceForModel(RoutingRegime::kLocality, *moe, 64, 0);
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ((*loc)->moe_layers(), std::count(moe->layer_is_moe.begin(), moe->layer_is_moe.end(), true));
  EXPECT_EQ((*loc)->n_experts(), moe->n_experts);
  EXPECT_EQ((*loc)->top_k(), moe->n_experts_used);
  absl::StatusOr<ModelSpec> dense = SynthSpec("qwen3-0.6b");
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(TraceForModel(RoutingRegime::kUniform, *dense, 64, 0).ok());
}

}  // namespace
}  // namespace specgen::bench

// The benchmark routing override (docs/design.md §12) through a whole forward pass on the CPU: every
// MoE layer routes exactly the trace's ids at each row's absolute position (a counting backend records
// what Route returns), keeps the router's weights, routes a pass redone at the same positions the same
// way, wraps past the trace's end, and goes back to the model's own router when cleared.
#include <algorithm>
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/routing_table.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "bench/routing/routing_trace.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

// The CPU backend, recording every routing decision it returns.
class RecordingBackend : public CpuBackend {
 public:
  RecordingBackend() : CpuBackend(1) {}
  absl::Status Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) override {
    absl::Status s = CpuBackend::Route(logits, k, norm, routing);
    if (s.ok()) routes.push_back(*routing);
    return s;
  }
  std::vector<Routing> routes;
};

// tiny-moe with layer 1 dense: MoE layers 0 and 2 are the trace's layers 0 and 1.
ModelSpec Spec() {
  ModelSpec s = SynthSpec("tiny-moe").value();
  s.layer_is_moe[1] = false;
  return s;
}

std::shared_ptr<const LoadedModel> Model(const ModelSpec& spec) {
  auto m = SynthWeights(spec, DType::kF32, 7, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  std::shared_ptr<LoadedModel> model = std::move(m).value();
  model->source = "synth:" + spec.name;
  return model;
}

std::shared_ptr<const RoutingTable> Trace(const ModelSpec& spec, int64_t positions, uint64_t seed) {
  RoutingTableShape shape;
  shape.positions = positions;
  shape.moe_layers = 2;
  shape.n_experts = static_cast<int>(spec.n_experts);
  shape.top_k = static_cast<int>(spec.n_experts_used);
  return bench::UniformTrace(shape, seed).value();
}

// One pass: its positions, and the routes it recorded (one a MoE layer, in layer order).
struct Pass {
  std::vector<int32_t> positions;
  std::vector<float> logits;
  std::vector<Routing> routes;
};

// Prefill of 5 at 0..4, a tree of 3 at 5, 6, 6, then (after dropping the tree) decode steps at 5..12:
// rows at repeated and at wrapped positions (the trace holds 8).
std::vector<Pass> RunPasses(Transformer& lm, RecordingBackend& be) {
  std::vector<Pass> passes;
  auto pass = [&](std::vector<int32_t> tokens, std::vector<int32_t> positions, std::vector<uint8_t> mask) {
    Pass p;
    p.positions = positions;
    be.routes.clear();
    EXPECT_TRUE(lm.ForwardMasked(tokens, positions, mask, &p.logits).ok());
    p.routes = be.routes;
    passes.push_back(std::move(p));
  };
  pass({3, 14, 15, 92, 65}, {0, 1, 2, 3, 4}, {});
  pass({35, 89, 79}, {5, 6, 6}, {1, 0, 0, 1, 1, 0, 1, 0, 1});
  EXPECT_TRUE(lm.Truncate(5).ok());
  for (int32_t p = 5; p <= 12; ++p) pass({static_cast<int32_t>(p * 31 % 300)}, {p}, {});
  return passes;
}

TEST(RoutingOverrideTest, EveryMoeLayerRoutesTheTracesIdsWithTheRoutersWeights) {
  const ModelSpec spec = Spec();
  auto model = Model(spec);
  const auto trace = Trace(spec, 8, 3);
  RecordingBackend own_be, be;
  auto own_lm = Transformer::Create(model, &own_be);
  auto lm = Transformer::Create(model, &be);
  ASSERT_TRUE(own_lm.ok() && lm.ok());
  ASSERT_TRUE((*lm)->SetRoutingOverride(trace).ok());
  const std::vector<Pass> own = RunPasses(**own_lm, own_be);
  const std::vector<Pass> over = RunPasses(**lm, be);
  ASSERT_EQ(own.size(), over.size());
  bool any_differs = false;
  for (size_t i = 0; i < over.size(); ++i) {
    ASSERT_EQ(over[i].routes.size(), 2u) << "pass " << i;
    for (int layer = 0; layer < 2; ++layer) {
      const Routing& r = over[i].routes[layer];
      const Routing& o = own[i].routes[layer];
      for (size_t row = 0; row < over[i].positions.size(); ++row) {
        const auto want = trace->Row(over[i].positions[row], layer);
        const std::vector<int32_t> got(r.expert.begin() + row * r.k, r.expert.begin() + (row + 1) * r.k);
        EXPECT_TRUE(std::ranges::equal(got, want)) << "pass " << i << " MoE layer " << layer << " row " << row;
        any_differs |= !std::equal(got.begin(), got.end(), o.expert.begin() + row * o.k);
      }
      // The first MoE layer's router sees the same input either way (nothing routed before it): the
      // weights it returns are the router's own, in rank order, bit for bit.
      if (layer == 0) {
        EXPECT_EQ(r.weight, o.weight) << "pass " << i;
      }
    }
  }
  EXPECT_TRUE(any_differs) << "the trace happened to equal the router's choice everywhere";
  // Positions 6 and 14 read the trace's row 6 (the tree's rows 1 and 2 sit at 6; decode at 6 is the
  // same row): the same ids wherever the position recurs.
  EXPECT_TRUE(std::ranges::equal(trace->Row(14, 1), trace->Row(6, 1)));
}

TEST(RoutingOverrideTest, PassesRedoneAtTheSamePositionsMatchAndClearingRestoresTheRouter) {
  const ModelSpec spec = Spec();
  auto model = Model(spec);
  RecordingBackend be, fresh_be;
  auto lm = Transformer::Create(model, &be);
  auto fresh = Transformer::Create(model, &fresh_be);
  ASSERT_TRUE(lm.ok() && fresh.ok());
  ASSERT_TRUE((*lm)->SetRoutingOverride(Trace(spec, 8, 4)).ok());
  const std::vector<Pass> first = RunPasses(**lm, be);
  ASSERT_TRUE((*lm)->Truncate(0).ok());
  const std::vector<Pass> again = RunPasses(**lm, be);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].logits, again[i].logits) << "pass " << i;
  // Cleared: the model's own router, the logits of a model that never had an override.
  ASSERT_TRUE((*lm)->SetRoutingOverride(nullptr).ok());
  ASSERT_TRUE((*lm)->Truncate(0).ok());
  const std::vector<Pass> cleared = RunPasses(**lm, be);
  const std::vector<Pass> own = RunPasses(**fresh, fresh_be);
  for (size_t i = 0; i < own.size(); ++i) EXPECT_EQ(cleared[i].logits, own[i].logits) << "pass " << i;
  EXPECT_NE(first[0].logits, own[0].logits);
}

TEST(RoutingOverrideTest, TracesThatDoNotFitAreRefused) {
  const ModelSpec spec = Spec();
  auto model = Model(spec);
  CpuBackend be(1);
  auto lm = Transformer::Create(model, &be);
  ASSERT_TRUE(lm.ok());
  RoutingTableShape shape;
  shape.positions = 8;
  shape.moe_layers = 3;  // the model has 2 MoE layers
  shape.n_experts = static_cast<int>(spec.n_experts);
  shape.top_k = static_cast<int>(spec.n_experts_used);
  absl::Status s = (*lm)->SetRoutingOverride(bench::UniformTrace(shape, 0).value());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("3 MoE layers"), std::string::npos) << s;
  shape.moe_layers = 2;
  shape.top_k = 1;  // the model routes to 2
  EXPECT_FALSE((*lm)->SetRoutingOverride(bench::UniformTrace(shape, 0).value()).ok());

  // The backend alone: nothing prepared, a layer outside the trace, a call of other rows.
  CpuBackend raw(1);
  const std::vector<int32_t> positions = {0, 1};
  EXPECT_EQ(raw.OverrideNextRouting(0, positions).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(raw.PrepareRoutingOverride(Trace(spec, 8, 0)).ok());
  EXPECT_FALSE(raw.OverrideNextRouting(2, positions).ok());
  ASSERT_TRUE(raw.OverrideNextRouting(1, positions).ok());
  auto logits = raw.NewBuffer(3, spec.n_experts).value();
  ASSERT_TRUE(raw.Write(std::vector<float>(3 * spec.n_experts, 0.5f), logits.get()).ok());
  Routing r;
  EXPECT_FALSE(raw.Route(*logits, spec.n_experts_used, spec.router_norm, &r).ok());  // 3 rows, 2 positions
  // Disarmed by that call: the next one is the router's own.
  ASSERT_TRUE(raw.Route(*logits, spec.n_experts_used, spec.router_norm, &r).ok());
  EXPECT_EQ(r.expert[0], 0);  // equal logits: the lowest ids first
  EXPECT_EQ(r.expert[1], 1);
}

// A table made by hand: the ids must be k distinct experts a row (the kernels index the expert
// tables with them), and as many as the shape says.
TEST(RoutingOverrideTest, TablesOfBadIdsAreRefused) {
  RoutingTableShape shape;
  shape.positions = 2;
  shape.moe_layers = 1;
  shape.n_experts = 4;
  shape.top_k = 2;
  EXPECT_TRUE(RoutingTable::Create(shape, {0, 3, 2, 1}).ok());
  absl::StatusOr<std::shared_ptr<const RoutingTable>> t = RoutingTable::Create(shape, {0, 3, 2, 4});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("row 1 (position 1, MoE layer 0)"), std::string::npos) << t.status();
  EXPECT_FALSE(RoutingTable::Create(shape, {0, 3, 2, 2}).ok());   // an expert twice
  EXPECT_FALSE(RoutingTable::Create(shape, {0, 3, -1, 2}).ok());  // negative
  EXPECT_FALSE(RoutingTable::Create(shape, {0, 3, 2}).ok());      // too few ids
  shape.top_k = 5;                                                // more than the experts
  EXPECT_FALSE(RoutingTable::Create(shape, std::vector<int32_t>(10, 0)).ok());
}

}  // namespace
}  // namespace specgen

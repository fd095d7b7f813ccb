// moe/run_plan.h: what the CLI hands the Transformer is the planner's plan for the same
// paths and options (expert slots, the streamed dense layers and their ring), and its errors name the
// budget. Headers only: synth presets cost nothing to plan.
#include "moe/run_plan.h"

#include <string>

#include "engine/core/host_memory.h"
#include "moe/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

using ::testing::HasSubstr;

Plan PlanOf(const std::string& path, size_t budget, int64_t context) {
  absl::StatusOr<ModelBytes> target = ReadModelBytes(path);
  EXPECT_TRUE(target.ok()) << target.status();
  PlanOptions o;
  o.vram_budget = budget;
  o.context = context;
  o.kv_element_bytes = 2;
  absl::StatusOr<Plan> p = MakePlan(*target, nullptr, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Plan();
}

OffloadRequest Request(const std::string& path, size_t budget, int64_t context) {
  OffloadRequest r;
  r.target = path;
  r.context = context;
  r.kv_element_bytes = 2;
  r.vram_budget = budget;
  return r;
}

TEST(RunPlanTest, DenseTargetStreamsThePlannedLayersThroughItsRing) {
  // A dense target (no experts) is planned too: its FFN layers that do not fit stream.
  const std::string path = "synth:qwen3-0.6b:bf16";
  absl::StatusOr<ModelBytes> bytes = ReadModelBytes(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const size_t layer = bytes->layers[0].dense_ffn;
  const Plan probe = PlanOf(path, size_t{1} << 40, 512);
  const size_t budget = probe.minimum_budget + 5 * layer + layer / 2;
  const Plan plan = PlanOf(path, budget, 512);
  ASSERT_EQ(plan.streamed_dense_layers.size(), bytes->layers.size() - 5) << "the plan should stream layers";
  if (HostMemoryAvailable() > 0 && HostMemoryAvailable() < static_cast<double>(plan.streamed_dense)) {
    GTEST_SKIP() << "this host has less RAM than the streamed part";
  }
  absl::StatusOr<RunPlan> run = PlanRun(Request(path, budget, 512));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->streamed_dense_layers, plan.streamed_dense_layers);
  EXPECT_EQ(run->dense_ring_layers, kDenseRingLayers);
  EXPECT_EQ(run->streamed_dense_bytes, plan.streamed_dense);
  EXPECT_EQ(run->expert_cache_slots, -1) << "a dense model has no expert cache";
  EXPECT_TRUE(run->streams());
  // With room for everything nothing streams, and the ring is not asked for.
  absl::StatusOr<RunPlan> all = PlanRun(Request(path, size_t{1} << 40, 512));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->streamed_dense_layers.empty());
  EXPECT_EQ(all->dense_ring_layers, 0);
  EXPECT_FALSE(all->streams());
}

TEST(RunPlanTest, MoeTargetGetsThePlannedSlots) {
  const std::string path = "synth:tiny-moe:q8_0";
  const Plan probe = PlanOf(path, size_t{1} << 40, 256);
  ASSERT_EQ(probe.expert_cache_slots, -1);
  // Below every expert: the plan's slots, and PlanExpertCacheSlots agrees with PlanRun.
  const size_t budget = probe.resident_total - probe.resident(ResidentKind::kExpertsResident) / 2;
  const Plan plan = PlanOf(path, budget, 256);
  ASSERT_GE(plan.expert_cache_slots, 0);
  absl::StatusOr<RunPlan> run = PlanRun(Request(path, budget, 256));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->expert_cache_slots, plan.expert_cache_slots);
  EXPECT_TRUE(run->streamed_dense_layers.empty()) << "tiny-moe has no dense FFN layers";
  absl::StatusOr<int64_t> slots = PlanExpertCacheSlots(Request(path, budget, 256));
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(*slots, plan.expert_cache_slots);
}

TEST(RunPlanTest, ErrorsNameTheBudget) {
  absl::StatusOr<RunPlan> low = PlanRun(Request("synth:qwen3-0.6b:bf16", 1 << 20, 512));
  ASSERT_FALSE(low.ok());
  EXPECT_THAT(low.status().message(), HasSubstr("VRAM budget: "));
  EXPECT_THAT(low.status().message(), HasSubstr("below the minimum of"));
  absl::StatusOr<RunPlan> bad = PlanRun(Request("synth:no-such-preset", 1 << 30, 512));
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace specgen::moe

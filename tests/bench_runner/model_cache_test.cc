// ModelCache: weights load once per path whatever the context or backend; a Transformer is made
// once per (path, context) on the current backend.
#include "bench/runner/model_cache.h"

#include "bench/runner/pairing_run.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::bench {
namespace {

TEST(ModelCacheTest, LoadsEachModelOnce) {
  ModelCache cache;
  const BackendKey cpu{"cpu", "", 1};
  auto a = cache.Get(cpu, "synth:tiny-moe", 64);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = cache.Get(cpu, "synth:tiny-moe", 64);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->lm->max_context(), 64);
  auto c = cache.Get(cpu, "synth:tiny-moe", 32);  // another context: another Transformer, same weights
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
  EXPECT_EQ((*c)->lm->max_context(), 32);
  EXPECT_EQ((*c)->tokenizer, nullptr);  // synth models have none
  const BackendKey other{"cpu", "", 2};  // another backend: models made again, weights kept
  ASSERT_TRUE(cache.Get(other, "synth:tiny-moe", 64).ok());
  EXPECT_EQ(cache.weight_loads("synth:tiny-moe"), 1);
}

TEST(ModelCacheTest, ResolvesAutoToWhatThisBuildRuns) {
  const std::string device = ResolveDevice("auto");
  EXPECT_TRUE(device == "cpu" || device == "cuda");
  EXPECT_EQ(ResolveDevice("cpu"), "cpu");
}

// A placement is part of a Transformer's key (a streamed and a resident target are different
// models on the device), and KeepOnly frees the others before a planned run loads its own.
TEST(ModelCacheTest, PlacementsAreKeptApartAndKeepOnlyFreesTheRest) {
  ModelCache cache;
  const BackendKey cpu{"cpu", "", 1};
  auto resident = cache.Get(cpu, "synth:tiny-moe", 64);
  ASSERT_TRUE(resident.ok()) << resident.status();
  moe::RunPlan streamed;
  streamed.expert_cache_slots = 4;
  streamed.prefill_chunk = 32;
  auto placed = cache.Get(cpu, "synth:tiny-moe", 64, streamed);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_NE(*resident, *placed);
  EXPECT_EQ((*placed)->lm->prefill_chunk(), 32u);
  EXPECT_EQ((*resident)->lm->prefill_chunk(), kPrefillChunk);
  ASSERT_TRUE(cache.Get(cpu, "synth:tiny-dense", 64).ok());
  EXPECT_EQ(cache.loaded(), 3u);
  cache.KeepOnly({LmKey::Of("synth:tiny-moe", 64, streamed)});
  EXPECT_EQ(cache.loaded(), 1u);
  auto again = cache.Get(cpu, "synth:tiny-moe", 64, streamed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *placed);  // kept, not made again
  EXPECT_EQ(cache.weight_loads("synth:tiny-moe"), 1);
  EXPECT_EQ(cache.vram_budget(), 0u);  // the CPU has no arena to plan
}

// A routing regime replaces the cached target's experts for the run (the logits change), and the own
// router's run switches a cached model's override off again (the logits are the first run's, bit for
// bit): models outlive runs in the cache, so one run's regime must not leak into the next.
TEST(PairingRunTest, RoutingRegimesSwitchTheCachedTargetsExpertsAndBack) {
  ModelCache cache;
  const BackendKey cpu{"cpu", "", 1};
  auto got = cache.Get(cpu, "synth:tiny-moe", 64);
  ASSERT_TRUE(got.ok()) << got.status();
  Transformer& lm = *(*got)->lm;
  Pairing p;
  p.name = "moe";
  p.target = "synth:tiny-moe";
  p.context = 64;
  RunSpec spec;
  spec.pairing = &p;
  const std::vector<int32_t> tokens = {3, 14, 15, 92, 65, 35};
  auto logits_under = [&](const std::string& routing, size_t prompt) {
    spec.routing = routing;
    EXPECT_TRUE(UseRouting(spec, lm, prompt).ok()) << routing;
    EXPECT_TRUE(lm.Truncate(0).ok());
    std::vector<float> logits;
    EXPECT_TRUE(lm.Forward(tokens, &logits).ok()) << routing;
    return logits;
  };
  const std::vector<float> own = logits_under("", 0);
  const std::vector<float> uniform = logits_under("uniform", 0);
  ASSERT_EQ(own.size(), uniform.size());
  EXPECT_NE(own, uniform) << "the uniform trace did not replace the router's choice";
  EXPECT_EQ(logits_under("uniform", 0), uniform) << "a prompt's trace is a function of seed and prompt";
  EXPECT_NE(logits_under("uniform", 1), uniform) << "another prompt, another trace";
  EXPECT_NE(logits_under("locality", 0), own);
  EXPECT_EQ(logits_under("", 0), own) << "the own router's run left the override on";
  // A dense target has no experts to route: a named error.
  auto dense = cache.Get(cpu, "synth:tiny-dense", 64);
  ASSERT_TRUE(dense.ok()) << dense.status();
  spec.routing = "uniform";
  EXPECT_FALSE(UseRouting(spec, *(*dense)->lm, 0).ok());
}

// The runner asks the planner with the pairing's longest draft length, its draft and context and the
// CLI's default KV cache type (f16); a budget below what holds every expert streams them.
TEST(PairingRunTest, RunRequestCoversThePairingAndABudgetBelowTheExpertsStreams) {
  Pairing p;
  p.name = "big";
  p.target = "synth:qwen3-30b-a3b:q4_k";
  p.draft = "synth:qwen3-0.6b:q8_0";
  p.draft_lengths = {{2, false}, {6, true}, {4, false}};
  p.context = 2048;
  RunSpec spec;
  spec.pairing = &p;
  spec.length = {2, false};
  const size_t gib = size_t{1} << 30;
  const moe::RunRequest r = RunRequestFor(spec);
  EXPECT_EQ(r.target, p.target);
  EXPECT_EQ(r.draft, p.draft);
  EXPECT_EQ(r.draft_max, 6);
  EXPECT_EQ(r.context, 2048);
  EXPECT_EQ(r.kv_type, DType::kF16);
  // The target alone shares the pairing's placement (the same request).
  const moe::RunRequest plain = RunRequestFor(WithoutDraft(spec));
  EXPECT_EQ(plain.draft, p.draft);
  EXPECT_EQ(plain.draft_max, 6);
  // Planned (a target whose streamed part fits this host's RAM): below what holds every expert the
  // experts stream; above it they are resident.
  Pairing olmoe = p;
  olmoe.target = "synth:olmoe-1b-7b:q4_k";
  olmoe.draft.clear();
  olmoe.draft_lengths = {{0, false}};
  RunSpec plain_spec;
  plain_spec.pairing = &olmoe;
  auto streamed = moe::PlanFor(RunRequestFor(plain_spec), 2 * gib);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_GT(streamed->expert_cache_slots, 0);
  auto resident = moe::PlanFor(RunRequestFor(plain_spec), 16 * gib);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ(resident->expert_cache_slots, -1);
  // A pairing without a draft plans the target alone.
  Pairing alone = p;
  alone.draft.clear();
  alone.draft_lengths = {{0, false}};
  spec.pairing = &alone;
  spec.length = {0, false};
  EXPECT_TRUE(RunRequestFor(spec).draft.empty());
}

}  // namespace
}  // namespace specgen::bench

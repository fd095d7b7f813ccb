// ModelCache: weights load once per path whatever the context or backend; a Transformer is made
// once per (path, context) on the current backend.
#include "bench/runner/model_cache.h"

#include "bench/runner/pairing_run.h"

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
  cache.KeepOnly({{"synth:tiny-moe", 64, 4, 32}});
  EXPECT_EQ(cache.loaded(), 1u);
  auto again = cache.Get(cpu, "synth:tiny-moe", 64, streamed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *placed);  // kept, not made again
  EXPECT_EQ(cache.weight_loads("synth:tiny-moe"), 1);
  EXPECT_EQ(cache.vram_budget(), 0u);  // the CPU has no arena to plan
}

// The runner asks the planner with the pairing's longest draft length, its draft and context and the
// fp32 KV cache its Transformers use; a budget below what holds every expert streams them.
TEST(PairingRunTest, OffloadRequestCoversThePairingAndABudgetBelowTheExpertsStreams) {
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
  const moe::OffloadRequest r = OffloadRequestFor(spec, 8 * gib);
  EXPECT_EQ(r.target, p.target);
  EXPECT_EQ(r.draft, p.draft);
  EXPECT_EQ(r.draft_max, 6);
  EXPECT_EQ(r.context, 2048);
  EXPECT_EQ(r.kv_element_bytes, 4);
  EXPECT_EQ(r.vram_budget, 8 * gib);
  // The target alone shares the pairing's placement (the same request).
  const moe::OffloadRequest plain = OffloadRequestFor(WithoutDraft(spec), 8 * gib);
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
  auto streamed = moe::PlanRun(OffloadRequestFor(plain_spec, 2 * gib));
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_GT(streamed->expert_cache_slots, 0);
  auto resident = moe::PlanRun(OffloadRequestFor(plain_spec, 16 * gib));
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ(resident->expert_cache_slots, -1);
  // A pairing without a draft plans the target alone.
  Pairing alone = p;
  alone.draft.clear();
  alone.draft_lengths = {{0, false}};
  spec.pairing = &alone;
  spec.length = {0, false};
  EXPECT_TRUE(OffloadRequestFor(spec, 8 * gib).draft.empty());
}

}  // namespace
}  // namespace specgen::bench

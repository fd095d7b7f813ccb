// ModelCache: weights load once per path whatever the context or backend; a Transformer is made
// once per (path, context) on the current backend.
#include "bench/runner/model_cache.h"

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

}  // namespace
}  // namespace specgen::bench

#include "moe/expert_cache_policy.h"

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

// The policy as plainly as it can be said: every (layer, expert) has a last-use time and a count; a
// miss takes a free slot, or evicts the cached expert outside the current union with the smallest
// (count for LFU, else 0; last use; layer; expert). Counts halve before every aging_period-th access.
class BruteForceCache {
 public:
  BruteForceCache(CachePolicy p, int64_t slots, int layers, int experts, int64_t aging)
      : p_(p), slots_(slots), layers_(layers), experts_(experts), aging_(aging),
        cached_(layers * experts, false), last_(layers * experts, -1), count_(layers * experts, 0) {}

  void Access(int layer, const std::vector<int>& u) {
    if (p_ == CachePolicy::kLfuAging && aging_ > 0 && clock_ > 0 && clock_ % aging_ == 0) {
      for (int64_t& c : count_) c /= 2;
    }
    const int64_t now = clock_++;
    for (int e : u) {
      const int i = layer * experts_ + e;
      if (cached_[i]) {
        ++hits;
      } else {
        ++misses;
        if (std::count(cached_.begin(), cached_.end(), true) == slots_) {
          int best = -1;
          std::tuple<int64_t, int64_t, int, int> best_key;
          for (int j = 0; j < layers_ * experts_; ++j) {
            if (!cached_[j]) continue;
            if (j / experts_ == layer && std::find(u.begin(), u.end(), j % experts_) != u.end()) continue;
            auto key = std::make_tuple(p_ == CachePolicy::kLfuAging ? count_[j] : 0, last_[j], j / experts_,
                                       j % experts_);
            if (best < 0 || key < best_key) best = j, best_key = key;
          }
          cached_[best] = false;
          ++evictions;
        }
        cached_[i] = true;
      }
      last_[i] = now;
      ++count_[i];
    }
  }
  bool Cached(int layer, int e) const { return cached_[layer * experts_ + e]; }
  int64_t hits = 0, misses = 0, evictions = 0;

 private:
  CachePolicy p_;
  int64_t slots_;
  int layers_, experts_;
  int64_t aging_, clock_ = 0;
  std::vector<bool> cached_;
  std::vector<int64_t> last_, count_;
};

TEST(ExpertCachePolicyTest, MatchesBruteForceOnRandomTraces) {
  std::mt19937 rng(1234);
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kLfuAging}) {
    for (int trial = 0; trial < 40; ++trial) {
      const int layers = 1 + rng() % 4, experts = 2 + rng() % 10;
      const int64_t slots = 1 + rng() % (layers * experts);
      const int64_t aging = rng() % 3 == 0 ? 0 : 1 + rng() % 12;
      ExpertCachePolicy cache(policy, slots, layers, experts, aging);
      BruteForceCache ref(policy, slots, layers, experts, aging);
      for (int step = 0; step < 300; ++step) {
        const int layer = rng() % layers;
        std::vector<int> all(experts);
        for (int e = 0; e < experts; ++e) all[e] = e;
        std::shuffle(all.begin(), all.end(), rng);
        // Skewed unions, so that the two policies choose differently.
        const int size = 1 + rng() % std::min<int64_t>(slots, experts);
        std::vector<int> u(all.begin(), all.begin() + size);
        if (rng() % 2) {  // low ids more often
          for (int& e : u) e = std::min<int>(e, rng() % experts);
          std::sort(u.begin(), u.end());
          u.erase(std::unique(u.begin(), u.end()), u.end());
        }
        ASSERT_TRUE(cache.Access(layer, u).ok());
        ref.Access(layer, u);
        for (int e : u) ASSERT_TRUE(cache.Cached(layer, e)) << "a union member must be cached after its access";
        for (int l = 0; l < layers; ++l) {
          for (int e = 0; e < experts; ++e) {
            ASSERT_EQ(cache.Cached(l, e), ref.Cached(l, e))
                << CachePolicyName(policy) << " trial " << trial << " step " << step << " layer " << l
                << " expert " << e;
          }
        }
        ASSERT_LE(cache.cached_count(), slots);
      }
      EXPECT_EQ(cache.counters().hits, ref.hits);
      EXPECT_EQ(cache.counters().misses, ref.misses);
      EXPECT_EQ(cache.counters().evictions, ref.evictions);
    }
  }
}

// LRU and LFU choose different victims on the same trace: a frequently used expert survives LFU.
TEST(ExpertCachePolicyTest, PoliciesDiffer) {
  ExpertCachePolicy lru(CachePolicy::kLru, 2, 1, 4);
  ExpertCachePolicy lfu(CachePolicy::kLfuAging, 2, 1, 4);
  for (ExpertCachePolicy* c : {&lru, &lfu}) {
    for (const std::vector<int>& u : std::vector<std::vector<int>>{{0}, {0}, {0}, {1}, {2}}) {
      ASSERT_TRUE(c->Access(0, u).ok());
    }
  }
  EXPECT_FALSE(lru.Cached(0, 0));  // least recently used
  EXPECT_TRUE(lru.Cached(0, 1));
  EXPECT_TRUE(lfu.Cached(0, 0));   // used three times
  EXPECT_FALSE(lfu.Cached(0, 1));
  EXPECT_EQ(lru.counters().hits, 2);
  EXPECT_EQ(lru.counters().misses, 3);
  EXPECT_EQ(lru.counters().evictions, 1);
}

TEST(ExpertCachePolicyTest, BadUnionsAreErrors) {
  ExpertCachePolicy c(CachePolicy::kLru, 3, 2, 8);
  EXPECT_EQ(c.Access(0, std::vector<int>{0, 1, 2, 3}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Access(0, std::vector<int>{1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Access(0, std::vector<int>{8}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Access(2, std::vector<int>{0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.counters().hits + c.counters().misses, 0);
}

TEST(ExpertCachePolicyTest, PassUnionIsTheSortedDistinctIds) {
  absl::StatusOr<std::vector<int>> u = PassUnion(std::vector<int>{5, 1, 1, 7, 5, 0}, 2, 8);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, (std::vector<int>{0, 1, 5, 7}));
  EXPECT_FALSE(PassUnion(std::vector<int>{1, 2, 3}, 2, 8).ok());  // not whole rows
  absl::StatusOr<std::vector<int>> bad = PassUnion(std::vector<int>{1, 2, 3, 9}, 2, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("token 1"), std::string::npos);
  // Against a set over random routing.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int E = 4 + rng() % 60, k = 1 + rng() % 4, n = 1 + rng() % 16;
    std::vector<int> routing(n * k);
    std::set<int> want;
    for (int& e : routing) want.insert(e = rng() % E);
    absl::StatusOr<std::vector<int>> got = PassUnion(routing, k, E);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, std::vector<int>(want.begin(), want.end()));
  }
}

}  // namespace
}  // namespace specgen::moe

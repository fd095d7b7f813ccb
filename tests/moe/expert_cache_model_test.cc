// moe/expert_cache_model.h, the one host model of the VRAM expert cache, against independent brute
// forces: under LRU a recency list of slots (least recent first; the slots an access touches move to
// the back in index order, never-used slots start in front in index order), victims taken from the
// front after the hits have moved; under LFU with aging a scan for the smallest (uses, stamp, index).
// On random traces of random layers they agree on every access (union, hits, fetches, evictions), the
// tables stay consistent (slot_of and owner inverse), the union is resident after its access, and the
// counters add up (hits + misses = the union sizes summed).
#include "moe/expert_cache_model.h"

#include <algorithm>
#include <list>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

class BruteLru {
 public:
  BruteLru(int64_t layers, int64_t experts, int64_t slots) : experts_(experts), key_(slots, -1) {
    for (int64_t s = 0; s < slots; ++s) order_.push_back(static_cast<int32_t>(s));
    (void)layers;
  }
  // (expert, slot) fetches in ascending expert, the hits and the evictions.
  void Touch(int64_t layer, const std::vector<int32_t>& uni, std::vector<std::pair<int32_t, int32_t>>* fetches,
             int64_t* hits, int64_t* evictions) {
    std::vector<int32_t> touched, missing;
    *hits = *evictions = 0;
    for (int32_t e : uni) {
      const int64_t k = layer * experts_ + e;
      auto it = std::find(key_.begin(), key_.end(), k);
      if (it != key_.end()) {
        touched.push_back(static_cast<int32_t>(it - key_.begin()));
        ++*hits;
      } else {
        missing.push_back(e);
      }
    }
    for (int32_t s : touched) order_.remove(s);
    std::vector<int32_t> victims;
    for (size_t i = 0; i < missing.size(); ++i) {
      victims.push_back(order_.front());
      order_.pop_front();
    }
    std::sort(victims.begin(), victims.end());
    for (size_t i = 0; i < missing.size(); ++i) {
      if (key_[victims[i]] >= 0) ++*evictions;
      key_[victims[i]] = layer * experts_ + missing[i];
      fetches->push_back({missing[i], victims[i]});
      touched.push_back(victims[i]);
    }
    std::sort(touched.begin(), touched.end());
    for (int32_t s : touched) order_.push_back(s);
  }

 private:
  int64_t experts_;
  std::vector<int64_t> key_;  // per slot
  std::list<int32_t> order_;  // least recent first
};

TEST(ExpertCacheModel, LruAgreesWithBruteForceSlotForSlot) {
  std::mt19937 rng(7);
  for (const auto& [layers, experts, k, slots] :
       std::vector<std::tuple<int, int, int, int>>{{3, 8, 2, 2}, {3, 8, 2, 5}, {4, 32, 4, 16}, {2, 64, 8, 64},
                                                   {5, 128, 8, 200}, {2, 16, 4, 64}}) {
    std::vector<int64_t> bytes(layers);
    for (int l = 0; l < layers; ++l) bytes[l] = 1000 + 16 * l;
    ExpertCacheModel model(CachePolicy::kLru, layers, experts, slots, bytes);
    BruteLru brute(layers, experts, slots);
    int64_t union_sum = 0, fetched = 0;
    for (int step = 0; step < 400; ++step) {
      const int layer = static_cast<int>(rng() % layers);
      // n tokens of k distinct ids each; n as large as the slots allow (the caller's rule).
      const int max_n = std::max(1, std::min(16, slots / k));
      const int n = 1 + static_cast<int>(rng() % max_n);
      std::vector<int32_t> ids;
      // A skewed choice (low ids more likely), so hits happen at every cache size.
      for (int t = 0; t < n; ++t) {
        std::set<int32_t> tok;
        while (static_cast<int>(tok.size()) < k) {
          const double u = std::uniform_real_distribution<double>(0, 1)(rng);
          tok.insert(static_cast<int32_t>(experts * u * u));
        }
        ids.insert(ids.end(), tok.begin(), tok.end());
      }
      auto a = model.Touch(layer, ids);
      ASSERT_TRUE(a.ok()) << a.status();
      std::vector<int32_t> uni(ids);
      std::sort(uni.begin(), uni.end());
      uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
      EXPECT_EQ(a->experts, uni);
      std::vector<std::pair<int32_t, int32_t>> fetches;
      int64_t hits, evictions;
      brute.Touch(layer, uni, &fetches, &hits, &evictions);
      ASSERT_EQ(a->fetches, fetches) << "step " << step << " (E " << experts << ", slots " << slots << ")";
      ASSERT_EQ(a->hits, hits);
      ASSERT_EQ(a->evictions, evictions);
      union_sum += static_cast<int64_t>(uni.size());
      fetched += static_cast<int64_t>(fetches.size()) * bytes[layer];
      for (int32_t e : uni) {
        const int32_t s = model.slot_of(layer, e);
        ASSERT_GE(s, 0) << "expert " << e << " of the union is not resident after its access";
        EXPECT_EQ(model.owner(s), layer * experts + e);
        EXPECT_EQ(model.stamp(s), model.clock());
      }
    }
    for (int l = 0; l < layers; ++l) {
      for (int e = 0; e < experts; ++e) {
        const int32_t s = model.slot_of(l, e);
        if (s >= 0) {
          EXPECT_EQ(model.owner(s), l * experts + e);
        }
      }
    }
    for (int s = 0; s < slots; ++s) {
      const int32_t o = model.owner(s);
      if (o >= 0) {
        EXPECT_EQ(model.slot_of(o / experts, o % experts), s);
      }
    }
    const CacheCounters& c = model.counters();
    EXPECT_EQ(c.hits + c.misses, union_sum);
    EXPECT_EQ(c.bytes, fetched);
    EXPECT_LE(c.evictions, c.misses);
  }
}

// LFU with aging at slot level, as plainly as it can be said: victims are the slots outside the
// union's hits of smallest (uses of the owner, -1 if none; stamp; index), taken in index order; uses
// count every access of a union member and halve before every aging_period-th access after the first.
class BruteLfu {
 public:
  BruteLfu(int64_t layers, int64_t experts, int64_t slots, int64_t aging)
      : experts_(experts), aging_(aging), owner_(slots, -1), stamp_(slots, 0), uses_(layers * experts, 0) {}
  void Touch(int64_t layer, const std::vector<int32_t>& uni, std::vector<std::pair<int32_t, int32_t>>* fetches) {
    if (aging_ > 0 && accesses_ > 0 && accesses_ % aging_ == 0) {
      for (int64_t& u : uses_) u /= 2;
    }
    ++accesses_;
    ++clock_;
    std::vector<bool> hit(owner_.size(), false);
    std::vector<int32_t> missing;
    for (int32_t e : uni) {
      auto it = std::find(owner_.begin(), owner_.end(), layer * experts_ + e);
      if (it != owner_.end()) {
        hit[it - owner_.begin()] = true;
        stamp_[it - owner_.begin()] = clock_;
      } else {
        missing.push_back(e);
      }
    }
    std::vector<int32_t> victims;
    for (size_t i = 0; i < missing.size(); ++i) {
      int32_t best = -1;
      for (int32_t s = 0; s < static_cast<int32_t>(owner_.size()); ++s) {
        if (hit[s] || std::find(victims.begin(), victims.end(), s) != victims.end()) continue;
        auto key = [&](int32_t x) {
          return std::make_tuple(owner_[x] < 0 ? int64_t{-1} : uses_[owner_[x]], stamp_[x], x);
        };
        if (best < 0 || key(s) < key(best)) best = s;
      }
      victims.push_back(best);
    }
    std::sort(victims.begin(), victims.end());
    for (size_t i = 0; i < missing.size(); ++i) {
      owner_[victims[i]] = static_cast<int32_t>(layer * experts_ + missing[i]);
      stamp_[victims[i]] = clock_;
      fetches->push_back({missing[i], victims[i]});
    }
    for (int32_t e : uni) ++uses_[layer * experts_ + e];
  }
  bool Cached(int64_t layer, int64_t e) const {
    return std::find(owner_.begin(), owner_.end(), layer * experts_ + e) != owner_.end();
  }

 private:
  int64_t experts_, aging_, accesses_ = 0;
  uint32_t clock_ = 0;
  std::vector<int32_t> owner_;
  std::vector<uint32_t> stamp_;
  std::vector<int64_t> uses_;
};

TEST(ExpertCacheModel, LfuAgreesWithBruteForce) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    const int layers = 1 + rng() % 4, experts = 2 + rng() % 10;
    const int64_t slots = 1 + rng() % (layers * experts);
    const int64_t aging = rng() % 3 == 0 ? 0 : 1 + rng() % 12;
    ExpertCacheModel model(CachePolicy::kLfuAging, layers, experts, slots, {}, aging);
    BruteLfu brute(layers, experts, slots, aging);
    for (int step = 0; step < 300; ++step) {
      const int layer = rng() % layers;
      std::vector<int32_t> all(experts);
      for (int e = 0; e < experts; ++e) all[e] = e;
      std::shuffle(all.begin(), all.end(), rng);
      // Skewed unions (low ids more often), so that counts differ and LFU chooses unlike LRU.
      const int size = 1 + rng() % std::min<int64_t>(slots, experts);
      std::vector<int32_t> ids(all.begin(), all.begin() + size);
      if (rng() % 2) {
        for (int32_t& e : ids) e = std::min<int32_t>(e, rng() % experts);
      }
      auto a = model.Touch(layer, ids);
      ASSERT_TRUE(a.ok()) << a.status();
      std::vector<int32_t> uni(ids);
      std::sort(uni.begin(), uni.end());
      uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
      std::vector<std::pair<int32_t, int32_t>> fetches;
      brute.Touch(layer, uni, &fetches);
      ASSERT_EQ(a->fetches, fetches) << "trial " << trial << " step " << step;
      for (int l = 0; l < layers; ++l) {
        for (int e = 0; e < experts; ++e) ASSERT_EQ(model.Cached(l, e), brute.Cached(l, e));
      }
      ASSERT_LE(model.cached_count(), slots);
    }
  }
}

TEST(ExpertCacheModel, AWorkingSetThatFitsMissesOnlyOnce) {
  ExpertCacheModel model(CachePolicy::kLru, 2, 16, 8, {100, 100});
  const std::vector<int32_t> a = {1, 3, 5, 3}, b = {0, 2, 7, 9};
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(model.Touch(0, a).ok());
    ASSERT_TRUE(model.Touch(1, b).ok());
  }
  EXPECT_EQ(model.counters().misses, 3 + 4);
  EXPECT_EQ(model.counters().hits, 4 * 7);
  EXPECT_EQ(model.counters().evictions, 0);
}

TEST(ExpertCacheModel, RejectsWhatDoesNotFit) {
  ExpertCacheModel model(CachePolicy::kLru, 1, 8, 2, {10});
  const std::vector<int32_t> three = {0, 1, 2}, bad = {8};
  EXPECT_EQ(model.Touch(0, three).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(model.Touch(0, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.Touch(1, std::span<const int32_t>()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.clock(), 0u);
  EXPECT_EQ(model.counters(), CacheCounters{});
}

// LRU and LFU choose different victims on the same trace: a frequently used expert survives LFU.
TEST(ExpertCacheModel, PoliciesDiffer) {
  ExpertCacheModel lru(CachePolicy::kLru, 1, 4, 2);
  ExpertCacheModel lfu(CachePolicy::kLfuAging, 1, 4, 2);
  for (ExpertCacheModel* c : {&lru, &lfu}) {
    for (const std::vector<int>& u : std::vector<std::vector<int>>{{0}, {0}, {0}, {1}, {2}}) {
      ASSERT_TRUE(c->Touch(0, std::span<const int>(u)).ok());
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

TEST(ExpertCacheModel, PassUnionIsTheSortedDistinctIds) {
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

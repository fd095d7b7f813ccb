// moe/slot_table_model.h (the host model the GPU's cache decision must match) against an independent
// brute-force LRU: a recency list of slots (least recent first; the slots an access touches move to the
// back in index order, never-used slots start in front in index order), victims taken from the front
// after the hits have moved. On random traces of random layers the two agree on every access (union,
// hits, fetches, evictions), the tables stay consistent (slot_of and owner inverse), the union is
// resident after its access, and the counters add up (hits + misses = the union sizes summed).
#include "moe/slot_table_model.h"

#include <algorithm>
#include <list>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace specgen {
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

TEST(SlotTableModel, AgreesWithBruteForceLru) {
  std::mt19937 rng(7);
  for (const auto& [layers, experts, k, slots] :
       std::vector<std::tuple<int, int, int, int>>{{3, 8, 2, 2}, {3, 8, 2, 5}, {4, 32, 4, 16}, {2, 64, 8, 64},
                                                   {5, 128, 8, 200}, {2, 16, 4, 64}}) {
    std::vector<int64_t> bytes(layers);
    for (int l = 0; l < layers; ++l) bytes[l] = 1000 + 16 * l;
    SlotTableModel model(layers, experts, slots, bytes);
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
    const SlotCounters& c = model.counters();
    EXPECT_EQ(c.hits + c.misses, union_sum);
    EXPECT_EQ(c.bytes, fetched);
    EXPECT_LE(c.evictions, c.misses);
  }
}

TEST(SlotTableModel, AWorkingSetThatFitsMissesOnlyOnce) {
  SlotTableModel model(2, 16, 8, {100, 100});
  const std::vector<int32_t> a = {1, 3, 5, 3}, b = {0, 2, 7, 9};
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(model.Touch(0, a).ok());
    ASSERT_TRUE(model.Touch(1, b).ok());
  }
  EXPECT_EQ(model.counters().misses, 3 + 4);
  EXPECT_EQ(model.counters().hits, 4 * 7);
  EXPECT_EQ(model.counters().evictions, 0);
}

TEST(SlotTableModel, RejectsWhatDoesNotFit) {
  SlotTableModel model(1, 8, 2, {10});
  const std::vector<int32_t> three = {0, 1, 2}, bad = {8};
  EXPECT_FALSE(model.Touch(0, three).ok());
  EXPECT_FALSE(model.Touch(0, bad).ok());
  EXPECT_FALSE(model.Touch(1, {}).ok());
  EXPECT_EQ(model.clock(), 0u);
}

}  // namespace
}  // namespace specgen

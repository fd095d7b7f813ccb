// moe/slot_table_model.h (the host model the GPU's cache decision must match) against an independent
// brute-force LRU: a recency list of slots (least recent first; the slots an access touches move to the
// back in index order, never-used slots start in front in index order), victims taken from the front
// after the hits have moved. On random traces of random layers the two agree on every access (union,
// hits, fetches, evictions), the tables stay consistent (slot_of and owner inverse), the union is
// resident after its access, and the counters add up (hits + misses = the union sizes summed).
// Prefetches interleaved with the accesses, against a second brute force that keeps slots in groups of
// one last use (an access starts a new group at the back; a prefetch joins the latest access's group
// and takes victims, in order, only from the groups before it): the same fetches, hits, evictions and
// marks; never a victim of the latest access's union; useful + wasted + still marked = prefetched.
#include "moe/slot_table_model.h"

#include <algorithm>
#include <list>
#include <map>
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

// Slots in groups of one last use, oldest first (slots never used form the first group), each group in
// ascending slot index; per slot its key and the bytes a prefetch brought there unused.
class BruteGroups {
 public:
  BruteGroups(int64_t experts, int64_t slots, std::vector<int64_t> bytes)
      : experts_(experts), bytes_(std::move(bytes)), key_(slots, -1), marked_(slots, 0) {
    std::set<int32_t> all;
    for (int64_t s = 0; s < slots; ++s) all.insert(static_cast<int32_t>(s));
    groups_.push_back(all);
  }
  struct Result {
    std::vector<std::pair<int32_t, int32_t>> fetches;
    int64_t hits = 0, evictions = 0;
  };
  Result Touch(int64_t layer, const std::vector<int32_t>& uni) {
    Result r;
    std::set<int32_t> group;
    std::vector<int32_t> missing;
    for (int32_t e : uni) {
      const int32_t s = SlotOf(layer, e);
      if (s >= 0) {
        Take(s);
        group.insert(s);
        ++r.hits;
        useful += marked_[s];
        marked_[s] = 0;
      } else {
        missing.push_back(e);
      }
    }
    Fill(layer, missing, Oldest(missing.size(), groups_.size()), &group, &r);
    groups_.push_back(group);
    return r;
  }
  Result Prefetch(int64_t layer, const std::vector<int32_t>& uni) {
    Result r;
    std::set<int32_t> group = groups_.back();  // the latest access's (or, before any, the unused slots)
    groups_.pop_back();
    std::vector<int32_t> missing;
    for (int32_t e : uni) {
      const int32_t s = SlotOf(layer, e);
      if (s >= 0) {
        Take(s);
        group.insert(s);
        ++r.hits;
      } else {
        missing.push_back(e);
      }
    }
    size_t older = 0;
    for (const auto& g : groups_) older += g.size();
    missing.resize(std::min(missing.size(), older));
    const std::vector<int32_t> victims = Oldest(missing.size(), groups_.size());
    Fill(layer, missing, victims, &group, &r);
    for (int32_t s : victims) marked_[s] = bytes_[layer];
    prefetched += static_cast<int64_t>(victims.size()) * bytes_[layer];
    groups_.push_back(group);
    return r;
  }
  int64_t marked(int32_t s) const { return marked_[s]; }
  int64_t useful = 0, wasted = 0, prefetched = 0;

 private:
  int32_t SlotOf(int64_t layer, int32_t e) const {
    auto it = std::find(key_.begin(), key_.end(), layer * experts_ + e);
    return it == key_.end() ? -1 : static_cast<int32_t>(it - key_.begin());
  }
  void Take(int32_t s) {
    for (auto it = groups_.begin(); it != groups_.end(); ++it) {
      if (it->erase(s)) {
        if (it->empty()) groups_.erase(it);
        return;
      }
    }
  }
  // The first `count` slots of the first `groups` groups in order, removed from them, ascending.
  std::vector<int32_t> Oldest(size_t count, size_t groups) {
    std::vector<int32_t> v;
    auto it = groups_.begin();
    for (size_t g = 0; g < groups && v.size() < count; ++g) {
      for (int32_t s : *it) {
        if (v.size() == count) break;
        v.push_back(s);
      }
      ++it;
    }
    for (int32_t s : v) Take(s);
    std::sort(v.begin(), v.end());
    return v;
  }
  void Fill(int64_t layer, const std::vector<int32_t>& missing, const std::vector<int32_t>& victims,
            std::set<int32_t>* group, Result* r) {
    for (size_t i = 0; i < missing.size(); ++i) {
      const int32_t s = victims[i];
      if (key_[s] >= 0) ++r->evictions;
      wasted += marked_[s];
      marked_[s] = 0;
      key_[s] = layer * experts_ + missing[i];
      r->fetches.push_back({missing[i], s});
      group->insert(s);
    }
  }

  int64_t experts_;
  std::vector<int64_t> bytes_;
  std::vector<int64_t> key_;
  std::vector<int64_t> marked_;
  std::list<std::set<int32_t>> groups_;
};

std::vector<int32_t> UnionOf(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

TEST(SlotTableModel, PrefetchesAgreeWithBruteForce) {
  std::mt19937 rng(19);
  for (const auto& [layers, experts, k, slots] :
       std::vector<std::tuple<int, int, int, int>>{{3, 8, 2, 2}, {3, 8, 2, 5}, {4, 32, 4, 16}, {2, 64, 8, 64},
                                                   {5, 128, 8, 200}, {2, 16, 4, 64}}) {
    SCOPED_TRACE("E " + std::to_string(experts) + ", slots " + std::to_string(slots));
    std::vector<int64_t> bytes(layers);
    for (int l = 0; l < layers; ++l) bytes[l] = 1000 + 16 * l;
    SlotTableModel model(layers, experts, slots, bytes);
    BruteGroups brute(experts, slots, bytes);
    const int max_n = std::max(1, std::min(16, slots / k));
    auto draw = [&](int n) {
      std::vector<int32_t> ids;
      for (int t = 0; t < n; ++t) {
        std::set<int32_t> tok;
        while (static_cast<int>(tok.size()) < k) {
          const double u = std::uniform_real_distribution<double>(0, 1)(rng);
          tok.insert(static_cast<int32_t>(experts * u * u));
        }
        ids.insert(ids.end(), tok.begin(), tok.end());
      }
      return ids;
    };
    int64_t prefetch_ops = 0, fewer = 0, access_bytes = 0;
    std::vector<int32_t> last_union;
    for (int step = 0; step < 400; ++step) {
      const int layer = static_cast<int>(rng() % layers);
      const int n = 1 + static_cast<int>(rng() % max_n);
      const std::vector<int32_t> ids = draw(n);
      if (step > 0 && rng() % 4 != 0) {
        // A prediction: some of the real ids, some others, up to 16 tokens' worth (may exceed the slots).
        std::vector<int32_t> predicted = draw(1 + static_cast<int>(rng() % 16));
        for (int32_t e : ids) {
          if (rng() % 3 != 0) predicted.push_back(e);
        }
        const int64_t misses_before = [&] {
          int64_t m = 0;
          for (int32_t e : UnionOf(predicted)) m += model.slot_of(layer, e) < 0;
          return m;
        }();
        auto p = model.Prefetch(layer, predicted);
        ASSERT_TRUE(p.ok()) << p.status();
        const auto want = brute.Prefetch(layer, UnionOf(predicted));
        ASSERT_EQ(p->experts, UnionOf(predicted));
        ASSERT_EQ(p->fetches, want.fetches) << "prefetch at step " << step;
        ASSERT_EQ(p->hits, want.hits) << "prefetch at step " << step;
        ASSERT_EQ(p->evictions, want.evictions) << "prefetch at step " << step;
        fewer += static_cast<int64_t>(p->fetches.size()) < misses_before;
        ++prefetch_ops;
        for (const auto& [e, s] : p->fetches) {
          EXPECT_EQ(model.slot_of(layer, e), s);
          EXPECT_EQ(model.prefetched(s), bytes[layer]);
          EXPECT_EQ(model.stamp(s), model.clock()) << "a prefetch does not advance the clock";
          const int32_t o = model.owner(s);
          EXPECT_EQ(o, layer * experts + e);
        }
        // The latest access's union stays where it was.
        for (int32_t key : last_union) {
          EXPECT_GE(model.slot_of(key / experts, key % experts), 0) << "a prefetch evicted the latest union";
        }
      }
      auto a = model.Touch(layer, ids);
      ASSERT_TRUE(a.ok()) << a.status();
      const auto want = brute.Touch(layer, UnionOf(ids));
      ASSERT_EQ(a->fetches, want.fetches) << "access at step " << step;
      ASSERT_EQ(a->hits, want.hits) << "access at step " << step;
      ASSERT_EQ(a->evictions, want.evictions) << "access at step " << step;
      access_bytes += static_cast<int64_t>(a->fetches.size()) * bytes[layer];
      last_union.clear();
      for (int32_t e : a->experts) last_union.push_back(layer * experts + e);
      const SlotCounters& c = model.counters();
      ASSERT_EQ(c.prefetch_useful, brute.useful) << "step " << step;
      ASSERT_EQ(c.prefetch_wasted, brute.wasted) << "step " << step;
      ASSERT_EQ(c.prefetch_bytes, brute.prefetched) << "step " << step;
      int64_t still = 0;
      for (int s = 0; s < slots; ++s) {
        ASSERT_EQ(model.prefetched(s), brute.marked(s)) << "step " << step << ", slot " << s;
        still += model.prefetched(s);
        if (model.prefetched(s) != 0) {
          EXPECT_GE(model.owner(s), 0);
        }
      }
      ASSERT_EQ(c.prefetch_useful + c.prefetch_wasted + still, c.prefetch_bytes) << "step " << step;
    }
    const SlotCounters& c = model.counters();
    EXPECT_GT(prefetch_ops, 0);
    if (slots > k) {  // else every access's union fills the cache and no slot is older than it
      EXPECT_GT(c.prefetches, 0);
      EXPECT_GT(c.prefetch_useful, 0);
    }
    if (slots > k && slots < layers * experts) {
      EXPECT_GT(c.prefetch_wasted, 0) << "the trace should waste some prefetches";
    }
    EXPECT_EQ(c.bytes, access_bytes + c.prefetch_bytes) << "bytes counts both kinds of fetch";
    if (slots <= 2 * k) {
      EXPECT_GT(fewer, 0) << "few slots should make some prefetches fetch fewer than their misses";
    }
  }
}

TEST(SlotTableModel, APrefetchBeforeAnyAccessFetchesNothing) {
  SlotTableModel model(2, 16, 8, {100, 100});
  const std::vector<int32_t> ids = {1, 2, 3};
  auto p = model.Prefetch(0, ids);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->fetches.empty()) << "no slot was used before the latest access (there is none)";
  ASSERT_TRUE(model.Touch(0, ids).ok());
  // Now 5 slots are older than the latest access: a prefetch of 7 experts of layer 1 brings 5.
  const std::vector<int32_t> next = {0, 1, 2, 3, 4, 5, 6};
  p = model.Prefetch(1, next);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->fetches.size(), 5u);
  EXPECT_EQ(model.counters().prefetch_bytes, 500);
  // The access hits 3 of them (useful) and takes 2 victims among the slots of the first access's clock
  // (layer 0's union in slots 0-2, the 2 unused prefetches in slots 6-7), lowest index first.
  const std::vector<int32_t> used = {0, 1, 2, 7, 8};
  auto a = model.Touch(1, used);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->hits, 3);
  EXPECT_EQ(a->fetches, (std::vector<std::pair<int32_t, int32_t>>{{7, 0}, {8, 1}}));
  EXPECT_EQ(model.counters().prefetch_useful, 300);
  EXPECT_EQ(model.counters().prefetch_wasted, 0);
  EXPECT_EQ(model.counters().bytes, 3 * 100 + 5 * 100 + 2 * 100);
  // Three more misses take slot 2 and the two unused prefetches: wasted.
  const std::vector<int32_t> more = {9, 10, 11};
  a = model.Touch(1, more);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->fetches, (std::vector<std::pair<int32_t, int32_t>>{{9, 2}, {10, 6}, {11, 7}}));
  EXPECT_EQ(model.counters().prefetch_wasted, 200);
  EXPECT_EQ(model.prefetched(6) + model.prefetched(7), 0);
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

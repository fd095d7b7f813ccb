// Sliding-window layers kept as rings (KvCache, KvRing): the logits are those of the full cache with
// the window as a mask, bit for bit, over sequences many times longer than the ring, through prompt
// chunks, decode steps, speculative verification passes that run past the ring's end and their
// rollbacks; the memory is the window's; and a rollback the ring can no longer serve is refused (or,
// through KeepCachedPrefix, turned into a fresh start) rather than read stale rows.
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/synth.h"
#include "engine/model/cached_prefix.h"
#include "engine/model/kv_cache.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

// tiny-gptoss: 3 layers, sliding window 4 on layers 0 and 2, sinks, YaRN. Passes of up to 17 rows
// (kLogitRowsReserved, above the prefill chunk of 3 asked for) make a ring of 4 + 17 − 1 = 20 rows.
constexpr int64_t kWindow = 4, kPassRows = 17, kRingRows = kWindow + kPassRows - 1, kContext = 128;

std::shared_ptr<const LoadedModel> Model() {
  static const std::shared_ptr<const LoadedModel> model = [] {
    ModelSpec spec = SynthSpec("tiny-gptoss").value();
    auto m = SynthWeights(spec, DType::kF32, 11, 1);
    EXPECT_TRUE(m.ok()) << m.status();
    std::shared_ptr<LoadedModel> out = std::move(m).value();
    out->source = "synth:tiny-gptoss";
    return out;
  }();
  return model;
}

std::unique_ptr<Transformer> Make(Backend* be, bool ring, DType kv_type = DType::kF32) {
  TransformerOptions o;
  o.max_context = kContext;
  o.prefill_chunk = 3;
  o.sliding_window_ring = ring;
  o.kv_type = kv_type;
  auto t = Transformer::Create(Model(), be, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + salt * 101) % 300);
  return t;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Both models run the same calls; every call's logits must be the same bits.
struct Pair {
  CpuBackend be{1};
  std::unique_ptr<Transformer> ring = Make(&be, true), full = Make(&be, false);

  void Forward(const std::vector<int32_t>& tokens, const std::string& what) {
    std::vector<float> a, b;
    ASSERT_TRUE(ring->Forward(tokens, &a).ok()) << what;
    ASSERT_TRUE(full->Forward(tokens, &b).ok()) << what;
    EXPECT_TRUE(BitEqual(a, b)) << what << " at " << full->n_past();
  }
  void Truncate(int64_t n) {
    ASSERT_TRUE(ring->Truncate(n).ok()) << n;
    ASSERT_TRUE(full->Truncate(n).ok()) << n;
  }
};

TEST(SlidingRing, SlidingLayersAreRingsOfTheWindowPlusAPass) {
  CpuBackend be(1);
  auto t = Make(&be, true);
  ASSERT_NE(t, nullptr);
  auto cache = t->NewKvCache();  // a cache like the model's own
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->ring_rows(0), kRingRows);
  EXPECT_EQ(cache->ring_rows(1), 0);  // a full-attention layer keeps every position
  EXPECT_EQ(cache->ring_rows(2), kRingRows);
  EXPECT_EQ(cache->k(0).rows(), kRingRows);
  EXPECT_EQ(cache->k(1).rows(), kContext);
  // Bytes: two ring layers of 20 rows and one of 128, K and V, f32 rows of Hkv·d = 32.
  const ModelSpec& spec = t->spec();
  EXPECT_EQ(KvCache::Bytes(3, kContext, spec.kv_dim(), DType::kF32, SlidingWindowRing(spec, kPassRows)),
            2.0 * (kRingRows + kContext + kRingRows) * 32 * 4);
  // At gpt-oss-120b's shape (36 layers, half sliding with window 128, a 256-row pass, 131072
  // positions) the sliding half holds 383 rows each instead of 131072.
  KvRing r;
  r.window.assign(36, 0);
  for (int l = 0; l < 36; l += 2) r.window[l] = 128;
  r.max_pass_rows = 256;
  EXPECT_EQ(r.RingRows(0, 131072), 383);
  EXPECT_EQ(r.RingRows(1, 131072), 0);
  EXPECT_EQ(r.RingRows(0, 300), 0);  // a ring as large as the context would save nothing
  // Without the ring option every layer keeps every position.
  auto full = Make(&be, false);
  ASSERT_NE(full, nullptr);
  auto fc = full->NewKvCache();
  ASSERT_TRUE(fc.ok());
  EXPECT_EQ(fc->ring_rows(0), 0);
  EXPECT_EQ(fc->k(0).rows(), kContext);
}

// A backend whose Attention takes no ring (Backend::SupportsKvRing false, as the CUDA backend): the
// Transformer keeps every position of a sliding layer even though the options ask for a ring, and its
// logits are the full cache's, bit for bit; it never hands such a backend an AttentionShape with a ring.
class NoRingBackend : public CpuBackend {
 public:
  NoRingBackend() : CpuBackend(1) {}
  bool SupportsKvRing() const override { return false; }
  absl::Status Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache, const AttentionShape& shape,
                         std::span<const uint8_t> mask, Buffer* out) override {
    if (shape.ring != 0) return absl::InternalError("a ring reached a backend without one");
    return CpuBackend::Attention(q, k_cache, v_cache, shape, mask, out);
  }
};

TEST(SlidingRing, ABackendWithoutRingsKeepsEveryPosition) {
  NoRingBackend be;
  auto t = Make(&be, /*ring=*/true);
  ASSERT_NE(t, nullptr);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(t->kv_cache().ring_rows(l), 0) << l;
    EXPECT_EQ(t->kv_cache().k(l).rows(), kContext) << l;
  }
  auto fresh = t->NewKvCache();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->ring_rows(0), 0);
  CpuBackend cpu(1);
  auto full = Make(&cpu, false);
  ASSERT_NE(full, nullptr);
  // Past the ring's 20 rows, so a ring would have wrapped: the same bits as the full cache.
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> tokens = Tokens(7, i);
    std::vector<float> a, b;
    ASSERT_TRUE(t->Forward(tokens, &a).ok()) << i;
    ASSERT_TRUE(full->Forward(tokens, &b).ok()) << i;
    EXPECT_TRUE(BitEqual(a, b)) << "pass " << i;
  }
}

// Prompt chunks, decode steps and verification passes with rollbacks, over 110 positions (five and a
// half times the ring): each pass's logits equal the full cache's. The pass sizes are chosen so that
// stores start at every offset of the ring and several run past its end (wrap), among them
// verification passes whose rollback lands before the ring's row 0 in memory.
TEST(SlidingRing, LogitsEqualTheMaskedFullCacheThroughWrapsAndRollbacks) {
  Pair p;
  ASSERT_NE(p.ring, nullptr);
  ASSERT_NE(p.full, nullptr);
  const std::vector<int32_t> prompt = Tokens(11, 1);
  p.Forward({prompt.begin(), prompt.begin() + 3}, "chunk 1");
  p.Forward({prompt.begin() + 3, prompt.begin() + 6}, "chunk 2");
  p.Forward({prompt.begin() + 6, prompt.end()}, "chunk 3");
  int salt = 2;
  int wraps = 0, rollbacks_over_the_end = 0;
  while (p.full->n_past() < 110) {
    const int64_t start = p.full->n_past();
    // A verification pass of k + 1 = 6 rows, of which 1 + (start % 5) are kept; then one decode step.
    const int64_t k1 = 6, keep = 1 + start % 5;
    if (start % kRingRows + k1 > kRingRows) {
      ++wraps;
      if ((start + keep) % kRingRows < start % kRingRows) ++rollbacks_over_the_end;
    }
    p.Forward(Tokens(static_cast<int>(k1), salt++), "verification at " + std::to_string(start));
    p.Truncate(start + keep);
    p.Forward(Tokens(1, salt++), "decode at " + std::to_string(start + keep));
    if (HasFailure()) return;
  }
  // A full pass of the ring's size into a non-empty cache: it overwrites 17 of 20 rows.
  p.Forward(Tokens(static_cast<int>(kPassRows), salt++), "a pass of 17");
  EXPECT_GE(wraps, 3);
  EXPECT_GE(rollbacks_over_the_end, 1);
  // The whole sequence again in one pass into the emptied cache: a pass larger than the ring was sized
  // for grows it (to 4 + 118 − 1 = 121 rows), and the logits still agree.
  p.Truncate(0);
  p.Forward(Tokens(118, 7), "one pass of 118");
}

// The same with a 16-bit cache: ring and full cache round the same rows the same way.
TEST(SlidingRing, Bf16RingEqualsBf16FullCache) {
  CpuBackend be(1);
  auto ring = Make(&be, true, DType::kBF16), full = Make(&be, false, DType::kBF16);
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(full, nullptr);
  std::vector<float> a, b;
  for (int step = 0; step < 12; ++step) {
    const std::vector<int32_t> t = Tokens(1 + step % 7, step);
    ASSERT_TRUE(ring->Forward(t, &a).ok());
    ASSERT_TRUE(full->Forward(t, &b).ok());
    EXPECT_TRUE(BitEqual(a, b)) << "step " << step;
  }
  EXPECT_GT(full->n_past(), 2 * kRingRows);
}

// A token tree (several branches at the same depth) verified over a ring that wraps inside the pass.
TEST(SlidingRing, TreeVerificationOverAWrappingRingEqualsTheFullCache) {
  Pair p;
  ASSERT_NE(p.ring, nullptr);
  p.Forward(Tokens(16, 3), "prefix");  // rows 0..15: the tree's 6 rows take ring rows 16..19, 0, 1
  const int32_t base = static_cast<int32_t>(p.full->n_past());
  // Root, two children of the root, one grandchild under each child, and one more under the first.
  const std::vector<int32_t> tokens = {5, 9, 13, 21, 34, 55};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 2, 3};
  std::vector<int32_t> positions(6);
  std::vector<uint8_t> mask(36, 0);
  for (int i = 0; i < 6; ++i) {
    positions[i] = parent[i] < 0 ? base : positions[parent[i]] + 1;
    for (int j = i; j >= 0; j = parent[j]) mask[i * 6 + j] = 1;
  }
  std::vector<float> a, b;
  ASSERT_TRUE(p.ring->ForwardMasked(tokens, positions, mask, &a).ok());
  ASSERT_TRUE(p.full->ForwardMasked(tokens, positions, mask, &b).ok());
  EXPECT_TRUE(BitEqual(a, b));
}

// Several sequences in one pass (`specgen serve`), each with a ring cache of its own (NewKvCache):
// every row equals the full-cache model's, over enough passes that each ring wraps.
TEST(SlidingRing, SequencesWithRingCachesEqualTheFullCache) {
  CpuBackend be(1);
  auto ring = Make(&be, true), full = Make(&be, false);
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(full, nullptr);
  std::vector<KvCache> rc, fc;
  for (int i = 0; i < 2; ++i) {
    rc.push_back(ring->NewKvCache().value());
    fc.push_back(full->NewKvCache().value());
  }
  ASSERT_EQ(rc[0].ring_rows(0), kRingRows);
  std::vector<float> a, b;
  for (int pass = 0; pass < 9; ++pass) {
    // Sequence 0 takes 5 positions a pass, sequence 1 takes 3: both run past their ring's end.
    const std::vector<int32_t> t0 = Tokens(5, 50 + pass), t1 = Tokens(3, 70 + pass);
    std::vector<Transformer::SequenceRows> rs = {{t0, &rc[0]}, {t1, &rc[1]}};
    std::vector<Transformer::SequenceRows> fs = {{t0, &fc[0]}, {t1, &fc[1]}};
    ASSERT_TRUE(ring->ForwardSequences(rs, &a).ok()) << pass;
    ASSERT_TRUE(full->ForwardSequences(fs, &b).ok()) << pass;
    EXPECT_TRUE(BitEqual(a, b)) << "pass " << pass;
  }
  EXPECT_EQ(rc[0].size(), 45);
  EXPECT_GT(rc[1].size(), kRingRows);
}

// A rollback far behind the newest position: the ring has overwritten what position n sees, so
// Truncate refuses it by name, KeepablePrefix says 0, and KeepCachedPrefix (a new chat turn sharing
// an early prefix) starts afresh, after which the logits are the full cache's again.
TEST(SlidingRing, RollbackBeyondTheRingIsRefusedOrStartsAfresh) {
  Pair p;
  ASSERT_NE(p.ring, nullptr);
  std::vector<int32_t> history;
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t> t = Tokens(15, 20 + i);
    p.Forward(t, "history");
    history.insert(history.end(), t.begin(), t.end());
  }
  ASSERT_EQ(p.ring->n_past(), 60);
  // Rows of positions 40..59 are in the ring: position 57 sees 54..57, kept; position 30 sees 27..30.
  EXPECT_EQ(p.ring->KeepablePrefix(57), 57);
  EXPECT_EQ(p.ring->KeepablePrefix(30), 0);
  EXPECT_EQ(p.full->KeepablePrefix(30), 30);
  const absl::Status st = p.ring->Truncate(30);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(std::string(st.message()).find("sliding-window ring"), std::string::npos) << st;
  EXPECT_EQ(p.ring->n_past(), 60);  // unchanged

  // A new turn whose first 30 tokens are the history's.
  std::vector<int32_t> turn(history.begin(), history.begin() + 30);
  const std::vector<int32_t> more = Tokens(5, 40);
  turn.insert(turn.end(), more.begin(), more.end());
  std::vector<int32_t> cached_ring = history, cached_full = history;
  auto kept_ring = KeepCachedPrefix(*p.ring, &cached_ring, turn, true);
  auto kept_full = KeepCachedPrefix(*p.full, &cached_full, turn, true);
  ASSERT_TRUE(kept_ring.ok()) << kept_ring.status();
  ASSERT_TRUE(kept_full.ok()) << kept_full.status();
  EXPECT_EQ(*kept_ring, 0u);
  EXPECT_EQ(*kept_full, 30u);
  std::vector<float> a, b, rest;
  for (size_t i = 0; i < 30; i += 15) {  // the ring's model feeds the shared prefix again
    ASSERT_TRUE(p.ring->Forward(std::vector<int32_t>(turn.begin() + i, turn.begin() + i + 15), &rest).ok());
  }
  ASSERT_TRUE(p.ring->Forward(more, &a).ok());
  ASSERT_TRUE(p.full->Forward(more, &b).ok());
  EXPECT_TRUE(BitEqual(a, b));
}

// A pass larger than the ring was sized for, into a cache that already holds positions, cannot be
// stored without overwriting rows it reads: refused, naming the limit.
TEST(SlidingRing, OversizedPassIntoANonEmptyCacheIsAnError) {
  CpuBackend be(1);
  auto t = Make(&be, true);
  ASSERT_NE(t, nullptr);
  std::vector<float> logits;
  ASSERT_TRUE(t->Forward(Tokens(3, 1), &logits).ok());
  const absl::Status st = t->Forward(Tokens(static_cast<int>(kPassRows) + 1, 2), &logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("exceeds the 17"), std::string::npos) << st;
}

// The attention's own check: a ring needs a window, and a query must not see a row the ring no longer
// holds.
TEST(SlidingRing, AttentionRefusesRowsTheRingNoLongerHolds) {
  CpuBackend be(1);
  auto q = be.NewBuffer(1, 16).value();
  auto out = be.NewBuffer(1, 16).value();
  auto k = be.NewCacheBuffer(8, 16, DType::kF32).value();
  auto v = be.NewCacheBuffer(8, 16, DType::kF32).value();
  std::vector<float> zeros(16, 0.0f);
  ASSERT_TRUE(be.Write(zeros, q.get()).ok());
  AttentionShape s;
  s.n_heads = s.n_kv_heads = 1;
  s.head_dim = 16;
  s.scale = 0.25f;
  s.ring = 8;
  s.n_prefix = 20;  // the ring holds rows 13..20 after the batch's one row
  const int32_t pos = 20;
  s.positions = {&pos, 1};
  EXPECT_FALSE(be.Attention(*q, *k, *v, s, {}, out.get()).ok());  // no window
  s.window = 8;  // sees 13..20: all there
  EXPECT_TRUE(be.Attention(*q, *k, *v, s, {}, out.get()).ok());
  s.window = 9;  // sees 12..20: row 12 was overwritten by row 20
  const absl::Status st = be.Attention(*q, *k, *v, s, {}, out.get());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("holds rows from 13"), std::string::npos) << st;
}

}  // namespace
}  // namespace specgen

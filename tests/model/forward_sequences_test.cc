// Transformer::ForwardSequences, several sequences in one pass with a KV cache each: every row's
// logits are bit-identical to the same sequence's own Forward (the CPU reduces every row in one fixed
// order and each sequence attends to its own cache alone), through prefill, a verification-sized
// step, a rollback and a replay; the model's own cache is left alone; bad input is refused.
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

struct Variant {
  const char* name;
  ModelSpec (*make)();
};
ModelSpec TinyMoe() { return SynthSpec("tiny-moe").value(); }
ModelSpec TinyDense() { return SynthSpec("tiny-dense").value(); }
ModelSpec MoeWithDenseLayer() {
  ModelSpec s = TinyMoe();
  s.layer_is_moe[1] = false;
  return s;
}

std::vector<int32_t> Tokens(int n, int64_t vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + salt * 101) % vocab);
  return t;
}

bool BitEqual(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ForwardSequences : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    auto m = SynthWeights(GetParam().make(), DType::kF32, 7, 1);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m).value();
    v_ = model_->spec.vocab_size;
  }
  std::unique_ptr<Transformer> Make() {
    TransformerOptions o;
    o.max_context = 48;
    o.kv_type = DType::kF16;  // rounding on store: the caches must round alike too
    auto t = Transformer::Create(model_, &backend_, o);
    EXPECT_TRUE(t.ok()) << t.status();
    return std::move(t).value();
  }

  CpuBackend backend_{2};
  std::shared_ptr<const LoadedModel> model_;
  int64_t v_ = 0;
};

// One pass over the chunks[i] of every sequence against each sequence's own Forward of them.
void ExpectPassEqualsAlone(Transformer& multi, std::vector<KvCache>& caches,
                           std::vector<std::unique_ptr<Transformer>>& alone,
                           const std::vector<std::vector<int32_t>>& chunks, int64_t v, const char* what) {
  std::vector<Transformer::SequenceRows> seqs;
  for (size_t i = 0; i < chunks.size(); ++i) seqs.push_back({chunks[i], &caches[i]});
  std::vector<float> logits;
  ASSERT_TRUE(multi.ForwardSequences(seqs, &logits).ok());
  size_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    std::vector<float> own;
    ASSERT_TRUE(alone[i]->Forward(chunks[i], &own).ok());
    EXPECT_TRUE(BitEqual(std::span(logits).subspan(row * v, chunks[i].size() * v), own))
        << what << ": sequence " << i;
    EXPECT_EQ(caches[i].size(), alone[i]->n_past()) << what;
    row += chunks[i].size();
  }
  EXPECT_EQ(logits.size(), row * v);
}

TEST_P(ForwardSequences, EveryRowEqualsItsSequenceAlone) {
  auto multi = Make();
  std::vector<std::unique_ptr<Transformer>> alone;
  std::vector<KvCache> caches;
  for (int i = 0; i < 3; ++i) {
    alone.push_back(Make());
    auto c = multi->NewKvCache();
    ASSERT_TRUE(c.ok()) << c.status();
    caches.push_back(std::move(c).value());
  }
  // Prompts of different lengths (prefill), then a verification step of k + 1 = 1, 5 and 3.
  ExpectPassEqualsAlone(*multi, caches, alone, {Tokens(7, v_, 0), Tokens(3, v_, 1), Tokens(12, v_, 2)}, v_,
                        "prefill");
  ExpectPassEqualsAlone(*multi, caches, alone, {Tokens(1, v_, 3), Tokens(5, v_, 4), Tokens(3, v_, 5)}, v_, "step");
  // Each rolls back its rejected drafts by itself, then one more step (sequence 1 sits this one out).
  ASSERT_TRUE(caches[1].Truncate(5).ok());
  ASSERT_TRUE(alone[1]->Truncate(5).ok());
  ASSERT_TRUE(caches[2].Truncate(13).ok());
  ASSERT_TRUE(alone[2]->Truncate(13).ok());
  std::vector<KvCache> two;
  two.push_back(std::move(caches[0]));
  two.push_back(std::move(caches[2]));
  std::vector<std::unique_ptr<Transformer>> two_alone;
  two_alone.push_back(std::move(alone[0]));
  two_alone.push_back(std::move(alone[2]));
  ExpectPassEqualsAlone(*multi, two, two_alone, {Tokens(4, v_, 6), Tokens(2, v_, 7)}, v_, "after rollback");
  EXPECT_EQ(multi->n_past(), 0);  // the model's own cache was never used
}

TEST_P(ForwardSequences, BadInputIsRefused) {
  auto multi = Make();
  auto a = multi->NewKvCache();
  auto b = multi->NewKvCache();
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<int32_t> t = Tokens(3, v_, 0);
  const std::vector<int32_t> too_long = Tokens(49, v_, 0);
  const std::vector<int32_t> bad = {0, static_cast<int32_t>(v_)};
  std::vector<float> logits;
  auto refused = [&](std::vector<Transformer::SequenceRows> s) {
    return multi->ForwardSequences(s, &logits).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused({}));
  EXPECT_TRUE(refused({{t, &*a}, {t, &*a}}));        // one cache twice
  EXPECT_TRUE(refused({{t, &multi->kv_cache()}}));  // the model's own
  EXPECT_TRUE(refused({{t, nullptr}}));
  EXPECT_TRUE(refused({{{}, &*a}}));
  EXPECT_TRUE(refused({{t, &*a}, {too_long, &*b}}));
  EXPECT_TRUE(refused({{bad, &*a}}));
  EXPECT_EQ(a->size(), 0);  // nothing half done
  EXPECT_EQ(b->size(), 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, ForwardSequences,
                         ::testing::Values(Variant{"tiny_moe", TinyMoe}, Variant{"tiny_dense", TinyDense},
                                           Variant{"moe_dense_layer", MoeWithDenseLayer}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace specgen

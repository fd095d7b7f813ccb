// The KV cache stored in f16 or bf16 (TransformerOptions::kv_type, --cache-type) on the CPU reference:
// the forward pass's invariants hold bit for bit (each stored value is rounded on its own, whatever the
// batch), the logits move from the fp32 cache's by what the rounding explains, and a type that is no
// cache type is refused.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

std::shared_ptr<const LoadedModel> Build(const std::string& preset) {
  auto m = SynthWeights(SynthSpec(preset).value(), DType::kF32, 11, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  std::shared_ptr<LoadedModel> model = std::move(m).value();
  model->source = "synth:" + preset;
  return model;
}

std::vector<int32_t> Tokens(int n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 53 + 7) % vocab);
  return t;
}

class KvCacheTypes : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Build(GetParam()); }
  std::unique_ptr<Transformer> Make(DType kv_type) {
    TransformerOptions o;
    o.max_context = 96;
    o.kv_type = kv_type;
    auto t = Transformer::Create(model_, &backend_, o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  std::vector<float> Logits(DType kv_type, const std::vector<int32_t>& tokens) {
    auto lm = Make(kv_type);
    std::vector<float> logits;
    EXPECT_TRUE(lm->Forward(tokens, &logits).ok());
    return logits;
  }

  CpuBackend backend_{2};
  std::shared_ptr<const LoadedModel> model_;
};

// Decoding one token at a time and in a batch store the same rounded rows: the same bits, as with fp32.
TEST_P(KvCacheTypes, IncrementalDecodeEqualsFullSequenceBitExact) {
  const int64_t v = model_->spec.vocab_size;
  const auto tokens = Tokens(20, v);
  for (const DType type : {DType::kF16, DType::kBF16}) {
    const auto full = Logits(type, tokens);
    auto lm = Make(type);
    ASSERT_EQ(lm->kv_cache().dtype(), type);
    std::vector<float> logits;
    ASSERT_TRUE(lm->Forward(std::span(tokens).first(7), &logits).ok());
    for (int i = 7; i < 20; ++i) {
      ASSERT_TRUE(lm->Forward(std::span(tokens).subspan(i, 1), &logits).ok());
      ASSERT_EQ(std::memcmp(logits.data(), full.data() + i * v, v * sizeof(float)), 0)
          << Name(type) << " position " << i;
    }
  }
}

// Rounding K and V to f16 (unit roundoff 2^-11) moves the logits, to first order, by a linear function
// of the rounding errors; bf16's (2^-8) are 8 times larger, so the f16 cache's largest logit change is
// expected at about an eighth of the bf16 cache's. Asserted: it is not zero (the rows were rounded), at
// most half the bf16 change (a 4x margin over the expected ratio for the spread of the individual
// roundings; a cache rounded to 8 bits instead of 11 fails), and below 2^-11 relative to the logits'
// range per layer times 32 (each layer's attention output moves by at most about 3 · 2^-11 of its
// values, see the CpuOps cache test, and the following projections and norms may amplify that by a few:
// a gross error, such as the wrong half of a value stored, fails).
TEST_P(KvCacheTypes, RoundedCacheMovesTheLogitsByWhatTheRoundingExplains) {
  const auto tokens = Tokens(40, model_->spec.vocab_size);
  const auto f32 = Logits(DType::kF32, tokens), f16 = Logits(DType::kF16, tokens),
             bf16 = Logits(DType::kBF16, tokens);
  ASSERT_EQ(f32.size(), f16.size());
  double d16 = 0, dbf = 0, range = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_TRUE(std::isfinite(f16[i]) && std::isfinite(bf16[i])) << i;
    d16 = std::max(d16, std::fabs(double(f16[i]) - f32[i]));
    dbf = std::max(dbf, std::fabs(double(bf16[i]) - f32[i]));
    range = std::max(range, std::fabs(double(f32[i])));
  }
  std::printf("%s: the f16 cache moved the logits by %.3g, bf16 by %.3g (logit range %.3g)\n",
              GetParam().c_str(), d16, dbf, range);
  EXPECT_GT(d16, 0.0);
  EXPECT_LE(d16, dbf / 2) << "f16 moved the logits by " << d16 << ", bf16 by " << dbf;
  EXPECT_LE(d16, 32.0 * model_->spec.n_layers * 0x1p-11 * range) << "range " << range;
}

INSTANTIATE_TEST_SUITE_P(Presets, KvCacheTypes, ::testing::Values("tiny-moe", "tiny-dense"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(KvCacheType, ANonCacheTypeIsRefusedWithItsName) {
  CpuBackend backend(1);
  TransformerOptions o;
  o.max_context = 16;
  o.kv_type = DType::kQ8_0;
  auto t = Transformer::Create(Build("tiny-dense"), &backend, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("q8_0"), std::string::npos) << t.status();
  EXPECT_EQ(KvCache::Bytes(2, 10, 8, DType::kF16) * 2, KvCache::Bytes(2, 10, 8, DType::kF32));
  EXPECT_EQ(KvCache::Bytes(2, 10, 8, DType::kBF16), 2.0 * 2 * 10 * 8 * 2);
}

}  // namespace
}  // namespace specgen

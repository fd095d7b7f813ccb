// The CPU backend keeps block-quantized weights packed (f16/bf16 are dequantized at upload). Over a
// prefill and the decode steps after it, for a MoE model whose experts, attention, embeddings and head
// are packed, the logits equal those of the same weights dequantized to f32 before upload: bit for bit
// where the products dequantize (bf16, f16), and within the activation quantization's bound where they
// take the packed product's one definition (engine/core/packed_product.h).
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/packed_product.h"
#include "engine/core/quant.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

// `m` with every tensor replaced by an f32 copy of what it dequantizes to.
std::shared_ptr<const LoadedModel> Dequantized(const LoadedModel& m) {
  auto out = std::make_shared<LoadedModel>();
  out->spec = m.spec;
  out->source = m.source + " dequantized";
  auto store = std::make_shared<std::deque<std::vector<float>>>();
  for (const auto& [key, v] : m.weights.tensors()) {
    const int64_t cols = v.cols();
    const int64_t rows = v.ndim == 2 ? v.shape[0] : 1;
    std::vector<float>& f32 = store->emplace_back(static_cast<size_t>(rows * cols));
    EXPECT_TRUE(DequantizeRows(v.dtype, v.data, rows, cols, f32.data()).ok()) << KeyString(key);
    TensorView f = v;
    f.dtype = DType::kF32;
    f.data = f32.data();
    f.bytes = f32.size() * sizeof(float);
    out->weights.Add(key, f, std::string(m.weights.SourceName(key)));
  }
  out->weights.KeepAlive(store);
  return out;
}

// Logits of a 5-token prefill and then 3 single-token steps, concatenated.
std::vector<float> RunSteps(std::shared_ptr<const LoadedModel> model, Backend* be) {
  auto lm = Transformer::Create(std::move(model), be);
  EXPECT_TRUE(lm.ok()) << lm.status();
  if (!lm.ok()) return {};
  std::vector<float> all, logits;
  EXPECT_TRUE((*lm)->Forward(std::vector<int32_t>{1, 7, 42, 99, 3}, &logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  for (int32_t t : {5, 250, 17}) {
    EXPECT_TRUE((*lm)->Forward(std::vector<int32_t>{t}, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST(PackedWeights, ModelLogitsEqualDequantizedAtLoad) {
  ModelSpec spec = SynthSpec("tiny-moe").value();
  spec.hidden = 256;  // rows of 256: the K-quant blocks hold whole rows of the hidden-size inputs
  spec.expert_ffn_dim = 256;
  CpuBackend be(2);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kMXFP4, DType::kBF16, DType::kF16}) {
    auto packed = SynthWeights(spec, t, 5, 2);
    ASSERT_TRUE(packed.ok()) << packed.status();
    std::shared_ptr<const LoadedModel> packed_model = std::move(packed).value();
    bool any_packed = false;
    for (const auto& [key, v] : packed_model->weights.tensors()) any_packed |= v.ndim == 2 && v.dtype == t;
    ASSERT_TRUE(any_packed) << Name(t) << ": the synth model holds no matrix of this type";
    auto lm = Transformer::Create(packed_model, &be);
    ASSERT_TRUE(lm.ok()) << lm.status();
    EXPECT_EQ(CpuBackend::IsPacked((*lm)->token_embedding()), Info(t).quantized) << Name(t);
    const std::vector<float> got = RunSteps(packed_model, &be);
    const std::vector<float> want = RunSteps(Dequantized(*packed_model), &be);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(got.empty());
    if (!packed_product::Covers(t)) {
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << Name(t);
      continue;
    }
    // The packed product quantizes each product's input to int8 per 32-block: a relative error of
    // about (max|x| / 127) / sqrt(12) / rms(x) ≈ 3 / 127 / 3.5 ≈ 0.7% a product (normal inputs, max
    // near 3 rms). This model chains at most 9 products from embedding to logit (2 layers of q/k/v,
    // o, gate/up, down, then the head); adding their errors linearly bounds the logits' relative RMS
    // error by about 6%: 0.1 leaves room, while a wrong block or scale gives errors of order 1.
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      ref += double(want[i]) * want[i];
    }
    EXPECT_LT(std::sqrt(err / ref), 0.1) << Name(t);
  }
}

}  // namespace
}  // namespace specgen

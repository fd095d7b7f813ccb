// The speculative loop with the real CPU Transformer as target (synth:tiny-moe) and as draft (the
// same model with perturbed logits, and tiny-dense, a different model of the same vocabulary):
// greedy and `coupled` outputs equal plain decoding, a rolled-back cache continues exactly like a
// fresh one, and the acceptance rule reproduces the tiny model's own distribution at a fixed prefix.
#include <memory>

#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/sampling/acceptance.h"
#include "engine/sampling/distribution.h"
#include "engine/sampling/keyed_random.h"
#include "engine/speculative/speculative_decoder.h"
#include "gtest/gtest.h"
#include "tests/common/cpu_lm.h"
#include "tests/common/chi_square.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

using ::specgen::testing::ChiSquareTest;
using ::specgen::testing::LoadCpuLm;
using ::specgen::testing::kFalseFailureRate;

constexpr int64_t kContext = 128;

// A draft close to, but not equal to, its inner model: logits + eps · noise(position, id).
class PerturbedLm : public CausalLm {
 public:
  PerturbedLm(std::unique_ptr<CausalLm> inner, float eps) : inner_(std::move(inner)), eps_(eps) {}
  const ModelSpec& spec() const override { return inner_->spec(); }
  int64_t n_past() const override { return inner_->n_past(); }
  int64_t max_context() const override { return inner_->max_context(); }
  absl::Status Truncate(int64_t n) override { return inner_->Truncate(n); }
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    const int64_t first = inner_->n_past();
    RETURN_IF_ERROR(inner_->Forward(tokens, logits));
    const int64_t v = vocab_size();
    for (size_t i = 0; i < tokens.size(); ++i) {
      for (int64_t j = 0; j < v; ++j) {
        const double u = KeyedUniform(static_cast<uint64_t>(j), first + i, RandomPurpose::kResidual);
        (*logits)[i * v + j] += eps_ * static_cast<float>(2 * u - 1);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<CausalLm> inner_;
  float eps_;
};

class TransformerPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = LoadCpuLm("synth:tiny-moe", &backend_, kContext);
    auto close_inner = LoadCpuLm("synth:tiny-moe", &backend_, kContext);
    other_draft_ = LoadCpuLm("synth:tiny-dense", &backend_, kContext);
    ASSERT_TRUE(target_ && close_inner && other_draft_);
    close_draft_ = std::make_unique<PerturbedLm>(std::move(close_inner), 1.0f);
  }

  std::vector<int32_t> Run(CausalLm* draft, SpeculativeOptions options,
                           const std::vector<int32_t>& prompt, SpeculativeStats* stats = nullptr) {
    ModelProposer proposer(draft, target_->vocab_size(), options.sampling, options.accept);
    SpeculativeDecoder decoder(target_.get(), draft ? &proposer : nullptr, options);
    auto out = decoder.Generate(prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (stats) *stats = decoder.stats();
    return out.ok() ? *out : std::vector<int32_t>{};
  }

  CpuBackend backend_{1};
  std::unique_ptr<Transformer> target_;
  std::unique_ptr<CausalLm> close_draft_;
  std::unique_ptr<Transformer> other_draft_;
};

SpeculativeOptions Options(SamplingParams sampling, int k, bool adaptive = false,
                           AcceptMode mode = AcceptMode::kRejection) {
  return testing::MakeSpeculativeOptions(sampling, k, adaptive, mode, 24);
}

const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 17, 42}, {1, 250, 3, 99, 7}, {5}, {1, 8, 8, 8, 8, 8, 8, 8, 8, 123}, {299, 0, 150}};

TEST_F(TransformerPairTest, GreedyEqualsTargetOnlyGreedyForEveryDraftLength) {
  const auto greedy = SamplingParams::Greedy();
  int64_t accepted = 0;
  for (const auto& prompt : kPrompts) {
    const auto plain = Run(nullptr, Options(greedy, 0), prompt);
    ASSERT_EQ(plain.size(), 24u);
    for (CausalLm* draft : {close_draft_.get(), static_cast<CausalLm*>(other_draft_.get())}) {
      for (int k = 1; k <= 8; ++k) {
        SpeculativeStats stats;
        EXPECT_EQ(Run(draft, Options(greedy, k), prompt, &stats), plain) << "k=" << k;
        accepted += stats.accepted;
      }
      EXPECT_EQ(Run(draft, Options(greedy, 8, true), prompt), plain) << "adaptive";
    }
  }
  EXPECT_GT(accepted, 0);  // the close draft's tokens were actually used
}

// GLM-4.5 and gpt-oss shapes (tiny presets: sigmoid routing with groups, shared experts, biases, sinks,
// a sliding window of 4 that a 24-token run crosses many times, YaRN): verifying k drafts at once and
// rolling back what is rejected gives target-only greedy output token for token, every draft length.
TEST(TransformerPairNewArchs, GreedyEqualsTargetOnlyGreedy) {
  for (const char* preset : {"synth:tiny-gptoss", "synth:tiny-glm4moe"}) {
    CpuBackend backend(1);
    auto target = LoadCpuLm(preset, &backend, kContext);
    auto inner = LoadCpuLm(preset, &backend, kContext);
    ASSERT_TRUE(target && inner) << preset;
    PerturbedLm draft(std::move(inner), 1.0f);
    const auto greedy = SamplingParams::Greedy();
    int64_t accepted = 0;
    for (const auto& prompt : kPrompts) {
      auto run = [&](CausalLm* d, int k, SpeculativeStats* stats) {
        SpeculativeOptions options = Options(greedy, k);
        ModelProposer proposer(d, target->vocab_size(), options.sampling, options.accept);
        SpeculativeDecoder decoder(target.get(), d ? &proposer : nullptr, options);
        auto out = decoder.Generate(prompt);
        EXPECT_TRUE(out.ok()) << preset << ": " << out.status();
        if (stats) *stats = decoder.stats();
        return out.ok() ? *out : std::vector<int32_t>{};
      };
      const auto plain = run(nullptr, 0, nullptr);
      ASSERT_EQ(plain.size(), 24u) << preset;
      for (int k : {1, 3, 8}) {
        SpeculativeStats stats;
        EXPECT_EQ(run(&draft, k, &stats), plain) << preset << " k=" << k;
        accepted += stats.accepted;
      }
    }
    EXPECT_GT(accepted, 0) << preset;  // the close draft's tokens were actually used
  }
}

// The same identity with both models' KV caches in f16 and bf16 (--cache-type): rows rounded when
// stored are the same whatever pass stores them, so the rolled-back and re-verified caches still equal
// plain decoding's, and speculative greedy output equals target-only greedy token for token.
TEST(TransformerPairCacheTypes, GreedyEqualsTargetOnlyGreedyWith16BitCaches) {
  CpuBackend backend(1);
  const auto greedy = SamplingParams::Greedy();
  for (const DType type : {DType::kF16, DType::kBF16}) {
    auto target = LoadCpuLm("synth:tiny-moe", &backend, kContext, type);
    auto close_inner = LoadCpuLm("synth:tiny-moe", &backend, kContext, type);
    auto other = LoadCpuLm("synth:tiny-dense", &backend, kContext, type);
    ASSERT_TRUE(target && close_inner && other);
    ASSERT_EQ(target->kv_cache().dtype(), type);
    PerturbedLm close(std::move(close_inner), 1.0f);
    const auto run = [&](CausalLm* draft, const SpeculativeOptions& options, const std::vector<int32_t>& prompt,
                         SpeculativeStats* stats) {
      ModelProposer proposer(draft, target->vocab_size(), options.sampling, options.accept);
      SpeculativeDecoder decoder(target.get(), draft ? &proposer : nullptr, options);
      auto out = decoder.Generate(prompt);
      EXPECT_TRUE(out.ok()) << out.status();
      if (stats) *stats = decoder.stats();
      return out.ok() ? *out : std::vector<int32_t>{};
    };
    int64_t accepted = 0;
    for (const auto& prompt : kPrompts) {
      const auto plain = run(nullptr, Options(greedy, 0), prompt, nullptr);
      ASSERT_EQ(plain.size(), 24u);
      for (CausalLm* draft : {static_cast<CausalLm*>(&close), static_cast<CausalLm*>(other.get())}) {
        for (int k : {1, 3, 4, 8}) {
          SpeculativeStats stats;
          EXPECT_EQ(run(draft, Options(greedy, k), prompt, &stats), plain) << Name(type) << " k=" << k;
          accepted += stats.accepted;
        }
      }
    }
    EXPECT_GT(accepted, 0) << Name(type);
  }
}

TEST_F(TransformerPairTest, CoupledOutputPerSeedEqualsPlainDecoding) {
  for (float temp : {0.7f, 1.0f}) {
    SamplingParams params;  // top-k 40, top-p 0.95, min-p 0.05
    params.temperature = temp;
    for (uint64_t seed : {3ull, 4ull}) {
      params.seed = seed;
      const auto plain = Run(nullptr, Options(params, 0, false, AcceptMode::kCoupled), kPrompts[1]);
      for (int k : {2, 5}) {
        EXPECT_EQ(Run(close_draft_.get(), Options(params, k, false, AcceptMode::kCoupled), kPrompts[1]),
                  plain)
            << "temp " << temp << " seed " << seed << " k " << k;
      }
    }
  }
}

TEST_F(TransformerPairTest, RolledBackCacheContinuesLikeAFreshOne) {
  // After verifying [last, d1, d2, d3] and accepting only d1, the next step's logits must equal those
  // of a cache that never saw d2, d3. Rows are reduced in one order whatever the batch (docs/design.md §6.6,
  // batch invariance), so the comparison is exact.
  const std::vector<int32_t> prompt = {1, 17, 42, 9};
  std::vector<float> logits, after_rollback, fresh;
  ASSERT_TRUE(target_->Truncate(0).ok());
  ASSERT_TRUE(target_->Forward(std::span(prompt).first(3), &logits).ok());
  ASSERT_TRUE(target_->Forward(std::vector<int32_t>{9, 77, 78, 79}, &logits).ok());
  ASSERT_TRUE(target_->Truncate(5).ok());  // keeps prompt + d1 = 77
  ASSERT_TRUE(target_->Forward(std::vector<int32_t>{200}, &after_rollback).ok());

  ASSERT_TRUE(target_->Truncate(0).ok());
  ASSERT_TRUE(target_->Forward(std::vector<int32_t>{1, 17, 42, 9, 77}, &logits).ok());
  ASSERT_TRUE(target_->Forward(std::vector<int32_t>{200}, &fresh).ok());
  EXPECT_EQ(after_rollback, fresh);
}

TEST_F(TransformerPairTest, AcceptanceReproducesTheTinyModelsDistributionAtAFixedPrefix) {
  // p from tiny-moe and q from tiny-dense after the same prefix, both top-k 8 at temperature 1.5 (so
  // q puts mass where p is 0); cells expected below 100 draws are pooled to keep χ² asymptotics.
  const std::vector<int32_t> prefix = {1, 250, 3, 99, 7};
  SamplingParams params = SamplingParams::Plain(1.5f, 0);
  params.top_k = 8;
  std::vector<float> logits, p, q;
  ASSERT_TRUE(target_->Truncate(0).ok());
  ASSERT_TRUE(target_->Forward(prefix, &logits).ok());
  const int64_t v = target_->vocab_size();
  ProcessLogits(std::span<const float>(logits).subspan((prefix.size() - 1) * v, v), params, &p);
  ASSERT_TRUE(other_draft_->Truncate(0).ok());
  ASSERT_TRUE(other_draft_->Forward(prefix, &logits).ok());
  ProcessLogits(std::span<const float>(logits).subspan((prefix.size() - 1) * v, v), params, &q);

  constexpr int kTrials = 100000;
  std::vector<float> p_rows = p;
  p_rows.insert(p_rows.end(), p.begin(), p.end());
  std::vector<int64_t> counts(v, 0);
  int64_t accepted = 0;
  const int64_t pos = static_cast<int64_t>(prefix.size());
  for (int t = 0; t < kTrials; ++t) {
    params.seed = 104729ull * t + 5;
    const int32_t x[1] = {SampleDraft(AcceptMode::kRejection, q, params, pos)};
    const auto r = Accept(AcceptMode::kRejection, x, q, p_rows, v, params, pos);
    ++counts[r.tokens[0]];
    accepted += r.n_accepted;
  }
  std::vector<int64_t> pooled_counts;
  std::vector<double> pooled_probs;
  int64_t other_count = 0;
  double other_prob = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (p[i] * kTrials >= 100) {
      pooled_counts.push_back(counts[i]);
      pooled_probs.push_back(p[i]);
    } else if (p[i] > 0) {
      other_count += counts[i];
      other_prob += p[i];
    } else {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has p = 0";
    }
  }
  pooled_counts.push_back(other_count);
  pooled_probs.push_back(other_prob);
  const auto r = ChiSquareTest(pooled_counts, pooled_probs);
  EXPECT_GT(r.p_value, kFalseFailureRate) << "chi2 " << r.statistic << " dof " << r.dof;
  double overlap = 0;  // Σ min(p, q): the acceptance probability
  for (int64_t i = 0; i < v; ++i) overlap += std::min(p[i], q[i]);
  // Binomial sd ≤ √(N/4) = 158; 5.3 sd (p ≈ 1e-7) = 840.
  EXPECT_NEAR(accepted, overlap * kTrials, 840);
}

}  // namespace
}  // namespace specgen

// The bundled trained pair (models/tiny-target, models/tiny-draft) through the speculative loop:
// greedy output token-identical to target-only greedy for k = 1..8 and the adaptive controller, on
// the held-out prompts the training script measured (models/pair_prompts.json), and `coupled`
// sampling equal to plain sampling per seed. The pair is committed, so its absence fails.
#include <fstream>
#include <memory>

#include "draft/model_proposer.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "engine/speculative/speculative_decoder.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/cpu_lm.h"
#include "tests/common/speculative_options.h"

namespace specgen {
namespace {

const std::string kModels = std::string(SPECGEN_SOURCE_DIR) + "/models/";
constexpr int kPromptsUsed = 4;   // of the 32: keeps the test within a few seconds on 2 cores
constexpr int64_t kNewTokens = 24;
constexpr int64_t kContext = 256;

class BundledPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The pair is committed (models/): a missing file fails the load below rather than skipping.
    target_ = testing::LoadCpuLm(kModels + "tiny-target", &backend_, kContext);
    draft_ = testing::LoadCpuLm(kModels + "tiny-draft", &backend_, kContext);
    ASSERT_TRUE(target_ && draft_);
    std::ifstream prompts_file(kModels + "pair_prompts.json");
    ASSERT_TRUE(prompts_file) << "committed file missing: " << kModels << "pair_prompts.json";
    const auto json = nlohmann::json::parse(prompts_file);
    prompts_ = json.at("prompts").get<std::vector<std::vector<int32_t>>>();
    ASSERT_GE(prompts_.size(), static_cast<size_t>(kPromptsUsed));
    prompts_.resize(kPromptsUsed);
  }

  std::vector<int32_t> Run(int k, bool adaptive, SamplingParams sampling, AcceptMode mode,
                           const std::vector<int32_t>& prompt, SpeculativeStats* stats = nullptr) {
    const SpeculativeOptions o = testing::MakeSpeculativeOptions(sampling, k, adaptive, mode, kNewTokens);
    ModelProposer proposer(draft_.get(), target_->vocab_size(), sampling, mode);
    SpeculativeDecoder decoder(target_.get(), k > 0 ? &proposer : nullptr, o);
    auto out = decoder.Generate(prompt);
    EXPECT_TRUE(out.ok()) << out.status();
    if (stats) *stats = decoder.stats();
    return out.ok() ? *out : std::vector<int32_t>{};
  }

  CpuBackend backend_{0};
  std::unique_ptr<Transformer> target_, draft_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(BundledPairTest, GreedyEqualsTargetOnlyGreedy) {
  const auto greedy = SamplingParams::Greedy();
  int64_t accepted = 0;
  for (const auto& prompt : prompts_) {
    const auto plain = Run(0, false, greedy, AcceptMode::kRejection, prompt);
    ASSERT_EQ(plain.size(), static_cast<size_t>(kNewTokens));
    for (int k = 1; k <= 8; ++k) {
      SpeculativeStats stats;
      EXPECT_EQ(Run(k, false, greedy, AcceptMode::kRejection, prompt, &stats), plain) << "k=" << k;
      accepted += stats.accepted;
    }
    EXPECT_EQ(Run(8, true, greedy, AcceptMode::kRejection, prompt), plain) << "adaptive";
  }
  EXPECT_GT(accepted, 0);
}

TEST_F(BundledPairTest, CoupledEqualsPlainSamplingPerSeed) {
  int64_t accepted = 0;
  for (uint64_t seed : {1ull, 2ull}) {
    const auto params = SamplingParams::Plain(0.8f, seed);
    const auto plain = Run(0, false, params, AcceptMode::kCoupled, prompts_[0]);
    ASSERT_EQ(plain.size(), static_cast<size_t>(kNewTokens));
    SpeculativeStats stats;
    EXPECT_EQ(Run(4, false, params, AcceptMode::kCoupled, prompts_[0], &stats), plain) << seed;
    accepted += stats.accepted;
  }
  // Equality alone holds if every draft is rejected; the trained draft's tokens must be used.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace specgen
